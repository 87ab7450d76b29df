import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { backfillRollupsStep, deleteExpiredUsage } from '../src/modules/credits/index.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { adminHeaders, createHarness, createTenant, databaseBefore, type Harness } from './harness.js';
import { DAYS_FROM_RECORDS, DAYS_FROM_ROLLUP, HOURS_FROM_RECORDS, HOURS_FROM_ROLLUP, usageFixtures } from './usage-fixtures.js';

/**
 * The rollups' backfill (docs/usage-analytics.md, "Rollups"): records written before the rollups
 * existed are not counted by the migration (that would hold its locks for as long as it reads them)
 * but by the usage-rollup-backfill worker, a few pages at a time. Refunds of records not counted yet,
 * and of records counted already, made while it runs, end counted once; the summary reports the lag
 * until it is done. On a database of its own, from the migrations before the rollups.
 */
let h: Harness;
let db: Database;
beforeAll(async () => {
  db = await databaseBefore('0025');
  h = await createHarness({}, '2026-01-15T12:00:00.000Z', db);
});
afterAll(async () => {
  await h?.close();
  await db?.close();
});
const f = usageFixtures(() => h);

const refund = async (usageId: string, amount: number) => {
  const res = await h.request({ method: 'POST', url: `/api/v1/admin/usage/${usageId}/refund`, headers: adminHeaders(h), payload: { amount, reason: 'test' } });
  expect(res.statusCode, res.body).toBe(200);
};

describe('the rollups of records older than them', () => {
  it('are counted a batch at a time, each record once, refunds made meanwhile included; the summary reports the lag until then', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 200 });
    const tools = [await f.toolFor('rag_query'), await f.toolFor('task_basic')];
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      const r = await f.record(t.deploymentId, tools[i % 2]!, { at: new Date(Date.UTC(2026, 0, 1 + (i % 20), i % 24)).toISOString(), mcpUserId: i % 3 ? 'ann' : null });
      ids.push(r.usage_id!);
    }
    await refund(ids[0]!, 1);

    await runMigrations(db);
    const org = [t.organizationId];
    expect(await db.query(HOURS_FROM_ROLLUP, org)).toEqual([]);
    const headers = { 'x-api-key': t.apiKey };
    const range = '&from=2025-12-01T00:00:00Z&to=2026-02-01T00:00:00Z';
    // The backfill began when the migration ran (the database's clock): the summary's lag counts from then.
    h.clock.set(new Date(Date.now() + 60 * 60_000).toISOString());
    const lagging = await f.summary(headers, t.organizationId, `?group_by=tool${range}`);
    expect(lagging.lag_seconds).toBeGreaterThan(0);
    expect(lagging.totals).toMatchObject({ calls: 0 });

    // The retention removes nothing before the backfill is done: the records would be missing from the rollups.
    expect(await deleteExpiredUsage(db, new Date('2028-01-01T00:00:00Z'), 35, 1000)).toBe(0);
    expect(await db.query('SELECT id FROM usage_records WHERE organization_id = $1', org)).toHaveLength(40);
    // A refund of a record not counted yet, then the backfill's steps with another refund between them.
    await refund(ids[1]!, 1);
    let steps = 0;
    let refundedBetween = false;
    for (let n = await backfillRollupsStep(db, h.clock.now()); n > 0; n = await backfillRollupsStep(db, h.clock.now())) {
      steps += 1;
      if (!refundedBetween) {
        await refund(ids[2]!, 1);
        await refund(ids[0]!, 1);
        refundedBetween = true;
      }
      expect(steps).toBeLessThan(1000);
    }
    expect(steps).toBeGreaterThan(1);
    // New records after it are counted by the insert trigger, as always.
    await f.record(t.deploymentId, tools[0]!);
    expect(await db.query(HOURS_FROM_ROLLUP, org)).toEqual(await db.query(HOURS_FROM_RECORDS, org));
    expect(await db.query(DAYS_FROM_ROLLUP, org)).toEqual(await db.query(DAYS_FROM_RECORDS, org));
    const done = await f.summary(headers, t.organizationId, `?group_by=tool${range}`);
    expect(done.lag_seconds).toBe(0);
    expect(done.totals).toMatchObject({ calls: 40, credits_refunded: 4 }); // the record after it is outside the range
    expect(await findLedgerMismatches(db, t.organizationId)).toEqual([]);
    // Done is done: another step changes nothing.
    expect(await backfillRollupsStep(db, h.clock.now())).toBe(0);
  });
});
