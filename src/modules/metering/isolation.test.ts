import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createTenant, type Harness, json, serviceHeaders, type Tenant } from '../../../test/harness.js';
import { HOUR, SECOND } from '../../clock.js';
import { createApiKey, revokeApiKey } from '../api-keys/service.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import { deleteOrganization } from '../organizations/service.js';

/**
 * Tenant isolation of the metering paths (STYLE rule 4): organization A's key never meters, reads,
 * releases or refunds anything of organization B; a row of another tenant is a 404 like a missing one.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;
type Body = Record<string, unknown>;

const post = (url: string, headers: Headers, payload?: Body) =>
  h.request({ method: 'POST', url, headers, ...(payload === undefined ? {} : { payload }) });
const get = (url: string, headers: Headers) => h.request({ method: 'GET', url, headers });
const serviceUsage = (body: Body) => post('/api/v1/mcp/usage', serviceHeaders(h), body);
const serviceCheck = (body: Body) => post('/api/v1/mcp/check-entitlement', serviceHeaders(h), body);

/** Everything of a tenant that metering could change, to compare before and after. */
async function snapshot(t: Tenant) {
  const db = h.deps.db;
  return {
    balance: await db.query('SELECT monthly_used, purchased_balance, reserved FROM credit_balances WHERE deployment_id = $1', [
      t.deploymentId,
    ]),
    ledger: await db.query('SELECT id, kind, amount FROM credit_ledger WHERE organization_id = $1 ORDER BY id', [t.organizationId]),
    usage: await db.query('SELECT id, quantity, refunded, success FROM usage_records WHERE organization_id = $1 ORDER BY id', [
      t.organizationId,
    ]),
    invocations: await db.query(
      'SELECT invocation_id, status, reserved_amount, usage_id FROM invocations WHERE organization_id = $1 ORDER BY invocation_id',
      [t.organizationId],
    ),
    refunds: await db.query('SELECT id FROM usage_refunds WHERE organization_id = $1', [t.organizationId]),
  };
}

/** Organization B with a recorded invocation 'b-recorded' and a held reservation 'b-reserved'. */
async function victim() {
  const b = await createTenant(h, { tier: 'launch' });
  const recorded = json(await serviceUsage({ deployment_id: b.deploymentId, tool_name: 'x', invocation_id: 'b-recorded' }));
  expect(recorded.success).toBe(true);
  const reserved = json(await serviceCheck({ deployment_id: b.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'b-reserved' }));
  expect(reserved.allowed).toBe(true);
  return { b, usageId: recorded.usage_id as string };
}

/** Every metering route an API key can call, for the "this key no longer works" cases. */
function keyRoutes(key: string, usageId: string) {
  const auth = bearer(key);
  return [
    () => post('/api/v1/mcp/stdio/check-entitlement', auth, { tool_name: 'x' }),
    () => post('/api/v1/mcp/stdio/check-entitlement', auth, { tool_name: 'x', reserve: true, invocation_id: 'k-res' }),
    () => post('/api/v1/mcp/stdio/record-usage', auth, { tool_name: 'x' }),
    () => post('/api/v1/mcp/stdio/record-usage', auth, { tool_name: 'x', invocation_id: 'k-rec' }),
    () => get('/api/v1/mcp/invocations/own-recorded', auth),
    () => post('/api/v1/mcp/reservations/own-reserved/release', auth, {}),
    () => post(`/api/v1/mcp/usage/${usageId}/refund`, auth, { amount: 1, reason: 'x' }),
  ];
}

async function expectAllUnauthorized(key: string, usageId: string): Promise<void> {
  for (const [i, call] of keyRoutes(key, usageId).entries()) {
    const res = await call();
    expect(res.statusCode, `route #${i}: ${res.body}`).toBe(401);
    expect(json(res), `route #${i}`).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  }
}

/** A tenant with a recorded invocation 'own-recorded' and a reservation 'own-reserved' of its own. */
async function tenantWithActivity(): Promise<{ t: Tenant; usageId: string }> {
  const t = await createTenant(h, { tier: 'launch' });
  const recorded = json(await post('/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), { tool_name: 'x', invocation_id: 'own-recorded' }));
  expect(recorded.success).toBe(true);
  const reserved = await post('/api/v1/mcp/stdio/check-entitlement', bearer(t.apiKey), {
    tool_name: 'x',
    reserve: true,
    invocation_id: 'own-reserved',
  });
  expect(json(reserved).allowed).toBe(true);
  return { t, usageId: recorded.usage_id as string };
}

describe("a key of organization A and organization B's deployment", () => {
  it('cannot meter B: stdio bodies take no deployment_id, and service routes refuse an API key', async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const { b } = await victim();
    const before = await snapshot(b);

    for (const url of ['/api/v1/mcp/stdio/record-usage', '/api/v1/mcp/stdio/check-entitlement']) {
      const res = await post(url, bearer(a.apiKey), { tool_name: 'x', deployment_id: b.deploymentId });
      expect(res.statusCode, url).toBe(400);
      expect(json(res)).toMatchObject({ code: 'INVALID_REQUEST' });
    }
    for (const headers of [bearer(a.apiKey), { 'x-mcp-service-key': a.apiKey }]) {
      for (const url of ['/api/v1/mcp/usage', '/api/v1/mcp/check-entitlement']) {
        const res = await post(url, headers, { deployment_id: b.deploymentId, tool_name: 'x' });
        expect(res.statusCode, url).toBe(401);
        expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
      }
      expect((await get(`/api/v1/mcp/resolve-deployment?user_id=${b.userId}`, headers)).statusCode).toBe(401);
    }
    // A's own metering lands on A only.
    const own = json(await post('/api/v1/mcp/stdio/record-usage', bearer(a.apiKey), { tool_name: 'x' }));
    expect(own).toMatchObject({ success: true, credits_used: 1, credits_remaining: 1999 });
    const rows = await h.deps.db.query<{ deployment_id: string }>('SELECT deployment_id FROM usage_records WHERE id = $1', [own.usage_id]);
    expect(rows).toEqual([{ deployment_id: a.deploymentId }]);
    expect(await snapshot(b)).toEqual(before);
  });

  it("cannot see B's invocations: 404, the same answer as for an id that does not exist", async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const { b } = await victim();
    const missing = await get('/api/v1/mcp/invocations/does-not-exist', bearer(a.apiKey));
    expect(missing.statusCode).toBe(404);
    for (const id of ['b-recorded', 'b-reserved']) {
      for (const url of [`/api/v1/mcp/invocations/${id}`, `/api/v1/mcp/invocations/${id}?deployment_id=${b.deploymentId}`]) {
        const res = await get(url, bearer(a.apiKey));
        expect(res.statusCode, url).toBe(404);
        expect(json(res), url).toEqual(json(missing));
        expect(res.body).not.toContain(b.deploymentId);
      }
    }
  });

  it("cannot release B's reservation; B's hold stays", async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const { b } = await victim();
    const before = await snapshot(b);
    for (const body of [{}, { deployment_id: b.deploymentId }]) {
      const res = await post('/api/v1/mcp/reservations/b-reserved/release', bearer(a.apiKey), body);
      expect(res.statusCode, JSON.stringify(body)).toBe(404);
      expect(json(res)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
    }
    expect(await snapshot(b)).toEqual(before);
    const status = await get(`/api/v1/mcp/invocations/b-reserved?deployment_id=${b.deploymentId}`, serviceHeaders(h));
    expect(json(status)).toMatchObject({ status: 'reserved', reserved_credits: 1 });
  });

  it("cannot refund B's usage (no key refunds at all: 403, whoever's usage); B's balance, ledger and usage stay as they were", async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const { b, usageId } = await victim();
    const before = await snapshot(b);
    const attempts: Array<[Headers, Body]> = [
      [bearer(a.apiKey), { reason: 'steal' }],
      [bearer(a.apiKey), { amount: 1, reason: 'steal' }],
      [{ ...bearer(a.apiKey), 'idempotency-key': 'steal-1' }, { amount: 1, reason: 'steal' }],
    ];
    for (const [headers, body] of attempts) {
      const res = await post(`/api/v1/mcp/usage/${usageId}/refund`, headers, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(403);
      expect(json(res)).toMatchObject({ error: 'forbidden', code: 'FORBIDDEN' });
    }
    expect(await snapshot(b)).toEqual(before);
    expect(await findLedgerMismatches(h.deps.db, b.organizationId)).toEqual([]);
  });

  it("the same invocation id in A is A's own call: no replay of B's answer, no touch of B's hold", async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const { b, usageId } = await victim();
    const before = await snapshot(b);
    const recorded = await post('/api/v1/mcp/stdio/record-usage', bearer(a.apiKey), { tool_name: 'x', invocation_id: 'b-recorded' });
    expect(recorded.headers['idempotent-replayed']).toBeUndefined();
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 1 });
    expect(json(recorded).usage_id).not.toBe(usageId);
    const reserved = await post('/api/v1/mcp/stdio/check-entitlement', bearer(a.apiKey), {
      tool_name: 'x',
      reserve: true,
      invocation_id: 'b-reserved',
    });
    expect(json(reserved)).toMatchObject({ allowed: true, invocation_id: 'b-reserved' });
    // A releases its own 'b-reserved': B's reservation of the same name stays held.
    expect(json(await post('/api/v1/mcp/reservations/b-reserved/release', bearer(a.apiKey), {}))).toMatchObject({ released_credits: 1 });
    expect(await snapshot(b)).toEqual(before);
    expect(await findLedgerMismatches(h.deps.db, a.organizationId)).toEqual([]);
  });

  it("the service key acts only on the deployment it names: B's ids under A's deployment_id are not found", async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const { b } = await victim();
    const before = await snapshot(b);
    expect((await get(`/api/v1/mcp/invocations/b-recorded?deployment_id=${a.deploymentId}`, serviceHeaders(h))).statusCode).toBe(404);
    const release = await post('/api/v1/mcp/reservations/b-reserved/release', serviceHeaders(h), { deployment_id: a.deploymentId });
    expect(release.statusCode).toBe(404);
    expect(await snapshot(b)).toEqual(before);
  });
});

describe('keys that no longer work', () => {
  it('a revoked key → 401 on every metering route, at once, and nothing changes', async () => {
    const { t, usageId } = await tenantWithActivity();
    const { apiKey, key } = await createApiKey(h.ctx, { organizationId: t.organizationId, name: 'to revoke', scopes: ['read', 'write'] });
    expect((await post('/api/v1/mcp/stdio/check-entitlement', bearer(key), { tool_name: 'x' })).statusCode).toBe(200);
    await revokeApiKey(h.ctx, t.organizationId, apiKey.id);
    const before = await snapshot(t);
    await expectAllUnauthorized(key, usageId);
    expect(await snapshot(t)).toEqual(before);
    // The organization's other key is untouched.
    expect((await post('/api/v1/mcp/stdio/check-entitlement', bearer(t.apiKey), { tool_name: 'x' })).statusCode).toBe(200);
  });

  it('an expired key → 401 from its expiry on, and nothing changes', async () => {
    const { t, usageId } = await tenantWithActivity();
    const { key } = await createApiKey(h.ctx, {
      organizationId: t.organizationId,
      name: 'short-lived',
      scopes: ['read', 'write'],
      expiresAt: new Date(h.clock.now().getTime() + HOUR),
    });
    h.clock.advance(HOUR - SECOND);
    expect((await post('/api/v1/mcp/stdio/check-entitlement', bearer(key), { tool_name: 'x' })).statusCode).toBe(200);
    h.clock.advance(SECOND);
    const before = await snapshot(t);
    await expectAllUnauthorized(key, usageId);
    expect(await snapshot(t)).toEqual(before);
  });

  it('a key created already expired → 401', async () => {
    const t = await createTenant(h);
    const { key } = await createApiKey(h.ctx, {
      organizationId: t.organizationId,
      name: 'born expired',
      scopes: ['read', 'write'],
      expiresAt: new Date(h.clock.now().getTime() - SECOND),
    });
    const res = await post('/api/v1/mcp/stdio/check-entitlement', bearer(key), { tool_name: 'x' });
    expect(res.statusCode).toBe(401);
    expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  });

  it("a key of a soft-deleted organization → 401; its deployment is not found in service mode", async () => {
    const { t, usageId } = await tenantWithActivity();
    // Through the owner's deletion, which also drops every instance's cached credentials.
    await deleteOrganization({ ...h.ctx, actor: { type: 'user', userId: t.userId } }, t.organizationId);
    const before = await snapshot(t);
    await expectAllUnauthorized(t.apiKey, usageId);
    expect(json(await serviceCheck({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({
      allowed: false,
      credit_cost: 0,
      credits_available: null,
      reason: 'deployment_not_found',
    });
    expect(json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'x' }))).toMatchObject({
      success: false,
      credits_used: 0,
      error: 'deployment_not_found',
    });
    expect(json(await get(`/api/v1/mcp/resolve-deployment?user_id=${t.userId}`, serviceHeaders(h)))).toEqual({
      deployment_id: null,
      organization_id: null,
      tier: null,
      mcp_enabled: false,
      error: 'no_deployment_found',
    });
    const after = await snapshot(t);
    expect(after.balance).toEqual(before.balance);
    expect(after.ledger).toEqual(before.ledger);
    expect(after.invocations).toEqual(before.invocations);
    expect(after.usage.filter((u) => (u as { success: boolean }).success)).toEqual(
      before.usage.filter((u) => (u as { success: boolean }).success),
    );
  });
});
