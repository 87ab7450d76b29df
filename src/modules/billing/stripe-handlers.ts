import type Stripe from 'stripe';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { grantPack, type PackSale, takeBackRefund } from '../credits/purchases.js';
import { emitEvent } from '../events/outbox.js';
import { isUuid } from '../metering/state.js';
import { type EventOutcome, organizationOfCustomer, stripeId, toDate, wholeNumber } from './stripe-objects.js';

/**
 * Handlers of the non-subscription events of SPEC §9, each inside the transaction that marks the
 * event processed. Subscriptions are in billing/subscriptions.ts.
 */

/** The metadata creditgate puts on a pack's Checkout Session (billing/checkout.ts). */
export function packSaleOf(session: Stripe.Checkout.Session): PackSale | null {
  const m = session.metadata ?? {};
  const credits = Number(m.creditgate_credits);
  if (session.mode !== 'payment' || !m.creditgate_pack || !Number.isSafeInteger(credits) || credits <= 0 || credits > 1_000_000_000) return null;
  if (!isUuid(m.organization_id ?? '') || !isUuid(m.deployment_id ?? '')) return null;
  return {
    organizationId: m.organization_id!,
    deploymentId: m.deployment_id!,
    pack: m.creditgate_pack,
    credits,
    checkoutSessionId: session.id,
    priceId: m.creditgate_price ?? '',
  };
}

/**
 * `checkout.session.completed` (paid) and `checkout.session.async_payment_succeeded`: a pack's credits,
 * once per session. A subscription's session only links the customer: its subscription events do the rest.
 */
export async function handleCheckoutSession(tx: Queryable, ctx: Ctx, session: Stripe.Checkout.Session): Promise<EventOutcome> {
  const customer = stripeId(session.customer);
  const sale = packSaleOf(session);
  if (!sale) {
    const organizationId = await organizationOfCustomer(tx, customer, session.metadata?.organization_id ?? null);
    return organizationId ? { organizationId } : { ignored: 'not a creditgate Checkout Session' };
  }
  if (session.payment_status !== 'paid') return { organizationId: sale.organizationId, ignored: `payment_status ${session.payment_status}` };
  // The session's deployment must belong to the organization it names, and that organization to the customer.
  const owner = await tx.query<{ organization_id: string; stripe_customer_id: string | null }>(
    'SELECT d.organization_id, o.stripe_customer_id FROM deployments d JOIN organizations o ON o.id = d.organization_id WHERE d.id = $1',
    [sale.deploymentId],
  );
  const o = owner[0];
  if (!o || o.organization_id !== sale.organizationId || (customer !== null && o.stripe_customer_id !== null && o.stripe_customer_id !== customer)) {
    return { ignored: 'the session names a deployment of another organization or customer' };
  }
  const result = await grantPack(tx, {
    sale,
    paymentIntentId: stripeId(session.payment_intent),
    amountTotal: wholeNumber(session.amount_total),
    currency: typeof session.currency === 'string' ? session.currency.slice(0, 10) : null,
    now: ctx.clock.now(),
  });
  return result.granted ? { organizationId: sale.organizationId } : { organizationId: sale.organizationId, ignored: 'pack already granted for this session' };
}

/** `charge.refunded`: a pack's refunded share comes back out of purchased credits, as far as unspent. */
export async function handleChargeRefunded(tx: Queryable, ctx: Ctx, charge: Stripe.Charge): Promise<EventOutcome> {
  const paymentIntent = stripeId(charge.payment_intent);
  if (!paymentIntent) return { ignored: 'charge without a payment intent' };
  const amount = wholeNumber(charge.amount);
  const amountRefunded = wholeNumber(charge.amount_refunded);
  if (amount === null || amountRefunded === null || amount < 0 || amountRefunded < 0) return { ignored: 'charge without whole amounts' };
  const result = await takeBackRefund(tx, { paymentIntentId: paymentIntent, amount, amountRefunded, now: ctx.clock.now() });
  if (!result.found) {
    // A pack's charge (its payment intent carries our metadata) refunded before the grant was handled:
    // fail, so the event stays pending and the worker retries it once the grant has landed.
    if (charge.metadata?.creditgate_pack) throw new Error(`charge ${charge.id}: its credit pack is not granted yet; retried later`);
    return { ignored: 'not the charge of a credit pack' };
  }
  return { organizationId: result.organizationId! };
}

const INVOICE_RANK = `CASE $1::text WHEN 'draft' THEN 0 WHEN 'open' THEN 1 ELSE 2 END`;

/**
 * `invoice.created|finalized|paid|payment_failed|voided`: stored for /billing/invoices. A status never
 * moves back (draft → open → paid/void/uncollectible), so an older event arriving late changes
 * nothing. `invoice.payment_failed` of a subscription in force makes it (and the organization) past_due.
 */
export async function handleInvoice(tx: Queryable, ctx: Ctx, type: string, invoice: Stripe.Invoice): Promise<EventOutcome> {
  const customer = stripeId(invoice.customer);
  const organizationId = await organizationOfCustomer(tx, customer, null);
  if (!organizationId || !invoice.id) return { ignored: `no organization for customer ${customer ?? '(none)'}` };
  const now = ctx.clock.now();
  const { raw: _raw, ...stored } = invoice as Stripe.Invoice & { raw?: unknown };
  await tx.query(
    `INSERT INTO invoices (organization_id, stripe_invoice_id, status, amount_due, amount_paid, currency, hosted_invoice_url,
       period_start, period_end, raw, created_at)
     VALUES ($2, $3, $1, $4, $5, $6, $7, $8, $9, $10, $11)
     ON CONFLICT (stripe_invoice_id) DO UPDATE SET status = EXCLUDED.status, amount_due = EXCLUDED.amount_due,
       amount_paid = EXCLUDED.amount_paid, hosted_invoice_url = COALESCE(EXCLUDED.hosted_invoice_url, invoices.hosted_invoice_url), raw = EXCLUDED.raw
     WHERE invoices.organization_id = EXCLUDED.organization_id
       AND ${INVOICE_RANK} >= CASE invoices.status WHEN 'draft' THEN 0 WHEN 'open' THEN 1 ELSE 2 END`,
    [
      typeof invoice.status === 'string' ? invoice.status.slice(0, 40) : null,
      organizationId,
      invoice.id,
      wholeNumber(invoice.amount_due),
      wholeNumber(invoice.amount_paid),
      typeof invoice.currency === 'string' ? invoice.currency.slice(0, 10) : null,
      typeof invoice.hosted_invoice_url === 'string' ? invoice.hosted_invoice_url.slice(0, 2048) : null,
      toDate(invoice.period_start),
      toDate(invoice.period_end),
      JSON.stringify(stored),
      toDate(invoice.created) ?? now,
    ],
  );
  if (type === 'invoice.payment_failed') {
    const subscription = stripeId(invoice.parent?.subscription_details?.subscription ?? null);
    if (subscription) {
      const rows = await tx.query<{ id: string }>(
        `UPDATE subscriptions SET status = 'past_due', updated_at = $3 WHERE stripe_subscription_id = $1 AND organization_id = $2 AND status = 'active' RETURNING id`,
        [subscription, organizationId, now],
      );
      if (rows[0]) {
        await emitEvent(tx, {
          organizationId,
          type: 'subscription.updated',
          data: { organization_id: organizationId, subscription_id: subscription, status: 'past_due', previous_status: 'active', invoice_id: invoice.id },
          at: now,
        });
        await tx.query(`UPDATE organizations SET subscription_status = 'past_due', updated_at = $2 WHERE id = $1 AND stripe_subscription_id = $3`, [
          organizationId,
          now,
          subscription,
        ]);
      }
    }
  }
  return { organizationId };
}
