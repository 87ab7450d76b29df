import type { Queryable } from '../../db/client.js';
import { changePurchased, purchasedFloor, syncBalance } from './service.js';

/**
 * Credit packs sold through Stripe Checkout (SPEC §9), the money side. A pack is granted once per
 * Checkout Session: the grant claims `granted_at` with a guarded UPDATE in its own transaction, so
 * duplicate deliveries, the completed/async-succeeded pair and several instances all grant once.
 */

export interface PackSale {
  organizationId: string;
  deploymentId: string;
  pack: string;
  credits: number;
  checkoutSessionId: string;
  priceId: string;
}

/** The row written when the Checkout Session is made; a grant without one (a crash in between) writes it from the session's metadata. */
export async function recordPackCheckout(tx: Queryable, sale: PackSale, now: Date): Promise<void> {
  await tx.query(
    `INSERT INTO credit_purchases (organization_id, deployment_id, pack, credits, stripe_checkout_session_id, stripe_price_id, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (stripe_checkout_session_id) DO NOTHING`,
    [sale.organizationId, sale.deploymentId, sale.pack, sale.credits, sale.checkoutSessionId, sale.priceId, now],
  );
}

interface PurchaseRow {
  id: string;
  organization_id: string;
  deployment_id: string;
  pack: string;
  credits: number;
  stripe_checkout_session_id: string;
  refund_share: number;
  credits_taken_back: number;
}

/**
 * The customer paid: grant the pack's credits as purchased credits, with the ledger row and the
 * `credits.purchased` event, unless this session was granted before. The credits are the ones recorded
 * when the session was made (a pack changed since does not change what was sold).
 */
export async function grantPack(
  tx: Queryable,
  input: { sale: PackSale; paymentIntentId: string | null; amountTotal: number | null; currency: string | null; now: Date },
): Promise<{ granted: boolean; credits: number }> {
  await recordPackCheckout(tx, input.sale, input.now);
  const claimed = await tx.query<PurchaseRow>(
    `UPDATE credit_purchases SET granted_at = $2, stripe_payment_intent_id = COALESCE(stripe_payment_intent_id, $3),
       amount_total = $4, currency = $5
     WHERE stripe_checkout_session_id = $1 AND granted_at IS NULL RETURNING *`,
    [input.sale.checkoutSessionId, input.now, input.paymentIntentId, input.amountTotal, input.currency],
  );
  const row = claimed[0];
  if (!row) return { granted: false, credits: 0 };
  const after = await changePurchased(tx, {
    deploymentId: row.deployment_id,
    amount: row.credits,
    reason: `credit pack ${row.pack} (${row.stripe_checkout_session_id})`,
    actor: 'stripe',
    now: input.now,
    eventData: { pack: row.pack, checkout_session_id: row.stripe_checkout_session_id },
  });
  await tx.query('UPDATE credit_purchases SET ledger_id = $2 WHERE id = $1', [row.id, after.ledgerId]);
  return { granted: true, credits: row.credits };
}

/**
 * Stripe refunded (part of) a pack's payment: take back the refunded share of its credits as far as
 * they are unspent — never below zero, never what open reservations hold — as an `adjust` row.
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
  const share = input.amount <= 0 ? row.credits : Math.min(row.credits, Math.floor((row.credits * Math.min(input.amountRefunded, input.amount)) / input.amount));
  const due = share - row.refund_share;
  if (due <= 0) return { found: true, organizationId: row.organization_id, takenBack: 0, shortfall: 0 };
  const balance = await syncBalance(tx, row.deployment_id, input.now, 'stripe');
  const take = Math.min(due, purchasedFloor(balance));
  if (take > 0) {
    await changePurchased(tx, {
      deploymentId: row.deployment_id,
      amount: -take,
      reason: `refund of credit pack ${row.pack} (${row.stripe_checkout_session_id}): ${take} of ${due} credits unspent`,
      actor: 'stripe',
      now: input.now,
    });
  }
  await tx.query('UPDATE credit_purchases SET refund_share = $2, credits_taken_back = credits_taken_back + $3 WHERE id = $1', [row.id, share, take]);
  return { found: true, organizationId: row.organization_id, takenBack: take, shortfall: due - take };
}
