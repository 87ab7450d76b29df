import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteExpiredUsage } from '../src/modules/credits/index.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import type { Database } from '../src/db/client.js';
import { adminHeaders, createHarness, createTenant, type Harness, isolatedDatabase, json } from './harness.js';
import { usageFixtures } from './usage-fixtures.js';

/**
 * Usage retention (docs/usage-analytics.md, Retention): records older than USAGE_RETENTION_DAYS are
 * deleted; every summary stays what it was (the rollups keep them), the ledger stays whole, and a
 * refund of a deleted record is 410 USAGE_RECORD_EXPIRED.
 */
let h: Harness;
let db: Database;
beforeAll(async () => {
  // The retention removes old records of every tenant: a database of its own, so that no other test
  // file's records (most run at a clock in January 2026) go with them.
  db = await isolatedDatabase();
  h = await createHarness({ usageRetentionDays: 35 }, '2026-06-01T00:00:00.000Z', db);
});
afterAll(async () => {
  await h?.close();
  await db?.close();
});
const f = usageFixtures(() => h);

describe('usage retention', () => {
  it('deletes records past the retention; summaries and the ledger check are unchanged; their refund is 410', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 100 });
    const headers = { 'x-api-key': t.apiKey };
    const rag = await f.toolFor('rag_query');
    h.clock.set('2026-06-01T10:00:00.000Z');
    const old = await f.record(t.deploymentId, rag, { mcpUserId: 'ann' });
    const oldRefunded = await f.record(t.deploymentId, rag);
    await f.refund(oldRefunded.usage_id!, 1);
    h.clock.set('2026-07-20T10:00:00.000Z');
    const recent = await f.record(t.deploymentId, rag, { mcpUserId: 'ann' });
    h.clock.set('2026-07-21T00:00:00.000Z');

    const range = '&from=2026-05-01T00:00:00Z&to=2026-07-21T00:00:00Z';
    const queries = [`?group_by=day${range}`, `?group_by=tool${range}`, `?group_by=mcp_user${range}`, `?group_by=day&split_by=tool${range}`];
    const before = await Promise.all(queries.map((q) => f.summary(headers, t.organizationId, q)));
    expect(before[1]!.totals).toMatchObject({ calls: 3, credits: 5, credits_refunded: 1 });

    // The worker's pass: everything before 2026-06-16 goes (35 days before the clock), in batches.
    let deleted = 0;
    for (let n = 1; n > 0; ) {
      n = await deleteExpiredUsage(h.deps.db, h.clock.now(), 35, 1);
      deleted += n;
    }
    expect(deleted).toBeGreaterThanOrEqual(2);
    const left = await h.deps.db.query<{ id: string }>('SELECT id FROM usage_records WHERE organization_id = $1', [t.organizationId]);
    expect(left.map((r) => r.id)).toEqual([recent.usage_id]);
    const listed = await f.walk(headers, t.organizationId, '?limit=100');
    expect(listed.map((r) => r.id)).toEqual([recent.usage_id]);

    const after = await Promise.all(queries.map((q) => f.summary(headers, t.organizationId, q)));
    expect(after.map(({ as_of: _a, ...rest }) => rest)).toEqual(before.map(({ as_of: _a, ...rest }) => rest));
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);

    const refund = (usageId: string) =>
      h.request({ method: 'POST', url: `/api/v1/admin/usage/${usageId}/refund`, headers: adminHeaders(h), payload: { reason: 'late' } });
    const expired = await refund(old.usage_id!);
    expect(expired.statusCode, expired.body).toBe(410);
    expect(json(expired)).toMatchObject({ code: 'USAGE_RECORD_EXPIRED' });
    expect((await refund('6f1c3d2e-0000-4000-8000-000000000000')).statusCode).toBe(404);
    expect((await refund(recent.usage_id!)).statusCode).toBe(200);
  });
});
