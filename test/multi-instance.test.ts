import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import type { FastifyInstance } from 'fastify';
import { systemCtx } from '../src/context.js';
import type { BusChannel } from '../src/lib/bus.js';
import { revokeApiKey } from '../src/modules/api-keys/service.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { rotateDeploymentSecret } from '../src/modules/deployments/service.js';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, serviceHeaders, testDatabase } from './harness.js';

/**
 * Two instances on one database and one Redis behave as one service: cache invalidations reach the
 * other instance at once, and deductions split across both never overspend.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
let h: Harness;
let a: FastifyInstance;
let b: FastifyInstance;

beforeAll(async () => {
  h = await createHarness();
  const db = await testDatabase();
  a = await buildApp({ config: testConfig({ redisUrl: REDIS_URL }), db, clock: h.clock });
  b = await buildApp({ config: testConfig({ redisUrl: REDIS_URL }), db, clock: h.clock });
  await Promise.all([a.ready(), b.ready()]);
});
afterAll(async () => {
  await Promise.all([a.close(), b.close(), h.close()]);
});

/** Poll `probe` until it returns true; bounded, so a lost message fails the test instead of hanging. */
async function eventually(probe: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('condition not met in time');
}

describe('two instances, one PostgreSQL/PGlite and one Redis', () => {
  it("a tier change on one instance drops the other's resolve-deployment cache", async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const resolveOnB = async () =>
      json(await b.inject({ method: 'GET', url: `/api/v1/mcp/resolve-deployment?user_id=${t.userId}`, headers: serviceHeaders(h) }));
    expect((await resolveOnB()).tier).toBe('trial');
    const change = await a.inject({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}`,
      headers: adminHeaders(h),
      payload: { tier: 'growth' },
    });
    expect(change.statusCode).toBe(200);
    await eventually(async () => (await resolveOnB()).tier === 'growth');
  });

  it("a cost change on one instance reaches the other's cost table", async () => {
    const t = await createTenant(h);
    const action = `multi_${Date.now().toString(36)}`;
    const tool = `${action}_tool`;
    await a.inject({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 4 } });
    await a.inject({ method: 'PUT', url: `/api/v1/admin/tool-actions/${tool}`, headers: adminHeaders(h), payload: { action } });
    const costOnB = async () =>
      json(await b.inject({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: tool } }))
        .credit_cost;
    expect(await costOnB()).toBe(4);
    await a.inject({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 7 } });
    await eventually(async () => (await costOnB()) === 7);
  });

  it('deductions split across both instances never overspend', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const results = await Promise.all(
      Array.from({ length: 160 }, (_, i) =>
        (i % 2 === 0 ? a : b).inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } }),
      ),
    );
    expect(results.filter((r) => json(r).success === true)).toHaveLength(100);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('the same invocation ids sent to both instances at once: each is charged once, and the balance is never overspent', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const ids = Array.from({ length: 120 }, (_, i) => `both-${Date.now().toString(36)}-${i}`);
    // Every id goes to both instances in the same moment; their batches interleave on one database.
    const results = await Promise.all(
      ids.flatMap((id) =>
        [a, b].map((app) =>
          app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x', invocation_id: id } }),
        ),
      ),
    );
    for (const r of results) expect([200, 409]).toContain(r.statusCode);
    const charged = await h.deps.db.query<{ invocation_id: string; n: number }>(
      'SELECT invocation_id, count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND success GROUP BY invocation_id',
      [t.deploymentId],
    );
    // 100 monthly credits: 100 ids charged once each, the other 20 refused; no id charged twice.
    expect(charged.every((c) => c.n === 1)).toBe(true);
    expect(charged).toHaveLength(100);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('reservations and records split across both instances never promise more than the balance', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const tag = Date.now().toString(36);
    // 100 credits, 160 calls of 1 credit: 80 holds and 80 records, alternating instances, all at once.
    const results = await Promise.all(
      Array.from({ length: 160 }, (_, i) =>
        (i % 2 === 0 ? a : b).inject(
          i % 4 < 2
            ? { method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x', reserve: true, invocation_id: `hold-${tag}-${i}` } }
            : { method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } },
        ),
      ),
    );
    for (const r of results) expect(r.statusCode, r.body).toBe(200);
    const holds = results.filter((_, i) => i % 4 < 2 && json(results[i]!).allowed === true).length;
    const records = results.filter((_, i) => i % 4 >= 2 && json(results[i]!).success === true).length;
    const [row] = await h.deps.db.query<{ monthly_used: number; reserved: number }>(
      'SELECT monthly_used, reserved FROM credit_balances WHERE deployment_id = $1',
      [t.deploymentId],
    );
    expect(row).toEqual({ monthly_used: records, reserved: holds });
    expect(records + holds).toBe(100);
    const [held] = await h.deps.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM invocations WHERE deployment_id = $1 AND status = 'reserved'`,
      [t.deploymentId],
    );
    expect(held!.n).toBe(holds);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a held call recorded on one instance while released on the other settles once, and the balance stays exact', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const tag = Date.now().toString(36);
    const ids = Array.from({ length: 40 }, (_, i) => `race-${tag}-${i}`);
    const held = await Promise.all(
      ids.map((id, i) =>
        (i % 2 === 0 ? a : b).inject({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x', reserve: true, invocation_id: id } }),
      ),
    );
    expect(held.every((r) => json(r).allowed === true)).toBe(true);
    // Each held call is recorded on one instance and released on the other at the same moment, while
    // 80 calls without a reservation compete for the 60 credits left: 120 credits asked of 100.
    const record = (app: FastifyInstance, id?: string) =>
      app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: id ? { tool_name: 'x', invocation_id: id } : { tool_name: 'x' } });
    const release = (app: FastifyInstance, id: string) =>
      app.inject({ method: 'POST', url: `/api/v1/mcp/reservations/${id}/release`, headers: bearer(t.apiKey), payload: {} });
    const [records, releases, fresh] = await Promise.all([
      Promise.all(ids.map((id, i) => record(i % 2 === 0 ? a : b, id))),
      Promise.all(ids.map((id, i) => release(i % 2 === 0 ? b : a, id))),
      Promise.all(Array.from({ length: 80 }, (_, i) => record(i % 2 === 0 ? a : b))),
    ]);
    for (const r of [...records, ...fresh]) expect(r.statusCode, r.body).toBe(200);
    for (const [i, r] of releases.entries()) {
      // Released first (200), or recorded first: then the release is a conflict.
      expect([200, 409], r.body).toContain(r.statusCode);
      if (r.statusCode === 409) expect(json(records[i]!).success).toBe(true);
    }
    const successes = [...records, ...fresh].filter((r) => json(r).success === true).length;
    const [row] = await h.deps.db.query<{ monthly_used: number; reserved: number }>(
      'SELECT monthly_used, reserved FROM credit_balances WHERE deployment_id = $1',
      [t.deploymentId],
    );
    expect(row).toEqual({ monthly_used: successes, reserved: 0 });
    expect(successes).toBeLessThanOrEqual(100);
    const charged = await h.deps.db.query<{ invocation_id: string; n: number }>(
      'SELECT invocation_id, count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND success AND invocation_id IS NOT NULL GROUP BY invocation_id',
      [t.deploymentId],
    );
    expect(charged.every((c) => c.n === 1)).toBe(true);
    const [open] = await h.deps.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM invocations WHERE deployment_id = $1 AND status = 'reserved'`,
      [t.deploymentId],
    );
    expect(open!.n).toBe(0);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  /** Resolves when `app` has heard `channel` on the bus; its caches subscribed first, so they are cleared by then. */
  function heard(app: FastifyInstance, channel: BusChannel): Promise<void> {
    return new Promise((resolve) => app.deps.bus.subscribe(channel, (message) => message !== 'resync' && resolve()));
  }

  const checkOn = (app: FastifyInstance, apiKey: string) =>
    app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(apiKey), payload: { tool_name: 'x' } });

  it('a key revoked on one instance is refused by the other within one bus delivery', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    // B has the key in its principal cache: its second request reads no key row.
    expect((await checkOn(b, t.apiKey)).statusCode).toBe(200);
    const reads = countStatements(b, 'api_keys');
    expect((await checkOn(b, t.apiKey)).statusCode).toBe(200);
    expect(reads.stop()).toBe(0);
    const [key] = await h.deps.db.query<{ id: string }>('SELECT id FROM api_keys WHERE organization_id = $1', [t.organizationId]);
    const delivered = heard(b, 'principal-cache');
    await revokeApiKey({ ...systemCtx(a.deps), actor: { type: 'operator' } }, t.organizationId, key!.id);
    await delivered;
    const res = await checkOn(b, t.apiKey);
    expect(res.statusCode).toBe(401);
    expect(json(res).code).toBe('UNAUTHORIZED');
  });

  it("a deployment secret rotated on one instance stops working on the other within one bus delivery", async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const quotaOn = (app: FastifyInstance, secret: string) =>
      app.inject({ method: 'GET', url: '/api/v1/ai/quota', headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': secret } });
    expect((await quotaOn(b, t.deploymentSecret)).statusCode).toBe(200);
    const delivered = heard(b, 'principal-cache');
    const { secret } = await rotateDeploymentSecret({ ...systemCtx(a.deps), actor: { type: 'operator' } }, t.deploymentId);
    await delivered;
    expect((await quotaOn(b, t.deploymentSecret)).statusCode).toBe(401);
    expect((await quotaOn(b, secret)).statusCode).toBe(200);
  });

  it('a suspension and a flag override on one instance reach the checks of the other within one bus delivery', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect(json(await checkOn(b, t.apiKey)).allowed).toBe(true);
    let delivered = heard(b, 'principal-cache');
    const flags = await a.inject({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/flags`,
      headers: adminHeaders(h),
      payload: { mcp_enabled: false },
    });
    expect(flags.statusCode, flags.body).toBe(200);
    await delivered;
    expect(json(await checkOn(b, t.apiKey))).toMatchObject({ allowed: false, reason: 'mcp_disabled' });
    delivered = heard(b, 'terms-cache');
    await a.inject({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/flags`, headers: adminHeaders(h), payload: { mcp_enabled: null } });
    const suspend = await a.inject({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h), payload: { status: 'suspended' } });
    expect(suspend.statusCode).toBe(200);
    await delivered;
    expect(json(await checkOn(b, t.apiKey))).toMatchObject({ allowed: false, reason: 'deployment_not_found' });
  });

  it('credits granted on one instance show in the checks of the other within one bus delivery', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const serviceCheckOnB = async () =>
      json(
        await b.inject({
          method: 'POST',
          url: '/api/v1/mcp/check-entitlement',
          headers: serviceHeaders(h),
          payload: { deployment_id: t.deploymentId, tool_name: 'x' },
        }),
      ).credits_available;
    expect(await serviceCheckOnB()).toBe(100);
    const delivered = heard(b, 'balance-cache');
    const grant = await a.inject({
      method: 'POST',
      url: `/api/v1/admin/deployments/${t.deploymentId}/credits`,
      headers: adminHeaders(h),
      payload: { amount: 50, reason: 'goodwill' },
    });
    expect(grant.statusCode, grant.body).toBe(200);
    await delivered;
    expect(await serviceCheckOnB()).toBe(150);
  });
});

/** Statements `app` sends whose text mentions `table`, from now until stop(); the real driver still runs them. */
function countStatements(app: FastifyInstance, table: string): { stop: () => number } {
  const db = app.deps.db;
  const original = db.query.bind(db);
  let n = 0;
  db.query = ((text: string, params?: readonly unknown[], name?: string) => {
    if (text.includes(table)) n++;
    return original(text, params, name);
  }) as typeof db.query;
  return {
    stop: () => {
      db.query = original;
      return n;
    },
  };
}

