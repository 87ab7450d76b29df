import { pgArray } from '../../db/arrays.js';
import type { Queryable } from '../../db/client.js';

/** An invocation id deduplicates for this long (docs/metering.md, Idempotency). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/** docs/metering.md, Reservations: an allowed check with reserve:true holds its cost this long. */
export const RESERVATION_TTL_MS = 5 * 60 * 1000;

/**
 * Release overdue reservations (all deployments, or one), in one statement: the invocation rows turn
 * `expired` and the held credits return to the balance together. SKIP LOCKED lets any number of
 * instances sweep at once, and skips a reservation that is being recorded right now. `except`: invocation
 * ids of this deployment that the caller's own transaction is spending: its lock does not keep them
 * from this sweep, and expiring one would give its credits back twice.
 */
export async function expireReservations(db: Queryable, now: Date, deploymentId?: string, except: string[] = []): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `WITH due AS (
       SELECT deployment_id, invocation_id FROM invocations
       WHERE status = 'reserved' AND reservation_expires_at <= $1::timestamptz
         AND ($2::uuid IS NULL OR deployment_id = $2::uuid)
         AND NOT (invocation_id = ANY($3::text[]))
       ORDER BY reservation_expires_at LIMIT 500
       FOR UPDATE SKIP LOCKED
     ), exp AS (
       UPDATE invocations i SET status = 'expired', updated_at = $1::timestamptz
       FROM due WHERE i.deployment_id = due.deployment_id AND i.invocation_id = due.invocation_id
       RETURNING i.deployment_id, i.reserved_amount
     ), sums AS (
       SELECT deployment_id, SUM(reserved_amount)::bigint AS total FROM exp GROUP BY deployment_id
     ), upd AS (
       UPDATE credit_balances b SET reserved = b.reserved - sums.total, updated_at = $1::timestamptz
       FROM sums WHERE b.deployment_id = sums.deployment_id
       RETURNING b.deployment_id
     )
     SELECT (SELECT count(*) FROM exp)::int AS n`,
    [now, deploymentId ?? null, pgArray(except)],
  );
  return rows[0]?.n ?? 0;
}

/** Invocation rows outlive the 24 h idempotency window so clients can reconcile; this long. */
export const INVOCATION_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

/** Delete settled invocation rows past retention (never an open reservation); returns how many. */
export async function pruneInvocations(db: Queryable, now: Date, limit = 1000): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `WITH old AS (
       SELECT deployment_id, invocation_id FROM invocations
       WHERE created_at < $1::timestamptz AND status <> 'reserved'
       LIMIT $2 FOR UPDATE SKIP LOCKED
     ), del AS (
       DELETE FROM invocations i USING old
       WHERE i.deployment_id = old.deployment_id AND i.invocation_id = old.invocation_id
       RETURNING 1
     )
     SELECT count(*)::int AS n FROM del`,
    [new Date(now.getTime() - INVOCATION_RETENTION_MS), limit],
  );
  return rows[0]?.n ?? 0;
}
