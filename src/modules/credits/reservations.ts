import type { Queryable } from '../../db/client.js';

/** docs/metering.md, Reservations: an allowed check with reserve:true holds its cost this long. */
export const RESERVATION_TTL_MS = 5 * 60 * 1000;

/**
 * Hold `amount` credits for a reservation: one guarded UPDATE, so concurrent reservations can never
 * promise more than the spendable balance. Returns false when the balance is short or the row is
 * stale; when held, the spendable balance after the hold (null = unlimited), as viewBalance counts it.
 */
export async function holdCredits(
  tx: Queryable,
  deploymentId: string,
  amount: number,
  now: Date,
): Promise<{ held: boolean; stale: boolean; available: number | null }> {
  const rows = await tx.query<{ sync_before: Date; held: boolean; available: number | null }>(
    `WITH upd AS (
       UPDATE credit_balances SET reserved = reserved + $2::bigint, updated_at = $3::timestamptz
       WHERE deployment_id = $1::uuid AND sync_before > $3::timestamptz
         AND (monthly_allocation IS NULL
              OR GREATEST(0, monthly_allocation - monthly_used) + purchased_balance - reserved >= $2::bigint)
       RETURNING CASE WHEN monthly_allocation IS NULL THEN NULL
                      ELSE GREATEST(0, GREATEST(0, monthly_allocation - monthly_used) + purchased_balance - reserved) END AS available)
     SELECT b.sync_before, EXISTS (SELECT 1 FROM upd) AS held, (SELECT available FROM upd) AS available
     FROM credit_balances b WHERE b.deployment_id = $1::uuid`,
    [deploymentId, amount, now],
    'credits_hold',
  );
  const row = rows[0];
  if (!row) return { held: false, stale: false, available: null };
  return { held: row.held, stale: !row.held && row.sync_before.getTime() <= now.getTime(), available: row.available };
}

/**
 * Release overdue reservations (all deployments, or one), in one statement: the invocation rows turn
 * `expired` and the held credits return to the balance together. SKIP LOCKED lets any number of
 * instances sweep at once, and skips a reservation that is being recorded right now. `except` is an
 * invocation id of this deployment that the caller's own transaction is spending: its lock does not
 * keep it from this sweep, and expiring it would give its credits back twice.
 */
export async function expireReservations(db: Queryable, now: Date, deploymentId?: string, except?: string | null): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `WITH due AS (
       SELECT deployment_id, invocation_id FROM invocations
       WHERE status = 'reserved' AND reservation_expires_at <= $1::timestamptz
         AND ($2::uuid IS NULL OR deployment_id = $2::uuid)
         AND ($3::text IS NULL OR invocation_id <> $3::text)
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
    [now, deploymentId ?? null, except ?? null],
  );
  return rows[0]?.n ?? 0;
}

/** Release one reservation; returns the credits given back, or null if it was not held. */
export async function releaseReservation(
  db: Queryable,
  deploymentId: string,
  invocationId: string,
  now: Date,
): Promise<number | null> {
  const rows = await db.query<{ amount: number }>(
    `WITH rel AS (
       UPDATE invocations SET status = 'released', updated_at = $3::timestamptz
       WHERE deployment_id = $1::uuid AND invocation_id = $2::text AND status = 'reserved'
       RETURNING reserved_amount
     ), upd AS (
       UPDATE credit_balances b SET reserved = b.reserved - rel.reserved_amount, updated_at = $3::timestamptz
       FROM rel WHERE b.deployment_id = $1::uuid
       RETURNING b.deployment_id
     )
     SELECT reserved_amount AS amount FROM rel`,
    [deploymentId, invocationId, now],
  );
  return rows[0]?.amount ?? null;
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
