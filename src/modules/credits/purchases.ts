import type { Queryable } from '../../db/client.js';
import { changePurchased, syncBalance } from './service.js';

/**
 * Credit packs sold through Stripe Checkout (docs/billing.md, "Credit packs"), the money side. What a
 * paid session grants comes from the `credit_purchases` row written when this installation made the
 * session, never from the event: an event grants only for a stored row, only when its amount and
 * currency are the row's, and once per row — the grant claims `granted_at` with a guarded UPDATE in its
 * own transaction, so duplicate deliveries, the completed/async-succeeded pair and several instances
 * all grant once.
 */

export interface PackSale {
  organizationId: string;
  deploymentId: string;
  pack: string;
  credits: number;
  checkoutSessionId: string;
  priceId: string;
  /** What Stripe said the session will charge, in the currency's smallest unit, and its currency. */
  amountTotal: number;
  currency: string;
}

/** The row written when the Checkout Session is made, before its URL is given to anyone: the only thing a later event can grant. */
export async function recordPackCheckout(tx: Queryable, sale: PackSale, now: Date): Promise<void> {
  await tx.query(
    `INSERT INTO credit_purchases (organization_id, deployment_id, pack, credits, stripe_checkout_session_id, stripe_price_id,
       amount_total, currency, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (stripe_checkout_session_id) DO NOTHING`,
    [sale.organizationId, sale.deploymentId, sale.pack, sale.credits, sale.checkoutSessionId, sale.priceId, sale.amountTotal, sale.currency.toLowerCase(), now],
  );
}

interface PurchaseRow {
  id: string;
  organization_id: string;
  deployment_id: string;
  pack: string;
  credits: number;
  /** null for an auto top-up's purchase (credits/auto-top-ups.ts): its PaymentIntent names it. */
  stripe_checkout_session_id: string | null;
  stripe_price_id: string;
  amount_total: number | null;
  currency: string | null;
  granted_at: Date | null;
  refund_share: number;
  credits_taken_back: number;
  dispute_id: string | null;
  dispute_share: number;
  dispute_taken_back: number;
  dispute_taken_from_grants: number;
  dispute_reinstated: boolean;
}

/** The stored sale of a Checkout Session this installation made, or null (the session is not ours to grant). */
export async function storedPackSale(tx: Queryable, checkoutSessionId: string): Promise<PurchaseRow | null> {
  const rows = await tx.query<PurchaseRow>('SELECT * FROM credit_purchases WHERE stripe_checkout_session_id = $1', [checkoutSessionId]);
  return rows[0] ?? null;
}

export type PackGrant =
  | { granted: true; credits: number; organizationId: string }
  | { granted: false; reason: 'not stored' | 'already granted' | 'amount or currency differs'; organizationId?: string };

/**
 * The customer paid the stored session `checkoutSessionId`: grant the row's credits to the row's
 * deployment as purchased credits, with the ledger row and the `credits.purchased` event, unless the
 * row is missing, was granted before, or the paid amount or currency is not the row's. A row made
 * before amounts were recorded (`amount_total` null, docs/billing.md) takes the paid amount.
 */
export async function grantPack(
  tx: Queryable,
  input: { checkoutSessionId: string; paymentIntentId: string | null; amountTotal: number | null; currency: string | null; now: Date },
): Promise<PackGrant> {
  const currency = input.currency?.toLowerCase() ?? null;
  // The payment intent maps refunds to the row: one that already names another row is not taken over.
  const claimed = await tx.query<PurchaseRow>(
    `UPDATE credit_purchases SET granted_at = $2,
       stripe_payment_intent_id = COALESCE(stripe_payment_intent_id,
         (SELECT $3::text WHERE NOT EXISTS (SELECT 1 FROM credit_purchases o WHERE o.stripe_payment_intent_id = $3::text))),
       amount_total = COALESCE(amount_total, $4), currency = COALESCE(currency, $5)
     WHERE stripe_checkout_session_id = $1 AND granted_at IS NULL
       AND $4::bigint IS NOT NULL AND $5::text IS NOT NULL
       AND (amount_total IS NULL OR amount_total = $4::bigint) AND (currency IS NULL OR currency = $5::text)
     RETURNING *`,
    [input.checkoutSessionId, input.now, input.paymentIntentId, input.amountTotal, currency],
  );
  const row = claimed[0];
  if (!row) {
    const stored = await storedPackSale(tx, input.checkoutSessionId);
    if (!stored) return { granted: false, reason: 'not stored' };
    return { granted: false, reason: stored.granted_at ? 'already granted' : 'amount or currency differs', organizationId: stored.organization_id };
  }
  const after = await changePurchased(tx, {
    deploymentId: row.deployment_id,
    amount: row.credits,
    reason: `credit pack ${row.pack} (${row.stripe_checkout_session_id})`,
    actor: 'stripe',
    now: input.now,
    eventData: { pack: row.pack, checkout_session_id: row.stripe_checkout_session_id },
  });
  await tx.query('UPDATE credit_purchases SET ledger_id = $2 WHERE id = $1', [row.id, after.ledgerId]);
  return { granted: true, credits: row.credits, organizationId: row.organization_id };
}

/**
 * Stripe refunded (part of) a pack's payment: take back the refunded share of its credits as far as
 * they are unspent (held ones included: `unspent`), never below zero, as an `adjust` row.
 * `amountRefunded` is Stripe's running total, so a repeated or reordered `charge.refunded` settles
 * nothing twice. What was already spent is not taken back (it stays `refund_share − credits_taken_back`).
 */
export async function takeBackRefund(
  tx: Queryable,
  input: { paymentIntentId: string; amount: number; amountRefunded: number; now: Date },
): Promise<{ found: boolean; organizationId?: string; takenBack: number; shortfall: number }> {
  const rows = await tx.query<PurchaseRow>(
    'SELECT * FROM credit_purchases WHERE stripe_payment_intent_id = $1 AND granted_at IS NOT NULL FOR UPDATE',
    [input.paymentIntentId],
  );
  const row = rows[0];
  if (!row) return { found: false, takenBack: 0, shortfall: 0 };
  // What a dispute still holds is not refundable again (Stripe refunds no disputed amount).
  const refundable = row.credits - (row.dispute_reinstated ? 0 : row.dispute_share);
  const share = Math.min(
    refundable,
    input.amount <= 0 ? row.credits : Math.floor((row.credits * Math.min(input.amountRefunded, input.amount)) / input.amount),
  );
  const due = share - row.refund_share;
  if (due <= 0) return { found: true, organizationId: row.organization_id, takenBack: 0, shortfall: 0 };
  const balance = await syncBalance(tx, row.deployment_id, input.now, 'stripe');
  const take = Math.min(due, unspent(balance));
  if (take > 0) {
    const what = `${row.stripe_checkout_session_id ? 'credit pack' : 'auto top-up'} ${row.pack} (${row.stripe_checkout_session_id ?? input.paymentIntentId})`;
    await movePurchased(tx, row.deployment_id, -take, `refund of ${what}: ${take} of ${due} credits unspent`, input.now);
  }
  await tx.query('UPDATE credit_purchases SET refund_share = $2, credits_taken_back = credits_taken_back + $3 WHERE id = $1', [row.id, share, take]);
  return { found: true, organizationId: row.organization_id, takenBack: take, shortfall: due - take };
}

/**
 * What a take-back can take: the purchased credits not spent, held ones included. Were held credits
 * spared, a tenant could hold its whole balance (a reservation costs nothing) while the refund or
 * chargeback is handled, release the hold and keep credits whose money went back. The holds that
 * counted on them are left without them: a record that would spend one is refused as any deduction
 * past the balance, and an AI call's settle charges what is left and owes the rest (credits/owed.ts).
 */
const unspent = (balance: { purchased_balance: number }) => Math.max(0, balance.purchased_balance);

/**
 * A purchase's credits taken back or given back. Not a deduction: the auto top-up trigger asks for
 * nothing on it (migration 0027), so refunding a top-up does not buy the next one at once
 * (docs/billing.md, "Auto top-up").
 */
async function movePurchased(tx: Queryable, deploymentId: string, amount: number, reason: string, now: Date, refillsGrants = 0): Promise<number> {
  await tx.query("SELECT set_config('creditgate.no_auto_top_up', 'on', true)");
  const changed = await changePurchased(tx, { deploymentId, amount, reason, actor: 'stripe', now, takesHeld: true, refillsGrants });
  await tx.query("SELECT set_config('creditgate.no_auto_top_up', 'off', true)");
  return changed.fromGrants;
}

/**
 * The funds of a pack's payment were withdrawn by a dispute (a chargeback, docs/billing.md "Disputes"):
 * the disputed share of its credits is taken back as far as unspent, as a refund's is. A charge has one
 * dispute at most, so a purchase settles one; a repeat of the event, or another event of the same
 * dispute, changes nothing.
 */
export async function takeBackDispute(
  tx: Queryable,
  input: { paymentIntentId: string; disputeId: string; amount: number; now: Date },
): Promise<{ found: boolean; organizationId?: string; takenBack: number }> {
  const rows = await tx.query<PurchaseRow>(
    'SELECT * FROM credit_purchases WHERE stripe_payment_intent_id = $1 AND granted_at IS NOT NULL FOR UPDATE',
    [input.paymentIntentId],
  );
  const row = rows[0];
  if (!row) return { found: false, takenBack: 0 };
  if (row.dispute_id !== null) return { found: true, organizationId: row.organization_id, takenBack: 0 };
  const paid = row.amount_total ?? 0;
  const open = row.credits - row.refund_share;
  const share = paid <= 0 ? open : Math.min(open, Math.floor((row.credits * Math.min(input.amount, paid)) / paid));
  const balance = await syncBalance(tx, row.deployment_id, input.now, 'stripe');
  const take = Math.max(0, Math.min(share, unspent(balance)));
  let fromGrants = 0;
  if (take > 0) {
    const what = row.stripe_checkout_session_id ? 'credit pack' : 'auto top-up';
    fromGrants = await movePurchased(tx, row.deployment_id, -take, `dispute ${input.disputeId} of ${what} ${row.pack}: ${take} of ${share} credits unspent`, input.now);
  }
  await tx.query('UPDATE credit_purchases SET dispute_id = $2, dispute_share = $3, dispute_taken_back = $4, dispute_taken_from_grants = $5 WHERE id = $1', [
    row.id,
    input.disputeId,
    share,
    take,
    fromGrants,
  ]);
  return { found: true, organizationId: row.organization_id, takenBack: take };
}

/**
 * The dispute was decided for the seller and its funds came back: what it took back is given back,
 * once. Arriving before its funds_withdrawn (Stripe does not keep events in order), it is noted as
 * settled and reinstated, so the withdrawal arriving late takes nothing. Another dispute than the one
 * this purchase settled changes nothing.
 */
export async function reinstateDispute(
  tx: Queryable,
  input: { paymentIntentId: string; disputeId: string; now: Date },
): Promise<{ found: boolean; organizationId?: string; givenBack: number }> {
  const rows = await tx.query<PurchaseRow>('SELECT * FROM credit_purchases WHERE stripe_payment_intent_id = $1 FOR UPDATE', [input.paymentIntentId]);
  const row = rows[0];
  if (!row) return { found: false, givenBack: 0 };
  if (row.dispute_id === null) {
    await tx.query('UPDATE credit_purchases SET dispute_id = $2, dispute_reinstated = true WHERE id = $1', [row.id, input.disputeId]);
    return { found: true, organizationId: row.organization_id, givenBack: 0 };
  }
  if (row.dispute_id !== input.disputeId || row.dispute_reinstated) return { found: true, organizationId: row.organization_id, givenBack: 0 };
  const give = row.dispute_taken_back;
  // What the take-back took from open expiring grants goes back to them (docs/metering.md, Expiring grants).
  if (give > 0) await movePurchased(tx, row.deployment_id, give, `dispute ${input.disputeId} won: ${give} credits given back`, input.now, row.dispute_taken_from_grants);
  await tx.query('UPDATE credit_purchases SET dispute_reinstated = true WHERE id = $1', [row.id]);
  return { found: true, organizationId: row.organization_id, givenBack: give };
}
