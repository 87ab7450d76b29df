import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, json } from './harness.js';

/**
 * The operator's auto top-up routes (docs/operator.md; docs/billing.md, "Auto top-up"): the admin key,
 * any organization that exists, the flat /api/v1 shapes, reads audited as the operator's.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h?.close();
});

const url = (organizationId: string) => `/api/v1/admin/organizations/${organizationId}/auto-top-up`;
const SETTING = { enabled: false, below_credits: 500, pack: 'small', max_per_month: 5 };

describe('the operator auto top-up routes', () => {
  it('without the admin key, or with a wrong one, is 401 in the flat shape', async () => {
    const t = await createTenant(h);
    for (const headers of [{}, { 'x-admin-key': 'wrong-admin-key-0123456789' }]) {
      for (const res of [
        await h.request({ method: 'GET', url: url(t.organizationId), headers }),
        await h.request({ method: 'PUT', url: url(t.organizationId), headers, payload: SETTING }),
      ]) {
        expect(res.statusCode).toBe(401);
        expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
      }
    }
  });

  it('an organization that does not exist is 404 NOT_FOUND', async () => {
    const nobody = '6f1c3d2e-0000-4000-8000-000000000000';
    for (const res of [
      await h.request({ method: 'GET', url: url(nobody), headers: adminHeaders(h) }),
      await h.request({ method: 'PUT', url: url(nobody), headers: adminHeaders(h), payload: SETTING }),
    ]) {
      expect(res.statusCode, res.body).toBe(404);
      expect(json(res)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
    }
  });

  it('a read answers the flat setting and writes an audit row with actor operator', async () => {
    const t = await createTenant(h);
    const res = await h.request({ method: 'GET', url: url(t.organizationId), headers: adminHeaders(h) });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toEqual({
      enabled: false,
      below_credits: null,
      pack: null,
      max_per_month: null,
      consecutive_failures: 0,
      disabled_reason: null,
      updated_at: null,
    });
    const audit = await h.deps.db.query<{ actor: string; action: string; resource_id: string; user_id: string | null }>(
      `SELECT actor, action, resource_id, user_id FROM audit_logs WHERE organization_id = $1 AND resource_type = 'auto_top_up' ORDER BY created_at, id`,
      [t.organizationId],
    );
    expect(audit).toEqual([{ actor: 'operator', action: 'read', resource_id: t.organizationId, user_id: null }]);
  });

  it('a pack the service does not sell is 400 in the flat shape naming pack; a bad body is 400 before the service', async () => {
    const t = await createTenant(h);
    const unknownPack = await h.request({ method: 'PUT', url: url(t.organizationId), headers: adminHeaders(h), payload: SETTING });
    expect(unknownPack.statusCode, unknownPack.body).toBe(400);
    expect(json<{ fields: Array<{ field: string }> }>(unknownPack).fields.map((f) => f.field)).toContain('pack');
    const bad = await h.request({ method: 'PUT', url: url(t.organizationId), headers: adminHeaders(h), payload: { ...SETTING, max_per_month: 0 } });
    expect(bad.statusCode).toBe(400);
    expect(json(bad)).toMatchObject({ code: 'INVALID_REQUEST' });
  });
});
