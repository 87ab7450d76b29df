import type { Database } from '../../db/client.js';
import { dropExpiredUsagePartitions, KEEP, USAGE_BEFORE_PARTITION, USAGE_DEFAULT_PARTITION } from './partitions.js';

/**
 * Usage retention (docs/usage-analytics.md, Retention): usage records older than USAGE_RETENTION_DAYS
 * go, run by the `usage-retention` worker. A monthly partition that ends before the cutoff is dropped
 * whole (credits/partitions.ts); the partitions that are not one month (the one before the first
 * month, the default) are deleted from a batch at a time. The rollups keep counting what went (their
 * triggers follow inserts and updates, never deletes or drops), the ledger keeps its rows, and a refund
 * of a record that went is 410 (credits/refunds.ts). Kept (KEEP): a record with credits_short > 0
 * (what an AI call could not pay; credits/owed.ts attributes payments to the oldest), and one whose
 * meter event is still pending. Nothing goes before the rollups' backfill is done. Returns the
 * partitions dropped plus the records deleted.
 */
export async function deleteExpiredUsage(db: Database, now: Date, retentionDays: number, limit: number): Promise<number> {
  // Nothing goes while records older than the rollups are still being counted (credits/rollup-backfill.ts):
  // a record removed before it is counted would be missing from every summary.
  const backfill = await db.query<{ done: boolean }>('SELECT done_at IS NOT NULL AS done FROM usage_rollup_backfill WHERE id = 1');
  if (backfill[0]?.done === false) return 0;
  const cutoff = new Date(now.getTime() - retentionDays * 24 * 60 * 60_000);
  let handled = await dropExpiredUsagePartitions(db, cutoff);
  for (const table of [USAGE_BEFORE_PARTITION, USAGE_DEFAULT_PARTITION]) {
    if (handled >= limit) break;
    const rows = await db.query<{ id: string }>(
      `DELETE FROM ${table} WHERE id IN (
         SELECT u.id FROM ${table} u WHERE u."timestamp" < $1 AND NOT ${KEEP}
         LIMIT $2 FOR UPDATE OF u SKIP LOCKED)
       RETURNING id`,
      [cutoff, limit - handled],
      `credits_usage_retention_${table}`,
    );
    handled += rows.length;
  }
  return handled;
}
