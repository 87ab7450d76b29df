import type { Queryable } from '../../db/client.js';

/**
 * Usage retention (docs/usage-analytics.md, Retention): usage records older than USAGE_RETENTION_DAYS
 * are deleted, a batch at a time, by the `usage-retention` worker. The rollups keep counting them
 * (their triggers follow inserts and updates, never deletes), the ledger keeps its rows, and a refund
 * of a deleted record is 410 (credits/refunds.ts). Kept: a record with credits_short > 0 (what an AI
 * call could not pay; credits/owed.ts attributes payments to the oldest), and one whose meter event is
 * still pending.
 */
export async function deleteExpiredUsage(db: Queryable, now: Date, retentionDays: number, limit: number): Promise<number> {
  const cutoff = new Date(now.getTime() - retentionDays * 24 * 60 * 60_000);
  const rows = await db.query<{ id: string }>(
    `DELETE FROM usage_records WHERE id IN (
       SELECT u.id FROM usage_records u
       WHERE u."timestamp" < $1 AND u.credits_short = 0
         -- A meter event still on its way reads the record's refunds (credits/meter-outbox.ts).
         AND NOT EXISTS (SELECT 1 FROM meter_event_outbox m WHERE m.identifier = u.id AND m.status = 'pending')
       LIMIT $2 FOR UPDATE OF u SKIP LOCKED)
     RETURNING id`,
    [cutoff, limit],
    'credits_usage_retention',
  );
  return rows.length;
}
