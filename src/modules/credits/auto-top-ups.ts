import type { Queryable } from '../../db/client.js';
import { changePurchased } from './service.js';

/**
 * Auto top-up, the money side (docs/billing.md, "Auto top-up"). A deduction that takes a deployment's
 * available credits below its organization's line asks for one top-up: the trigger on credit_balances
 * (migration 0024) inserts a `requested` row, at most one open per deployment, in the deduction's own
 * transaction — so a rolled-back or retried batch asks nothing, and concurrent deductions on any
 * number of instances ask once. The billing module's worker moves the row on (`starting` with the
 * pack's price fixed, or `skipped`; `started` once Stripe made its PaymentIntent); only the
 * PaymentIntent's `payment_intent.succeeded` grants, once, from the row.
 */

export type AutoTopUpStatus = 'requested' | 'starting' | 'started' | 'succeeded' | 'failed' | 'skipped';

export interface AutoTopUpRow {
  id: string;
  organization_id: string;
  deployment_id: string;
  status: AutoTopUpStatus;
  pack: string | null;
  credits: number | null;
  stripe_price_id: string | null;
  amount: number | null;
  currency: string | null;
  stripe_payment_intent_id: string | null;
  payment_method: string | null;
  failure_code: string | null;
  requested_at: Date;
  started_at: Date | null;
  settled_at: Date | null;
}

/** How long after a failed top-up a deduction below the line may ask again. */
export const AUTO_TOP_UP_RETRY_MS = 60 * 60_000;

/**
 * The organization's line on each of its balance rows (null: auto top-up off). A row below the new line
 * is marked due now: its next deduction asks for a top-up without having to cross. Balance rows are
 * locked in deployment order, as every batch locks them; each gets a new version, so a batch on
 * remembered rows sees the change.
 */
export async function setAutoTopUpLine(tx: Queryable, organizationId: string, below: number | null, now: Date): Promise<void> {
  await tx.query(
    `UPDATE credit_balances SET auto_top_up_below = $2::bigint, auto_top_up_due_at = CASE WHEN $2::bigint IS NULL THEN NULL ELSE $3::timestamptz END
     WHERE deployment_id IN (SELECT deployment_id FROM credit_balances WHERE organization_id = $1 ORDER BY deployment_id FOR UPDATE)`,
    [organizationId, below, now],
    'credits_auto_top_up_line',
  );
}

/** Rows of `deploymentId` (or of the organization) for reads: newest first. */
export async function listAutoTopUps(db: Queryable, organizationId: string, limit: number): Promise<AutoTopUpRow[]> {
  return db.query<AutoTopUpRow>('SELECT * FROM auto_top_ups WHERE organization_id = $1 ORDER BY requested_at DESC, id LIMIT $2', [organizationId, limit]);
}

export async function lockAutoTopUp(tx: Queryable, id: string): Promise<AutoTopUpRow | null> {
  const rows = await tx.query<AutoTopUpRow>('SELECT * FROM auto_top_ups WHERE id = $1 FOR UPDATE', [id]);
  return rows[0] ?? null;
}

const monthStartOf = (now: Date) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));

/** Top-ups of the organization decided in the calendar month of `now` (UTC) that did not fail: what max_per_month counts. */
export async function startedThisMonth(tx: Queryable, organizationId: string, now: Date): Promise<number> {
  const rows = await tx.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM auto_top_ups WHERE organization_id = $1 AND status IN ('starting', 'started', 'succeeded') AND started_at >= $2`,
    [organizationId, monthStartOf(now)],
  );
  return rows[0]!.n;
}

/**
 * Deployments below the line whose row is due (auto top-up enabled below the line, an hour after a
 * failure or a skip, the month after max_per_month) ask for a top-up now, without waiting for a
 * deduction: a deployment with nothing left to spend makes none (its calls are refused before they
 * write), so the `auto-top-up-due` worker asks for it. Only rows brought up to date (a period that
 * ended would count last period's use). One open top-up per deployment, as the trigger's asks.
 */
export async function askDueAutoTopUps(db: Queryable, now: Date, limit: number): Promise<number> {
  const rows = await db.query<{ deployment_id: string }>(
    `WITH due AS (
       SELECT deployment_id, organization_id FROM credit_balances
       WHERE auto_top_up_below IS NOT NULL AND auto_top_up_due_at IS NOT NULL AND auto_top_up_due_at <= $1
         AND sync_before > $1 AND monthly_allocation IS NOT NULL
         AND GREATEST(0, monthly_allocation - monthly_used) + purchased_balance - reserved < auto_top_up_below
       ORDER BY deployment_id LIMIT $2 FOR UPDATE SKIP LOCKED),
     asked AS (
       INSERT INTO auto_top_ups (organization_id, deployment_id, status, requested_at, next_attempt_at)
       SELECT organization_id, deployment_id, 'requested', $1, $1 FROM due
       ON CONFLICT DO NOTHING RETURNING deployment_id)
     UPDATE credit_balances b SET auto_top_up_due_at = NULL FROM asked WHERE b.deployment_id = asked.deployment_id
     RETURNING b.deployment_id`,
    [now, limit],
    'credits_auto_top_up_sweep',
  );
  return rows.length;
}

/** The worker decided to pay: the pack and its price as they are now, fixed on the row before Stripe is asked. */
export async function markStarting(
  tx: Queryable,
  id: string,
  sale: { pack: string; credits: number; priceId: string; amount: number; currency: string; now: Date },
): Promise<void> {
  await tx.query(
    `UPDATE auto_top_ups SET status = 'starting', pack = $2, credits = $3, stripe_price_id = $4, amount = $5, currency = $6, started_at = $7
     WHERE id = $1 AND status = 'requested'`,
    [id, sale.pack, sale.credits, sale.priceId, sale.amount, sale.currency.toLowerCase(), sale.now],
  );
}

/**
 * Not paid, and not a failure (auto top-up turned off, the month's maximum reached, billing not
 * available). `askAgainAt`: when the deployment, still below the line, may ask again (the next month
 * for the maximum, an hour otherwise; null when auto top-up is off).
 */
export async function markSkipped(tx: Queryable, id: string, reason: string, now: Date, askAgainAt: 'next_month' | 'later' | null): Promise<void> {
  const rows = await tx.query<{ deployment_id: string }>(
    `UPDATE auto_top_ups SET status = 'skipped', last_error = $2, settled_at = $3, next_attempt_at = NULL WHERE id = $1 AND status IN ('requested', 'starting')
     RETURNING deployment_id`,
    [id, reason.slice(0, 500), now],
  );
  const row = rows[0];
  if (!row || askAgainAt === null) return;
  const next = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
  await tx.query(
    'UPDATE credit_balances SET auto_top_up_due_at = $2 WHERE deployment_id = $1 AND auto_top_up_below IS NOT NULL',
    [row.deployment_id, askAgainAt === 'next_month' ? next : new Date(now.getTime() + AUTO_TOP_UP_RETRY_MS)],
    'credits_auto_top_up_due',
  );
}

/** The saved card of a `starting` top-up: the first one chosen stays (every retry sends the same request). */
export async function fixPaymentMethod(tx: Queryable, id: string, paymentMethod: string): Promise<string | null> {
  const rows = await tx.query<{ payment_method: string }>(
    `UPDATE auto_top_ups SET payment_method = COALESCE(payment_method, $2) WHERE id = $1 AND status = 'starting' RETURNING payment_method`,
    [id, paymentMethod],
  );
  return rows[0]?.payment_method ?? null;
}

/**
 * A settled-failed top-up whose PaymentIntent was never stored (its answer was lost, then the top-up
 * was settled by a later refusal) turns out paid: the PaymentIntent is stored on it, so the grant
 * below finds it. Only for a PaymentIntent no other row names; true when stored.
 */
export async function adoptPaymentIntent(tx: Queryable, id: string, paymentIntentId: string): Promise<boolean> {
  const rows = await tx.query<{ id: string }>(
    `UPDATE auto_top_ups SET stripe_payment_intent_id = $2
     WHERE id = $1 AND status = 'failed' AND stripe_payment_intent_id IS NULL
       AND NOT EXISTS (SELECT 1 FROM auto_top_ups o WHERE o.stripe_payment_intent_id = $2)
     RETURNING id`,
    [id, paymentIntentId],
  );
  return rows.length > 0;
}

/** Stripe made the PaymentIntent: stored, so its events find the row. A PaymentIntent another row names is refused (false). */
export async function markStarted(tx: Queryable, id: string, paymentIntentId: string, now: Date): Promise<boolean> {
  const rows = await tx.query<{ id: string }>(
    `UPDATE auto_top_ups SET status = 'started', stripe_payment_intent_id = $2, started_at = $3, next_attempt_at = NULL
     WHERE id = $1 AND status = 'starting'
       AND NOT EXISTS (SELECT 1 FROM auto_top_ups o WHERE o.stripe_payment_intent_id = $2 AND o.id <> $1)
     RETURNING id`,
    [id, paymentIntentId, now],
  );
  return rows.length > 0;
}

/** The stored top-up whose PaymentIntent this is, or null (not ours: an event of it grants nothing). */
export async function autoTopUpOfPaymentIntent(db: Queryable, paymentIntentId: string): Promise<AutoTopUpRow | null> {
  const rows = await db.query<AutoTopUpRow>('SELECT * FROM auto_top_ups WHERE stripe_payment_intent_id = $1', [paymentIntentId]);
  return rows[0] ?? null;
}

/**
 * The top-up failed (Stripe declined, or refused to make the PaymentIntent): the row is settled
 * `failed` once, and its deployment may ask again at a deduction an hour from now. Returns the row as
 * settled, or null when it was no longer open (already settled by the other source of the same news).
 */
export async function markFailed(
  tx: Queryable,
  input: { id: string; paymentIntentId: string | null; failureCode: string; now: Date },
): Promise<AutoTopUpRow | null> {
  const rows = await tx.query<AutoTopUpRow>(
    `UPDATE auto_top_ups SET status = 'failed', failure_code = $3, settled_at = $4, next_attempt_at = NULL,
       stripe_payment_intent_id = COALESCE(stripe_payment_intent_id,
         (SELECT $2::text WHERE NOT EXISTS (SELECT 1 FROM auto_top_ups o WHERE o.stripe_payment_intent_id = $2::text)))
     WHERE id = $1 AND status IN ('starting', 'started') RETURNING *`,
    [input.id, input.paymentIntentId, input.failureCode.slice(0, 100), input.now],
  );
  const row = rows[0];
  if (!row) return null;
  await tx.query(
    'UPDATE credit_balances SET auto_top_up_due_at = $2 WHERE deployment_id = $1 AND auto_top_up_below IS NOT NULL',
    [row.deployment_id, new Date(input.now.getTime() + AUTO_TOP_UP_RETRY_MS)],
    'credits_auto_top_up_due',
  );
  return row;
}

export type AutoTopUpGrant =
  | { granted: true; row: AutoTopUpRow; stillBelow: boolean }
  | { granted: false; reason: 'not stored' | 'already granted' | 'amount or currency differs' | 'not started'; row: AutoTopUpRow | null };

/**
 * The PaymentIntent of a stored top-up succeeded: its credits (from the row, never the event) go to
 * its deployment once, as a credit purchase (so a refund of its charge takes them back, as a pack's),
 * with the ledger row and the `credits.purchased` event. A top-up settled `failed` earlier (an
 * off-session payment the customer completed later) is granted too: it was paid. `stillBelow`: the
 * deployment's available credits are still under the line after it.
 */
export async function grantAutoTopUp(
  tx: Queryable,
  input: { paymentIntentId: string; amount: number | null; currency: string | null; now: Date },
): Promise<AutoTopUpGrant> {
  const rows = await tx.query<AutoTopUpRow>('SELECT * FROM auto_top_ups WHERE stripe_payment_intent_id = $1 FOR UPDATE', [input.paymentIntentId]);
  const row = rows[0];
  if (!row) return { granted: false, reason: 'not stored', row: null };
  if (row.status === 'succeeded') return { granted: false, reason: 'already granted', row };
  if (row.status !== 'started' && row.status !== 'failed') return { granted: false, reason: 'not started', row };
  if (input.amount === null || input.currency === null || input.amount !== row.amount || input.currency.toLowerCase() !== row.currency) {
    return { granted: false, reason: 'amount or currency differs', row };
  }
  const settled = await tx.query<AutoTopUpRow>(
    `UPDATE auto_top_ups SET status = 'succeeded', settled_at = $2, failure_code = NULL WHERE id = $1 RETURNING *`,
    [row.id, input.now],
  );
  await tx.query(
    `INSERT INTO credit_purchases (organization_id, deployment_id, pack, credits, auto_top_up_id, stripe_price_id, stripe_payment_intent_id,
       amount_total, currency, granted_at, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`,
    [row.organization_id, row.deployment_id, row.pack, row.credits, row.id, row.stripe_price_id, input.paymentIntentId, row.amount, row.currency, input.now],
  );
  const after = await changePurchased(tx, {
    deploymentId: row.deployment_id,
    amount: row.credits!,
    reason: `auto top-up ${row.pack} (${input.paymentIntentId})`,
    actor: 'stripe',
    now: input.now,
    eventData: { pack: row.pack, payment_intent_id: input.paymentIntentId, auto_top_up: true },
  });
  await tx.query('UPDATE credit_purchases SET ledger_id = $2 WHERE auto_top_up_id = $1', [row.id, after.ledgerId]);
  const available = after.monthly_allocation === null ? null : Math.max(0, after.monthly_allocation - after.monthly_used) + after.purchased_balance - after.reserved;
  const line = await tx.query<{ auto_top_up_below: number | null }>('SELECT auto_top_up_below FROM credit_balances WHERE deployment_id = $1', [row.deployment_id]);
  const below = line[0]?.auto_top_up_below ?? null;
  return { granted: true, row: settled[0]!, stillBelow: available !== null && below !== null && available < below };
}

/**
 * Ask for another top-up of a deployment still below the line when its previous one settled (no
 * deduction crosses the line then). One open per deployment: a second ask does nothing. True when asked.
 */
export async function askAutoTopUp(tx: Queryable, organizationId: string, deploymentId: string, now: Date): Promise<boolean> {
  const rows = await tx.query<{ id: string }>(
    `INSERT INTO auto_top_ups (organization_id, deployment_id, status, requested_at, next_attempt_at)
     VALUES ($1, $2, 'requested', $3, $3) ON CONFLICT DO NOTHING RETURNING id`,
    [organizationId, deploymentId, now],
  );
  return rows.length > 0;
}

/** The worker could not reach Stripe: try again at `at`, the row as it is. */
export async function retryAutoTopUpAt(tx: Queryable, id: string, at: Date, error: string): Promise<void> {
  await tx.query(`UPDATE auto_top_ups SET next_attempt_at = $2, attempts = attempts + 1, last_error = $3 WHERE id = $1 AND status IN ('requested', 'starting')`, [
    id,
    at,
    error.slice(0, 500),
  ]);
}
