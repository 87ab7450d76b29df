import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures, deploymentUrl, type Method, uniqueAction } from '../../../test/admin-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json, unique } from '../../../test/harness.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * operator authentication, checked before validation.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { view } = adminFixtures(() => h);

describe('operator authentication', () => {
  it('refuses a missing or wrong X-Admin-Key on every operator route with 401 and the flat body, changing nothing', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const action = uniqueAction('unauth-cost');
    const slug = uniqueAction('unauth-org');
    const routes: Array<{ method: Method; url: string; payload?: object }> = [
      { method: 'GET', url: '/api/v1/admin/deployments' },
      { method: 'GET', url: `/api/v1/admin/deployments?organization_id=${t.organizationId}` },
      { method: 'GET', url: deploymentUrl(t.deploymentId) },
      { method: 'PUT', url: deploymentUrl(t.deploymentId), payload: { tier: 'growth' } },
      { method: 'PUT', url: deploymentUrl(t.deploymentId, '/overrides'), payload: { monthly_credits: 5 } },
      { method: 'DELETE', url: deploymentUrl(t.deploymentId, '/overrides') },
      { method: 'PUT', url: deploymentUrl(t.deploymentId, '/flags'), payload: { white_label: true } },
      { method: 'POST', url: deploymentUrl(t.deploymentId, '/usage/reset'), payload: { monthly_credits: true } },
      { method: 'POST', url: deploymentUrl(t.deploymentId, '/credits'), payload: { amount: 10, reason: 'x' } },
      { method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, payload: { credits: 1 } },
      { method: 'PUT', url: `/api/v1/admin/tool-actions/${action}`, payload: { action: 'task_basic' } },
      { method: 'DELETE', url: `/api/v1/admin/tool-actions/${action}` },
      { method: 'PUT', url: `/api/v1/admin/users/${t.userId}/external-id`, payload: { external_id: unique('ext') } },
      { method: 'POST', url: '/api/v1/admin/organizations', payload: { name: 'Nope', slug } },
      { method: 'POST', url: `/api/v1/admin/organizations/${t.organizationId}/api-keys`, payload: { name: 'nope' } },
    ];
    const badHeaders: Array<Record<string, string>> = [
      {},
      { 'x-admin-key': 'wrong' },
      { 'x-admin-key': `${h.config.adminApiKey}x` },
      { 'x-admin-key': h.config.mcpServiceKey },
      bearer(h.config.adminApiKey),
    ];
    const before = await view(t.deploymentId);
    const writes = () =>
      h.deps.db.query(
        `SELECT 1 FROM audit_logs WHERE actor = 'operator' AND action <> 'read'
           AND (organization_id = $1 OR resource_id = ANY($2::text[]))`,
        [t.organizationId, [action, t.userId, t.deploymentId]],
      );
    const writesBefore = (await writes()).length;
    for (const route of routes) {
      for (const headers of badHeaders) {
        const res = await h.request({ method: route.method, url: route.url, headers, ...(route.payload ? { payload: route.payload } : {}) });
        const label = `${route.method} ${route.url} ${JSON.stringify(headers)}`;
        expect(res.statusCode, label).toBe(401);
        expect(json(res), label).toEqual({ error: 'unauthorized', code: 'UNAUTHORIZED', message: expect.any(String) });
      }
    }
    const after = await view(t.deploymentId);
    expect(after.tier).toBe('launch');
    expect(after.overrides).toEqual(before.overrides);
    expect(after.flag_overrides).toEqual({});
    expect(after.balance.purchased).toBe(0);
    expect(await h.deps.db.query('SELECT 1 FROM credit_costs WHERE action = $1', [action])).toEqual([]);
    expect(await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug])).toEqual([]);
    const users = await h.deps.db.query<{ external_id: string | null }>('SELECT external_id FROM users WHERE id = $1', [t.userId]);
    expect(users[0]?.external_id).toBeNull();
    // A refused call writes no audit row.
    expect(await writes()).toHaveLength(writesBefore);
  });
});

describe('operator authentication before validation', () => {
  it('answers 401, not 400, to a caller without the key even when the body or id is invalid', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const cases: Array<{ method: Method; url: string; payload?: object }> = [
      { method: 'PUT', url: deploymentUrl(t.deploymentId, '/overrides'), payload: { monthly_credits: -1 } },
      { method: 'PUT', url: deploymentUrl(t.deploymentId), payload: { tier: 'platinum' } },
      { method: 'GET', url: deploymentUrl('not-a-uuid') },
      { method: 'POST', url: '/api/v1/admin/organizations', payload: { slug: 'Bad Slug' } },
    ];
    for (const c of cases) {
      const res = await h.request({ method: c.method, url: c.url, headers: { 'x-admin-key': 'wrong' }, ...(c.payload ? { payload: c.payload } : {}) });
      expect(res.statusCode, `${c.method} ${c.url}`).toBe(401);
      expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
    }
  });
});
