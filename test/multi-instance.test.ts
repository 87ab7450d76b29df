import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import type { FastifyInstance } from 'fastify';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
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
});
