import type { Queryable } from '../../db/client.js';

/**
 * Usage retention (docs/usage-analytics.md, Retention): usage records older than USAGE_RETENTION_DAYS
 * are deleted, a batch at a time, by the `usage-retention` worker. The rollups keep counting them
 * (their triggers follow inserts and updates, never deletes), the ledger keeps its rows, and a refund
 * of a deleted record is 410 (credits/refunds.ts). A record that still owes credits (credits_short > 0:
 * credits/owed.ts pays the oldest first) is kept until paid.
 */
export async function deleteExpiredUsage(db: Queryable, now: Date, retentionDays: number, limit: number): Promise<number> {
  const cutoff = new Date(now.getTime() - retentionDays * 24 * 60 * 60_000);
  const rows = await db.query<{ id: string }>(
    `DELETE FROM usage_records WHERE id IN (
       SELECT id FROM usage_records WHERE "timestamp" < $1 AND credits_short = 0 LIMIT $2 FOR UPDATE SKIP LOCKED)
     RETURNING id`,
    [cutoff, limit],
    'credits_usage_retention',
  );
  return rows.length;
}
