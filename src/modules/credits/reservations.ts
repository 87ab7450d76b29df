import { pgArray } from '../../db/arrays.js';
import type { Queryable } from '../../db/client.js';

/** An invocation id deduplicates for this long (docs/metering.md, Idempotency). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

/** docs/metering.md, Reservations: an allowed check with reserve:true holds its cost this long. */
export const RESERVATION_TTL_MS = 5 * 60 * 1000;

/**
 * Release overdue reservations (all deployments, or one), in one statement: the invocation rows turn
 * `expired`, the held credits return to the balance, and the budget windows the holds were counted in
 * (those still in progress) get them back (docs/budgets.md). SKIP LOCKED lets any number of instances
 * sweep at once, and skips a reservation that is being recorded right now. `except`: invocation ids of
 * this deployment that the caller's own transaction is spending: its lock does not keep them from this
 * sweep, and expiring one would give its credits back twice. Window rows are locked in the one order
 * every writer keeps (credits/budgets.ts).
 */
export async function sweepReservations(
  db: Queryable,
  now: Date,
  deploymentId?: string,
  except: string[] = [],
): Promise<{ count: number; givenBack: Map<string, number> }> {
  const rows = await db.query<{ n: number; given: Array<{ id: string; total: number }> }>(
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
       RETURNING i.deployment_id, i.reserved_amount, i.budget_windows
     ), sums AS (
       SELECT deployment_id, SUM(reserved_amount)::bigint AS total FROM exp GROUP BY deployment_id
     ), upd AS (
       UPDATE credit_balances b SET reserved = b.reserved - sums.total, updated_at = $1::timestamptz
       FROM sums WHERE b.deployment_id = sums.deployment_id
       RETURNING b.deployment_id
     ), back AS (
       SELECT w AS id, SUM(exp.reserved_amount)::bigint AS total FROM exp CROSS JOIN LATERAL unnest(exp.budget_windows) AS w GROUP BY w
     ), held AS (
       SELECT bw.id FROM budget_windows bw WHERE bw.id IN (SELECT id FROM back) AND bw.window_end > $1::timestamptz
       ORDER BY bw.budget_id, bw.subject, bw.window_start FOR UPDATE OF bw
     ), win AS (
       UPDATE budget_windows bw SET spent_credits = GREATEST(0, bw.spent_credits - back.total)
       FROM held JOIN back ON back.id = held.id WHERE bw.id = held.id
       RETURNING bw.id, back.total
     )
     SELECT (SELECT count(*) FROM exp)::int AS n,
            (SELECT coalesce(json_agg(json_build_object('id', id, 'total', total)), '[]'::json) FROM win) AS given`,
    [now, deploymentId ?? null, pgArray(except)],
    'credits_reservations_sweep',
  );
  const row = rows[0];
  return { count: row?.n ?? 0, givenBack: new Map((row?.given ?? []).map((g) => [g.id, Number(g.total)])) };
}

/** sweepReservations, counting what it expired (the worker, a check that would refuse). */
export async function expireReservations(db: Queryable, now: Date, deploymentId?: string): Promise<number> {
  return (await sweepReservations(db, now, deploymentId)).count;
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
