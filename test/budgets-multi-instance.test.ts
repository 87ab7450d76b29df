import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { budgetFixtures } from './budget-fixtures.js';
import { createHarness, createTenant, grant, type Harness, json, serviceHeaders, testDatabase } from './harness.js';
import { usageFixtures } from './usage-fixtures.js';

/**
 * A block budget across two instances on one database (docs/budgets.md, Enforcement): an organization
 * budget shared by two deployments is charged by batches of both instances at once — several batches in
 * flight per instance, on different deployments — and is never exceeded.
 */
let h: Harness;
let a: FastifyInstance;
let b: FastifyInstance;
beforeAll(async () => {
  h = await createHarness();
  const db = await testDatabase();
  a = await buildApp({ config: testConfig({ deductBatchInFlight: 4 }), db, clock: h.clock });
  b = await buildApp({ config: testConfig({ deductBatchInFlight: 4 }), db, clock: h.clock });
  await Promise.all([a.ready(), b.ready()]);
});
afterAll(async () => {
  await Promise.all([a.close(), b.close(), h.close()]);
});
const budgets = budgetFixtures(() => h);
const usage = usageFixtures(() => h);

describe('a block budget across two instances', () => {
  it('200 parallel records on two deployments through two instances against an organization budget of 50: exactly 50 charged', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const second = await usage.addDeployment(t.organizationId);
    for (const id of [t.deploymentId, second]) await grant(h, id, 1_000);
    const budgetId = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 50, window: 'day' });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        (i % 2 === 0 ? a : b).inject({
          method: 'POST',
          url: '/api/v1/mcp/usage',
          headers: serviceHeaders(h),
          payload: { deployment_id: i % 4 < 2 ? t.deploymentId : second, tool_name: 'x', invocation_id: `both-${i}` },
        }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(results.filter((r) => json(r).success === true)).toHaveLength(50);
    expect(results.filter((r) => json(r).error === 'budget_exceeded')).toHaveLength(150);
    expect((await budgets.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([50]);
    const spent = await h.deps.db.query<{ n: number }>(
      'SELECT COALESCE(SUM(quantity), 0)::int AS n FROM usage_records WHERE organization_id = $1 AND success',
      [t.organizationId],
    );
    expect(spent[0]!.n).toBe(50);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
