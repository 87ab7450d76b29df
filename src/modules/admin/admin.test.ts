import { randomUUID } from 'node:crypto';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  serviceHeaders,
  unique,
} from '../../../test/harness.js';
import { DAY } from '../../clock.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import type { DeploymentView } from './service.js';

/** The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`. */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Method = NonNullable<InjectOptions['method']>;

const admin = (method: Method, url: string, payload?: object) =>
  h.request({ method, url, headers: adminHeaders(h), ...(payload === undefined ? {} : { payload }) });

const deploymentUrl = (id: string, rest = '') => `/api/v1/admin/deployments/${id}${rest}`;

async function view(deploymentId: string): Promise<DeploymentView> {
  const res = await admin('GET', deploymentUrl(deploymentId));
  expect(res.statusCode, res.body).toBe(200);
  return json<DeploymentView>(res);
}

const serviceCheck = (deploymentId: string, toolName = 'any-tool') =>
  h.request({
    method: 'POST',
    url: '/api/v1/mcp/check-entitlement',
    headers: serviceHeaders(h),
    payload: { deployment_id: deploymentId, tool_name: toolName },
  });

const serviceUsage = (deploymentId: string, toolName = 'any-tool') =>
  h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: deploymentId, tool_name: toolName } });

const resolve = (userId: string) =>
  h.request({ method: 'GET', url: `/api/v1/mcp/resolve-deployment?user_id=${encodeURIComponent(userId)}`, headers: serviceHeaders(h) });

const entitlements = (deploymentId: string, secret: string) =>
  h.request({ method: 'POST', url: '/api/v1/entitlements/check', payload: { deployment_id: deploymentId, deployment_secret: secret } });

/** An action name no other test (nor another file sharing the database) uses. */
const uniqueAction = (prefix: string) => unique(prefix).toLowerCase();

/** Spend exactly `credits` in one metered call, through an action of that cost created for it. */
async function spend(deploymentId: string, credits: number): Promise<void> {
  const action = uniqueAction('spend');
  expect((await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits })).statusCode).toBe(200);
  expect((await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action })).statusCode).toBe(200);
  const res = await serviceUsage(deploymentId, action);
  expect(json(res), res.body).toMatchObject({ success: true, credits_used: credits });
}

/** Audit rows written by the operator about one resource (optionally one action). */
async function operatorAudit(resourceType: string, resourceId: string, action?: string) {
  return h.deps.db.query<{ organization_id: string | null; action: string; metadata: Record<string, unknown> }>(
    `SELECT organization_id, action, metadata FROM audit_logs
     WHERE actor = 'operator' AND resource_type = $1 AND resource_id = $2 AND ($3::text IS NULL OR action = $3)`,
    [resourceType, resourceId, action ?? null],
  );
}

async function ledgerRows(deploymentId: string) {
  return h.deps.db.query<{
    kind: string;
    amount: number;
    monthly_delta: number;
    purchased_delta: number;
    purchased_after: number;
    actor: string;
    reason: string | null;
  }>(
    `SELECT kind, amount, monthly_delta, purchased_delta, purchased_after, actor, reason FROM credit_ledger
     WHERE deployment_id = $1 ORDER BY id`,
    [deploymentId],
  );
}

function expectInvalid(res: { statusCode: number; body: string }, field: string): void {
  expect(res.statusCode, res.body).toBe(400);
  const body = JSON.parse(res.body) as { error: string; code: string; message: string; fields?: Array<{ field: string }> };
  expect(body).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
  expect(body.message.length).toBeGreaterThan(0);
  const named = (body.fields ?? []).map((f) => f.field);
  expect(named.some((f) => f === field || f.startsWith(`${field}.`)), `${field} in ${JSON.stringify(named)}`).toBe(true);
}

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

describe('GET deployments', () => {
  it('lists the deployments of one organization with ?organization_id=, and all of them without', async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const b = await createTenant(h, { tier: 'trial' });
    const res = await admin('GET', `/api/v1/admin/deployments?organization_id=${a.organizationId}`);
    expect(res.statusCode).toBe(200);
    const listed = json<{ deployments: DeploymentView[] }>(res).deployments;
    expect(listed.map((d) => d.id)).toEqual([a.deploymentId]);
    expect(listed[0]).toMatchObject({ organization_id: a.organizationId, tier: 'launch', status: 'active', is_primary: true });

    // The unfiltered list reads every deployment in the shared database; it runs before this file moves its
    // clock, so it brings no other test's balance into a later period.
    const all = json<{ deployments: DeploymentView[] }>(await admin('GET', '/api/v1/admin/deployments')).deployments;
    expect(all.map((d) => d.id)).toEqual(expect.arrayContaining([a.deploymentId, b.deploymentId]));

    const none = await admin('GET', `/api/v1/admin/deployments?organization_id=${randomUUID()}`);
    expect(none.statusCode).toBe(200);
    expect(json(none)).toEqual({ deployments: [] });
  });

  it('returns one deployment with its tier, flags and balance', async () => {
    const createdAt = h.clock.now();
    const t = await createTenant(h, { tier: 'launch', purchased: 30 });
    const d = await view(t.deploymentId);
    expect(d).toMatchObject({
      id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'launch',
      status: 'active',
      is_primary: true,
      secret_prefix: t.deploymentSecret.slice(0, 10),
      billing_anchor: createdAt.toISOString(),
      features: { ai_enabled: true, billing_enabled: true, custom_domain: true, white_label: false, mcp_enabled: true },
      flag_overrides: {},
      overrides: { monthly_credits: null, api_rate_limit: null, ai_tokens_limit: null, expires_at: null },
    });
    expect(d.balance).toMatchObject({
      monthly_allocation: 2000,
      monthly_used: 0,
      monthly_remaining: 2000,
      purchased: 30,
      reserved: 0,
      available: 2030,
      ai_tokens_used: 0,
      period_start: createdAt.toISOString(),
    });
    expect(new Date(d.balance.period_end).getTime()).toBeGreaterThan(createdAt.getTime());
    // Reads are operator calls too (docs/operator.md: every call is audited).
    expect((await operatorAudit('deployment', t.deploymentId, 'read')).length).toBeGreaterThanOrEqual(1);
  });

  it('answers 404 NOT_FOUND for an unknown deployment id', async () => {
    const res = await admin('GET', deploymentUrl(randomUUID()));
    expect(res.statusCode).toBe(404);
    expect(json(res)).toEqual({ error: 'not_found', code: 'NOT_FOUND', message: expect.any(String) });
    for (const [method, rest, payload] of [
      ['PUT', '', { tier: 'growth' }],
      ['PUT', '/overrides', { monthly_credits: 1 }],
      ['DELETE', '/overrides', undefined],
      ['PUT', '/flags', { white_label: true }],
      ['POST', '/usage/reset', { monthly_credits: true }],
      ['POST', '/credits', { amount: 5, reason: 'x' }],
    ] as Array<[Method, string, object | undefined]>) {
      const r = await admin(method, deploymentUrl(randomUUID(), rest), payload);
      expect(r.statusCode, `${method} ${rest}`).toBe(404);
      expect(json(r).code).toBe('NOT_FOUND');
    }
  });
});

describe('PUT deployment tier and status', () => {
  it('applies the new monthly allocation at once: sandbox → launch with nothing used leaves 2,000 available', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_allocation: 0, available: 0 });
    const res = await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'launch' });
    expect(res.statusCode, res.body).toBe(200);
    const d = json<DeploymentView>(res);
    expect(d.tier).toBe('launch');
    expect(d.balance).toMatchObject({ monthly_allocation: 2000, monthly_used: 0, monthly_remaining: 2000, available: 2000 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, tier: 'launch', credits_available: 2000 });
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_used: 1, credits_remaining: 1999 });

    const audit = await operatorAudit('deployment', t.deploymentId, 'update');
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({
      organization_id: t.organizationId,
      metadata: { before: { tier: 'sandbox' }, after: { tier: 'launch' } },
    });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a downgrade never makes the balance negative: the monthly bucket floors at 0, purchased credits untouched', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 50 });
    await spend(t.deploymentId, 150);
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_used: 150, monthly_remaining: 1850, purchased: 50, available: 1900 });

    const res = await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'trial' });
    expect(res.statusCode).toBe(200);
    expect(json<DeploymentView>(res).balance).toMatchObject({
      monthly_allocation: 100,
      monthly_used: 150,
      monthly_remaining: 0,
      purchased: 50,
      available: 50,
    });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 50 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);

    // The next credit comes from purchased credits, the monthly bucket being empty.
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_remaining: 49 });
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_used: 150, purchased: 49 });

    // Down to sandbox: allocation 0, still nothing negative, purchased still there.
    const sandbox = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'sandbox' }));
    expect(sandbox.balance).toMatchObject({ monthly_allocation: 0, monthly_remaining: 0, purchased: 49, available: 49 });

    // Back up: the period's usage still counts against the new allocation.
    const up = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'launch' }));
    expect(up.balance).toMatchObject({ monthly_allocation: 2000, monthly_used: 150, monthly_remaining: 1850, purchased: 49, available: 1899 });

    const negative = await h.deps.db.query(
      'SELECT 1 FROM credit_balances WHERE deployment_id = $1 AND (purchased_balance < 0 OR monthly_used < 0 OR reserved < 0)',
      [t.deploymentId],
    );
    expect(negative).toEqual([]);
    const adjusts = (await ledgerRows(t.deploymentId)).filter((r) => r.kind === 'adjust');
    expect(adjusts.length).toBeGreaterThanOrEqual(2);
    expect(adjusts.every((r) => r.actor === 'operator' && r.purchased_delta === 0)).toBe(true);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('suspension makes MCP checks answer deployment_not_found; reactivation restores them', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, error: null });

    const res = await admin('PUT', deploymentUrl(t.deploymentId), { status: 'suspended' });
    expect(res.statusCode).toBe(200);
    expect(json<DeploymentView>(res)).toMatchObject({ status: 'suspended', tier: 'launch' });

    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({
      allowed: false,
      credit_cost: 0,
      credits_available: null,
      reason: 'deployment_not_found',
    });
    const stdio = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { tool_name: 'x' },
    });
    expect(json(stdio)).toMatchObject({ allowed: false, credit_cost: 0, reason: 'deployment_not_found' });
    const usage = await serviceUsage(t.deploymentId);
    expect(json(usage)).toMatchObject({ success: false, credits_used: 0, error: 'deployment_not_found' });
    expect((await view(t.deploymentId)).balance.monthly_used).toBe(0);
    // The resolve cache is dropped at once: a suspended deployment is not handed out.
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: null, error: 'no_deployment_found', mcp_enabled: false });

    const back = await admin('PUT', deploymentUrl(t.deploymentId), { status: 'active' });
    expect(json<DeploymentView>(back).status).toBe('active');
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, reason: null });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, error: null });

    const audit = await operatorAudit('deployment', t.deploymentId, 'update');
    expect(audit.map((a) => a.metadata)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ after: { tier: 'launch', status: 'suspended' } }),
        expect.objectContaining({ after: { tier: 'launch', status: 'active' } }),
      ]),
    );
  });

  it('rejects an unknown tier, an unknown status and unknown fields with 400, changing nothing', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'platinum' }), 'tier');
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId), { status: 'deleted' }), 'status');
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'growth', plan: 'pro' }), 'plan');
    const d = await view(t.deploymentId);
    expect(d).toMatchObject({ tier: 'trial', status: 'active' });
    expect(await operatorAudit('deployment', t.deploymentId, 'update')).toEqual([]);
  });
});

describe('PUT/DELETE overrides', () => {
  it('merges: fields left out keep their value, null removes one; the allocation follows at once', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const first = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, api_rate_limit: 50 });
    expect(first.statusCode, first.body).toBe(200);
    expect(json<DeploymentView>(first).overrides).toEqual({ monthly_credits: 500, api_rate_limit: 50, ai_tokens_limit: null, expires_at: null });
    expect(json<DeploymentView>(first).balance).toMatchObject({ monthly_allocation: 500, available: 500 });
    expect(json<DeploymentView>(first).tier).toBe('trial');

    const second = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { ai_tokens_limit: 7000 }));
    expect(second.overrides).toEqual({ monthly_credits: 500, api_rate_limit: 50, ai_tokens_limit: 7000, expires_at: null });

    const third = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { api_rate_limit: null }));
    expect(third.overrides).toEqual({ monthly_credits: 500, api_rate_limit: null, ai_tokens_limit: 7000, expires_at: null });

    const snapshot = json<{ features: Record<string, unknown>; quotas: { ai_tokens: { limit: number | null } } }>(
      await entitlements(t.deploymentId, t.deploymentSecret),
    );
    expect(snapshot.features).toMatchObject({ ai_monthly_limit: 7000, api_rate_limit: 500 });
    expect(snapshot.quotas.ai_tokens.limit).toBe(7000);

    const fourth = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: null }));
    expect(fourth.overrides.monthly_credits).toBeNull();
    expect(fourth.balance).toMatchObject({ monthly_allocation: 100, available: 100 });
    expect(fourth.tier).toBe('trial');

    const audit = await operatorAudit('deployment_override', t.deploymentId, 'override');
    expect(audit).toHaveLength(4);
    expect(audit.every((a) => a.organization_id === t.organizationId)).toBe(true);
    expect(audit.map((a) => a.metadata.after)).toContainEqual({ monthly_credits: 500, api_rate_limit: 50, ai_tokens_limit: null, expires_at: null });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('rejects negative numbers, unknown fields and a past expires_at with 400 naming the field; the previous override stays', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 20 * DAY).toISOString();
    const set = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, ai_tokens_limit: 3000, expires_at: expiresAt });
    expect(set.statusCode).toBe(200);
    const before = await view(t.deploymentId);
    const past = new Date(h.clock.now().getTime() - 1000).toISOString();
    const cases: Array<[object, string]> = [
      [{ monthly_credits: -1 }, 'monthly_credits'],
      [{ api_rate_limit: -5 }, 'api_rate_limit'],
      [{ ai_tokens_limit: -100 }, 'ai_tokens_limit'],
      [{ ai_tokens_limit: 1.5 }, 'ai_tokens_limit'],
      [{ monthly_credits: '50' }, 'monthly_credits'],
      [{ bogus: 1 }, 'bogus'],
      [{ monthly_credits: 10, tier: 'growth' }, 'tier'],
      [{ expires_at: past }, 'expires_at'],
      [{ monthly_credits: 10, expires_at: past }, 'expires_at'],
      [{ expires_at: h.clock.now().toISOString() }, 'expires_at'],
      [{ expires_at: 'next tuesday' }, 'expires_at'],
    ];
    for (const [body, field] of cases) {
      const res = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), body);
      expectInvalid(res, field);
    }
    const after = await view(t.deploymentId);
    expect(after.overrides).toEqual({ monthly_credits: 500, api_rate_limit: null, ai_tokens_limit: 3000, expires_at: expiresAt });
    expect(after.overrides).toEqual(before.overrides);
    expect(after.balance.monthly_allocation).toBe(500);
    expect(await operatorAudit('deployment_override', t.deploymentId, 'override')).toHaveLength(1);
  });

  it('when an override expires the tier value applies again, with the period usage counted against it', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 10 * DAY);
    const res = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), {
      monthly_credits: 500,
      ai_tokens_limit: 5000,
      api_rate_limit: 42,
      expires_at: expiresAt.toISOString(),
    });
    expect(res.statusCode).toBe(200);
    await spend(t.deploymentId, 30);
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_allocation: 500, monthly_remaining: 470, available: 470 });

    h.clock.set(expiresAt.getTime() - 1);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 470 });
    const stillOn = json<{ features: Record<string, unknown> }>(await entitlements(t.deploymentId, t.deploymentSecret));
    expect(stillOn.features).toMatchObject({ ai_monthly_limit: 5000, api_rate_limit: 42 });

    h.clock.set(expiresAt);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 70 });
    const d = await view(t.deploymentId);
    expect(d.tier).toBe('trial');
    expect(d.balance).toMatchObject({ monthly_allocation: 100, monthly_used: 30, monthly_remaining: 70, available: 70 });
    const snapshot = json<{ features: Record<string, unknown>; quotas: { ai_tokens: { limit: number | null } } }>(
      await entitlements(t.deploymentId, t.deploymentSecret),
    );
    expect(snapshot.features).toMatchObject({ ai_monthly_limit: 1000, api_rate_limit: 500 });
    expect(snapshot.quotas.ai_tokens.limit).toBe(1000);
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_remaining: 69 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('an expiring override whose usage exceeds the tier allocation leaves the monthly bucket at 0, purchased untouched', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 20 });
    const expiresAt = new Date(h.clock.now().getTime() + 3 * DAY);
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, expires_at: expiresAt.toISOString() });
    await spend(t.deploymentId, 150);
    h.clock.set(expiresAt.getTime() + 1);
    const d = await view(t.deploymentId);
    expect(d.balance).toMatchObject({ monthly_allocation: 100, monthly_used: 150, monthly_remaining: 0, purchased: 20, available: 20 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 20 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('DELETE removes every override and the tier applies again', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), {
      monthly_credits: 500,
      api_rate_limit: 42,
      ai_tokens_limit: 5,
      expires_at: new Date(h.clock.now().getTime() + 5 * DAY).toISOString(),
    });
    await spend(t.deploymentId, 10);
    const res = await admin('DELETE', deploymentUrl(t.deploymentId, '/overrides'));
    expect(res.statusCode, res.body).toBe(200);
    const d = json<DeploymentView>(res);
    expect(d.overrides).toEqual({ monthly_credits: null, api_rate_limit: null, ai_tokens_limit: null, expires_at: null });
    expect(d.tier).toBe('trial');
    expect(d.balance).toMatchObject({ monthly_allocation: 100, monthly_used: 10, monthly_remaining: 90, available: 90 });
    const snapshot = json<{ features: Record<string, unknown> }>(await entitlements(t.deploymentId, t.deploymentSecret));
    expect(snapshot.features).toMatchObject({ ai_monthly_limit: 1000, api_rate_limit: 500 });
    expect(await operatorAudit('deployment_override', t.deploymentId, 'delete')).toHaveLength(1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('overrides: edges', () => {
  it('after an override has expired, a new PUT without expires_at applies (the lapsed expiry is not inherited)', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 2 * DAY);
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, expires_at: expiresAt.toISOString() });
    h.clock.set(expiresAt.getTime() + 1);
    expect((await view(t.deploymentId)).balance.monthly_allocation).toBe(100);

    const res = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 800 });
    expect(res.statusCode, res.body).toBe(200);
    const d = json<DeploymentView>(res);
    expect(d.overrides.monthly_credits).toBe(800);
    expect(d.balance).toMatchObject({ monthly_allocation: 800, available: 800 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 800 });
  });

  it('a monthly_credits override on an enterprise deployment counts the period usage against it; removing it is unlimited again', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    await spend(t.deploymentId, 100);
    const capped = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500 }));
    expect(capped.balance).toMatchObject({ monthly_allocation: 500, monthly_used: 100, monthly_remaining: 400, available: 400 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 400 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    const freed = json<DeploymentView>(await admin('DELETE', deploymentUrl(t.deploymentId, '/overrides')));
    expect(freed.balance).toMatchObject({ monthly_allocation: null, available: null });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('PUT flags', () => {
  it('pins flags one by one, merges, and null restores the tier value', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const pinned = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { white_label: true }));
    expect(pinned.flag_overrides).toEqual({ white_label: true });
    expect(pinned.features).toEqual({ ai_enabled: true, billing_enabled: true, custom_domain: true, white_label: true, mcp_enabled: true });

    const merged = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { custom_domain: false }));
    expect(merged.flag_overrides).toEqual({ white_label: true, custom_domain: false });
    expect(merged.features).toMatchObject({ white_label: true, custom_domain: false });

    const restored = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { white_label: null }));
    expect(restored.flag_overrides).toEqual({ custom_domain: false });
    expect(restored.features).toMatchObject({ white_label: false, custom_domain: false });
    expect(restored.tier).toBe('launch');

    const snapshot = json<{ features: Record<string, unknown> }>(await entitlements(t.deploymentId, t.deploymentSecret));
    expect(snapshot.features).toMatchObject({ white_label: false, custom_domain: false, ai_enabled: true });

    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { teleport: true }), 'teleport');
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { ai_enabled: 'yes' }), 'ai_enabled');
    expect((await view(t.deploymentId)).flag_overrides).toEqual({ custom_domain: false });

    const audit = await operatorAudit('deployment_flags', t.deploymentId, 'override');
    expect(audit).toHaveLength(3);
    expect(audit.every((a) => a.organization_id === t.organizationId)).toBe(true);
  });

  it('mcp_enabled false on a launch deployment makes MCP checks answer mcp_disabled', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect(json(await resolve(t.userId))).toMatchObject({ mcp_enabled: true });
    await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { mcp_enabled: false });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: false, credit_cost: 0, tier: 'launch', reason: 'mcp_disabled' });
    const stdio = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
    expect(json(stdio)).toEqual({ allowed: false, credit_cost: 0, tier: 'launch', reason: 'mcp_disabled' });
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: false, credits_used: 0, error: 'mcp_disabled' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, mcp_enabled: false });

    await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { mcp_enabled: null });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, reason: null });
    expect(json(await resolve(t.userId))).toMatchObject({ mcp_enabled: true });
  });

  it('mcp_enabled true does not lift the sandbox denial (reason order of docs/metering.md, Denials)', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { mcp_enabled: true });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: false, reason: 'sandbox_tier' });
  });
});

describe('POST usage/reset', () => {
  it('refills the monthly bucket and/or clears AI tokens, with a ledger row and an audit row', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    await spend(t.deploymentId, 150);
    // Stands in for AI usage until the AI proxy exists.
    await h.deps.db.query('UPDATE credit_balances SET ai_tokens_used = 1234 WHERE deployment_id = $1', [t.deploymentId]);

    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), {}), 'ai_tokens');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), { everything: true }), 'everything');
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_used: 150, ai_tokens_used: 1234 });

    const credits = await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), { monthly_credits: true });
    expect(credits.statusCode, credits.body).toBe(200);
    expect(json<DeploymentView>(credits).balance).toMatchObject({ monthly_used: 0, monthly_remaining: 2000, available: 2000, ai_tokens_used: 1234 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);

    await spend(t.deploymentId, 5);
    const tokens = await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), { ai_tokens: true });
    expect(json<DeploymentView>(tokens).balance).toMatchObject({ monthly_used: 5, ai_tokens_used: 0 });
    const quota = await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    });
    expect(json(quota)).toMatchObject({ used: 0, remaining: 10000 });

    expect(await operatorAudit('deployment', t.deploymentId, 'reset_usage')).toHaveLength(2);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('POST credits', () => {
  it('grants purchased credits and adjusts them down, each with a ledger row and an audit row', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const granted = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 500, reason: 'goodwill' });
    expect(granted.statusCode, granted.body).toBe(200);
    expect(json<DeploymentView>(granted).balance).toMatchObject({ purchased: 500, available: 2500 });

    const adjusted = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -200, reason: 'correction' });
    expect(adjusted.statusCode).toBe(200);
    expect(json<DeploymentView>(adjusted).balance).toMatchObject({ purchased: 300, available: 2300 });

    const rows = (await ledgerRows(t.deploymentId)).filter((r) => r.kind !== 'period_reset');
    expect(rows).toEqual([
      { kind: 'grant', amount: 500, monthly_delta: 0, purchased_delta: 500, purchased_after: 500, actor: 'operator', reason: 'goodwill' },
      { kind: 'adjust', amount: -200, monthly_delta: 0, purchased_delta: -200, purchased_after: 300, actor: 'operator', reason: 'correction' },
    ]);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ credits_available: 2300 });
    expect((await operatorAudit('deployment', t.deploymentId, 'grant_credits')).length).toBe(1);
    expect((await operatorAudit('deployment', t.deploymentId, 'adjust_credits')).length).toBe(1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('refuses an adjustment below zero (400, nothing changed) and invalid amounts', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 300 });
    const ledgerBefore = await ledgerRows(t.deploymentId);
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -301, reason: 'too much' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 0, reason: 'nothing' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 1.5, reason: 'half' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: '10', reason: 'text' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10 }), 'reason');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10, reason: '' }), 'reason');
    const d = await view(t.deploymentId);
    expect(d.balance).toMatchObject({ purchased: 300, available: 2300 });
    expect(await ledgerRows(t.deploymentId)).toEqual(ledgerBefore);
    expect(await operatorAudit('deployment', t.deploymentId, 'adjust_credits')).toEqual([]);
    expect(await operatorAudit('deployment', t.deploymentId, 'grant_credits')).toEqual([]);

    // Exactly down to zero is allowed.
    const zero = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -300, reason: 'refund' });
    expect(zero.statusCode).toBe(200);
    expect(json<DeploymentView>(zero).balance.purchased).toBe(0);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('POST credits with open reservations', () => {
  it('a negative adjustment cannot take purchased credits below what open reservations hold', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 0 });
    await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10, reason: 'pack' });
    const action = uniqueAction('held');
    await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 3 });
    await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action });
    const held = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, reserve: true, invocation_id: 'held-1' },
    });
    expect(json(held)).toMatchObject({ allowed: true, credit_cost: 3, credits_available: 7 });

    // Taking all 10 would leave the held 3 uncovered: the reservation's promise would break.
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -10, reason: 'too much' }), 'amount');
    expect((await view(t.deploymentId)).balance).toMatchObject({ purchased: 10, reserved: 3 });

    const ok = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -7, reason: 'fits' });
    expect(ok.statusCode).toBe(200);
    const recorded = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, invocation_id: 'held-1' },
    });
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 3 });
    expect((await view(t.deploymentId)).balance).toMatchObject({ purchased: 0, reserved: 0 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('PUT credit-costs', () => {
  it('creates and changes an action cost, visible at once in credit-costs and in check-entitlement', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const action = uniqueAction('cost');
    const created = await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 7, description: 'seven' });
    expect(created.statusCode, created.body).toBe(200);
    expect(json(created)).toEqual({ action, credits: 7, description: 'seven' });
    expect((await admin('PUT', `/api/v1/admin/tool-actions/${action}-tool`, { action })).statusCode).toBe(200);

    const costs = async () => {
      const res = await h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers: serviceHeaders(h) });
      expect(res.statusCode).toBe(200);
      return json<{ costs: Array<{ action: string; credits: number; description: string | null }> }>(res).costs;
    };
    expect(await costs()).toContainEqual({ action, credits: 7, description: 'seven' });
    expect(json(await serviceCheck(t.deploymentId, `${action}-tool`))).toMatchObject({ allowed: true, credit_cost: 7 });

    // Description left out keeps its value.
    const changed = await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 9 });
    expect(json(changed)).toEqual({ action, credits: 9, description: 'seven' });
    expect(await costs()).toContainEqual({ action, credits: 9, description: 'seven' });
    expect(json(await serviceCheck(t.deploymentId, `${action}-tool`))).toMatchObject({ allowed: true, credit_cost: 9 });
    const stdio = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { tool_name: `${action}-tool` },
    });
    expect(json(stdio)).toMatchObject({ allowed: true, credit_cost: 9 });
    expect(json(await serviceUsage(t.deploymentId, `${action}-tool`))).toMatchObject({ success: true, credits_used: 9, credits_remaining: 1991 });

    const cleared = await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 9, description: null });
    expect(json(cleared)).toEqual({ action, credits: 9, description: null });

    const audit = await operatorAudit('credit_cost', action, 'update');
    expect(audit).toHaveLength(3);
    expect(audit.every((a) => a.organization_id === null)).toBe(true);
  });

  it('rejects negative credits, a bad action name and unknown fields with 400', async () => {
    const action = uniqueAction('badcost');
    expectInvalid(await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: -1 }), 'credits');
    expectInvalid(await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 2.5 }), 'credits');
    expectInvalid(await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 1, colour: 'red' }), 'colour');
    const upper = await admin('PUT', '/api/v1/admin/credit-costs/Not%20Valid', { credits: 1 });
    expect(upper.statusCode).toBe(400);
    expect(json(upper).code).toBe('INVALID_REQUEST');
    expect(await h.deps.db.query('SELECT 1 FROM credit_costs WHERE action = $1', [action])).toEqual([]);
  });
});

describe('PUT/DELETE tool-actions', () => {
  it('maps a tool to an action and back; a tool with no row is metered as platform_basic (1 credit)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const tool = unique('tool');
    const action = uniqueAction('mapped');
    await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 4 });

    // No row: platform_basic, 1 credit, and the usage record says so.
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 1 });
    expect(json(await serviceUsage(t.deploymentId, tool))).toMatchObject({ success: true, credits_used: 1 });

    const unknown = await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action: uniqueAction('no-such-action') });
    expectInvalid(unknown, 'action');
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ credit_cost: 1 });

    const mapped = await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
    expect(mapped.statusCode).toBe(200);
    expect(json(mapped)).toEqual({ tool_name: tool, action });
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 4 });
    expect(json(await serviceUsage(t.deploymentId, tool))).toMatchObject({ success: true, credits_used: 4 });

    const removed = await admin('DELETE', `/api/v1/admin/tool-actions/${tool}`);
    expect(removed.statusCode).toBe(204);
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 1 });
    expect(json(await serviceUsage(t.deploymentId, tool))).toMatchObject({ success: true, credits_used: 1 });

    const again = await admin('DELETE', `/api/v1/admin/tool-actions/${tool}`);
    expect(again.statusCode).toBe(404);
    expect(json(again)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });

    const usage = await h.deps.db.query<{ metric: string; quantity: number }>(
      'SELECT metric, quantity FROM usage_records WHERE deployment_id = $1 AND success ORDER BY "timestamp", quantity DESC',
      [t.deploymentId],
    );
    expect(usage.map((u) => `${u.metric}:${u.quantity}`).sort()).toEqual(
      [`${action}:4`, 'platform_basic:1', 'platform_basic:1'].sort(),
    );
    expect((await view(t.deploymentId)).balance.monthly_used).toBe(6);

    expect(await operatorAudit('tool_action', tool, 'update')).toHaveLength(1);
    expect(await operatorAudit('tool_action', tool, 'delete')).toHaveLength(1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('PUT users/{id}/external-id', () => {
  it('sets an external id that resolve-deployment accepts; a duplicate is 409; an unknown user 404', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'trial' });
    const external = unique('idp-user');

    // Resolved (and cached) as unknown first: setting the id must drop that answer.
    expect(json(await resolve(external))).toMatchObject({ deployment_id: null, error: 'no_deployment_found' });

    const res = await admin('PUT', `/api/v1/admin/users/${t.userId}/external-id`, { external_id: external });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toEqual({ id: t.userId, email: expect.any(String), external_id: external });
    expect(json(await resolve(external))).toEqual({
      deployment_id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'launch',
      mcp_enabled: true,
      error: null,
    });

    const duplicate = await admin('PUT', `/api/v1/admin/users/${other.userId}/external-id`, { external_id: external });
    expect(duplicate.statusCode).toBe(409);
    expect(json(duplicate)).toEqual({ error: 'conflict', code: 'CONFLICT', message: expect.any(String) });
    expect(json(await resolve(external))).toMatchObject({ deployment_id: t.deploymentId });

    const missing = await admin('PUT', `/api/v1/admin/users/${randomUUID()}/external-id`, { external_id: unique('nobody') });
    expect(missing.statusCode).toBe(404);
    expect(json(missing).code).toBe('NOT_FOUND');

    const audit = await operatorAudit('user', t.userId, 'update');
    expect(audit).toHaveLength(1);
    expect(audit[0]!.metadata).toEqual({ external_id: external });
    expect(await operatorAudit('user', other.userId, 'update')).toEqual([]);
  });
});

describe('external id removal and namespaced tool names', () => {
  it('external_id null removes it: the old external id no longer resolves', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const external = unique('idp-gone');
    await admin('PUT', `/api/v1/admin/users/${t.userId}/external-id`, { external_id: external });
    expect(json(await resolve(external))).toMatchObject({ deployment_id: t.deploymentId });
    const res = await admin('PUT', `/api/v1/admin/users/${t.userId}/external-id`, { external_id: null });
    expect(json(res)).toMatchObject({ id: t.userId, external_id: null });
    expect(json(await resolve(external))).toMatchObject({ deployment_id: null, error: 'no_deployment_found' });
    // The user's own id still resolves.
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId });
  });

  it('maps tool names with dots and slashes (URL-encoded in the path)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const tool = `${unique('ns')}.tools/search issues`;
    const res = await admin('PUT', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`, { action: 'crew_execute' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toEqual({ tool_name: tool, action: 'crew_execute' });
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 5 });
    expect((await admin('DELETE', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`)).statusCode).toBe(204);
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ credit_cost: 1 });
  });
});

describe('POST organizations and api-keys', () => {
  it('provisions an organization with its primary deployment, the secret shown once and working', async () => {
    const slug = uniqueAction('prov');
    const email = `${unique('owner')}@example.com`;
    const res = await admin('POST', '/api/v1/admin/organizations', { name: 'Provisioned', slug, tier: 'launch', owner_email: email });
    expect(res.statusCode, res.body).toBe(201);
    const body = json<{
      organization: { id: string; name: string; slug: string; tier: string; created_at: string };
      owner_user_id: string | null;
      deployment: { id: string; tier: string; secret: string };
    }>(res);
    expect(body.organization).toEqual({ id: expect.any(String), name: 'Provisioned', slug, tier: 'free', created_at: h.clock.now().toISOString() });
    expect(body.deployment).toMatchObject({ tier: 'launch' });
    expect(body.deployment.secret).toMatch(/^cgds_[0-9A-Za-z]{36}$/);
    expect(body.owner_user_id).toEqual(expect.any(String));

    const d = await view(body.deployment.id);
    expect(d).toMatchObject({ organization_id: body.organization.id, is_primary: true, tier: 'launch', secret_prefix: body.deployment.secret.slice(0, 10) });
    const snapshot = await entitlements(body.deployment.id, body.deployment.secret);
    expect(snapshot.statusCode).toBe(200);
    expect(json(snapshot)).toMatchObject({ status: 'active', tier: 'launch' });
    expect(json(await resolve(body.owner_user_id!))).toMatchObject({ deployment_id: body.deployment.id, organization_id: body.organization.id });

    // Duplicate slug: 409, nothing created.
    const dup = await admin('POST', '/api/v1/admin/organizations', { name: 'Again', slug });
    expect(dup.statusCode).toBe(409);
    expect(json(dup)).toMatchObject({ error: 'conflict', code: 'CONFLICT' });
    const orgs = await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug]);
    expect(orgs).toHaveLength(1);

    expectInvalid(await admin('POST', '/api/v1/admin/organizations', { name: 'Bad', slug: 'Not A Slug' }), 'slug');
    expectInvalid(await admin('POST', '/api/v1/admin/organizations', { name: 'Bad', slug: uniqueAction('s'), tier: 'gold' }), 'tier');

    expect(await operatorAudit('organization', body.organization.id, 'create')).toHaveLength(1);
    expect(await operatorAudit('deployment', body.deployment.id, 'create')).toHaveLength(1);
  });

  it('gives a new organization the NEW_ORG_TIER (sandbox) when no tier is named, and reuses an existing owner by email', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const email = (await h.deps.db.query<{ email: string }>('SELECT email FROM users WHERE id = $1', [t.userId]))[0]!.email;
    const res = await admin('POST', '/api/v1/admin/organizations', { name: 'Second', slug: uniqueAction('second'), owner_email: email.toUpperCase() });
    expect(res.statusCode, res.body).toBe(201);
    const body = json<{ owner_user_id: string; deployment: { id: string; tier: string } }>(res);
    expect(body.deployment.tier).toBe('sandbox');
    expect(body.owner_user_id).toBe(t.userId);
    expect((await view(body.deployment.id)).balance).toMatchObject({ monthly_allocation: 0, available: 0 });
  });

  it('creates an API key for an organization, shown once, with the asked scopes, usable for stdio metering', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const res = await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'ci', scopes: ['read', 'write'] });
    expect(res.statusCode, res.body).toBe(201);
    const key = json<{ id: string; key: string; key_prefix: string; scopes: string[]; expires_at: string | null }>(res);
    expect(key.key).toMatch(/^cg_[0-9A-Za-z]{36}$/);
    expect(key).toMatchObject({ key_prefix: key.key.slice(0, 10), scopes: ['read', 'write'], expires_at: null });
    const stored = await h.deps.db.query<{ key_hash: string }>('SELECT key_hash FROM api_keys WHERE id = $1', [key.id]);
    expect(stored[0]!.key_hash).not.toContain(key.key);

    const record = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: 'x' } });
    expect(json(record)).toMatchObject({ success: true, credits_used: 1 });

    // Default scopes: [read] — checks work, recording is refused.
    const readOnly = json<{ key: string; scopes: string[] }>(
      await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'ro' }),
    );
    expect(readOnly.scopes).toEqual(['read']);
    const check = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(readOnly.key), payload: { tool_name: 'x' } });
    expect(json(check)).toMatchObject({ allowed: true });
    const refused = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(readOnly.key), payload: { tool_name: 'x' } });
    expect(refused.statusCode).toBe(403);

    const unknown = await admin('POST', `/api/v1/admin/organizations/${randomUUID()}/api-keys`, { name: 'x' });
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown).code).toBe('NOT_FOUND');
    const past = new Date(h.clock.now().getTime() - 1000).toISOString();
    expectInvalid(await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'old', expires_at: past }), 'expires_at');
    expectInvalid(await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'x', scopes: ['root'] }), 'scopes');

    expect(await operatorAudit('api_key', key.id, 'create')).toHaveLength(1);
    expect((await operatorAudit('api_key', key.id, 'create'))[0]!.organization_id).toBe(t.organizationId);
  });

  it('an expiring key stops working at its expiry', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    const res = await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'temp', expires_at: expiresAt.toISOString() });
    const key = json<{ key: string; expires_at: string }>(res);
    expect(key.expires_at).toBe(expiresAt.toISOString());
    const call = () => h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(key.key), payload: { tool_name: 'x' } });
    expect((await call()).statusCode).toBe(200);
    h.clock.set(expiresAt);
    const expired = await call();
    expect(expired.statusCode).toBe(401);
    expect(json(expired)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  });
});
