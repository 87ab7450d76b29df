import type Stripe from 'stripe';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { lockName } from '../../db/locks.js';
import { grantPack, reinstateDispute, storedPackSale, takeBackDispute, takeBackRefund } from '../credits/index.js';
import { emitEvent } from '../events/outbox.js';
import { type EventOutcome, organizationOfCustomer, stripeId, toDate, wholeNumber } from './stripe-objects.js';

/**
 * Handlers of the non-subscription events of docs/billing.md (Inbound events), each inside the transaction that marks the
 * event processed. Subscriptions are in billing/subscriptions.ts.
 */

/** What the pack's metadata says (billing/checkout.ts puts it there) against the stored sale: a value present and different is a forgery. */
function metadataDisagrees(session: Stripe.Checkout.Session, sale: StoredSale): string | null {
  const m = session.metadata ?? {};
  const expected: Record<string, string> = {
    organization_id: sale.organization_id,
    deployment_id: sale.deployment_id,
    creditgate_pack: sale.pack,
    creditgate_credits: String(sale.credits),
    creditgate_price: sale.stripe_price_id,
  };
  for (const [key, value] of Object.entries(expected)) {
    if (Object.hasOwn(m, key) && m[key] !== value) return key;
  }
  return null;
}

type StoredSale = NonNullable<Awaited<ReturnType<typeof storedPackSale>>>;

/**
 * `checkout.session.completed` (paid) and `checkout.session.async_payment_succeeded`: a pack's credits,
 * once per session, and only for a session this installation made and stored (docs/billing.md,
 * "Credit packs"): credits, pack and deployment come from the stored row, never from the event. A
 * subscription's session only links the customer: its subscription events do the rest.
 */
export async function handleCheckoutSession(tx: Queryable, ctx: Ctx, session: Stripe.Checkout.Session): Promise<EventOutcome> {
  const customer = stripeId(session.customer);
  const sale = typeof session.id === 'string' ? await storedPackSale(tx, session.id) : null;
  if (!sale) {
    if (session.mode === 'payment') return { ignored: 'a payment Checkout Session this installation did not store: nothing granted', refused: true };
    const organizationId = await organizationOfCustomer(tx, customer, session.metadata?.organization_id ?? null);
    return organizationId ? { organizationId } : { ignored: 'not a creditgate Checkout Session' };
  }
  const organizationId = sale.organization_id;
  if (session.payment_status !== 'paid') return { organizationId, ignored: `payment_status ${session.payment_status}` };
  const forged = metadataDisagrees(session, sale);
  if (forged) return { organizationId, ignored: `metadata ${forged} differs from the stored sale: nothing granted`, refused: true };
  // The customer paying must be the organization's (set when the session was made for it).
  const owner = await tx.query<{ stripe_customer_id: string | null }>('SELECT stripe_customer_id FROM organizations WHERE id = $1', [organizationId]);
  const known = owner[0]?.stripe_customer_id ?? null;
  if (customer !== null && known !== null && known !== customer) {
    return { organizationId, ignored: 'the session names another customer than the organization’s: nothing granted', refused: true };
  }
  const paymentIntentId = stripeId(session.payment_intent);
  if (paymentIntentId) await lockPayment(tx, paymentIntentId);
  const result = await grantPack(tx, {
    checkoutSessionId: session.id,
    paymentIntentId,
    amountTotal: wholeNumber(session.amount_total),
    currency: typeof session.currency === 'string' ? session.currency.slice(0, 10) : null,
    now: ctx.clock.now(),
  });
  if (result.granted) {
    if (paymentIntentId) await settleEarlyEvents(tx, ctx, paymentIntentId);
    return { organizationId };
  }
  if (result.reason === 'amount or currency differs') {
    return { organizationId, ignored: `amount ${String(session.amount_total).slice(0, 40)} ${String(session.currency).slice(0, 10)} is not the stored sale's: nothing granted`, refused: true };
  }
  return { organizationId, ignored: result.reason === 'already granted' ? 'pack already granted for this session' : 'no stored sale' };
}

/** `charge.refunded`: a pack's refunded share comes back out of purchased credits, as far as unspent. */
export async function handleChargeRefunded(tx: Queryable, ctx: Ctx, charge: Stripe.Charge): Promise<EventOutcome> {
  const paymentIntent = stripeId(charge.payment_intent);
  if (!paymentIntent) return { ignored: 'charge without a payment intent' };
  const amount = wholeNumber(charge.amount);
  const amountRefunded = wholeNumber(charge.amount_refunded);
  if (amount === null || amountRefunded === null || amount < 0 || amountRefunded < 0) return { ignored: 'charge without whole amounts' };
  await lockPayment(tx, paymentIntent);
  const result = await takeBackRefund(tx, { paymentIntentId: paymentIntent, amount, amountRefunded, now: ctx.clock.now() });
  if (!result.found) {
    // A pack's charge (its payment intent carries our metadata) refunded before the grant was handled:
    // fail, so the event stays pending and the worker retries it once the grant has landed.
    if (charge.metadata?.creditgate_pack) throw new Error(`charge ${charge.id}: its credit pack is not granted yet; retried later`);
    return { ignored: 'not the charge of a credit pack' };
  }
  return { organizationId: result.organizationId! };
}

/**
 * `charge.dispute.funds_withdrawn` and `charge.dispute.funds_reinstated` (docs/billing.md, "Disputes"): a
 * chargeback's funds left, and the disputed share of a pack's (or auto top-up's) credits is taken back
 * as far as unspent; the dispute won and its funds came back, and what it took is given back. Other
 * dispute events change no balance.
 */
export async function handleDispute(tx: Queryable, ctx: Ctx, type: string, dispute: Stripe.Dispute): Promise<EventOutcome> {
  const paymentIntent = stripeId(dispute.payment_intent);
  if (!paymentIntent || typeof dispute.id !== 'string') return { ignored: 'dispute without a payment intent' };
  const now = ctx.clock.now();
  await lockPayment(tx, paymentIntent);
  if (type === 'charge.dispute.funds_withdrawn') {
    const amount = wholeNumber(dispute.amount);
    if (amount === null || amount < 0) return { ignored: 'dispute without a whole amount' };
    const result = await takeBackDispute(tx, { paymentIntentId: paymentIntent, disputeId: dispute.id, amount, now });
    return result.found ? { organizationId: result.organizationId! } : { ignored: NO_GRANTED_PURCHASE };
  }
  if (type === 'charge.dispute.funds_reinstated') {
    const result = await reinstateDispute(tx, { paymentIntentId: paymentIntent, disputeId: dispute.id, now });
    return result.found ? { organizationId: result.organizationId! } : { ignored: NO_GRANTED_PURCHASE };
  }
  return { ignored: `${type} changes no balance` };
}

/** Why a dispute event changed nothing: no granted purchase has its payment, yet (or ever: not ours). */
const NO_GRANTED_PURCHASE = 'no granted credit pack or auto top-up has this payment (yet)';

/**
 * A payment's grant, its refunds and its disputes are handled one at a time, by whichever instance
 * (docs/billing.md, "Disputes"): each takes this lock before reading the purchase. Without it a
 * dispute could read "not granted" while the grant was being committed, and be ignored for good.
 */
export async function lockPayment(tx: Queryable, paymentIntentId: string): Promise<void> {
  await lockName(tx, `creditgate-payment:${paymentIntentId}`);
}

/**
 * A purchase was just granted: the refunds and disputes of its payment that came before the grant
 * (Stripe does not keep events in order, and a `checkout.session.completed` can wait days for an
 * endpoint that was down) are settled now, in the grant's transaction, oldest first (docs/billing.md,
 * "Disputes"). Left to the worker's backoff, the credits of money already refunded could be spent
 * meanwhile; ignored for good, the pack would keep them. Events another transaction is handling are
 * skipped: that one reads the purchase after this grant's commit (it waits for the payment's lock).
 */
export async function settleEarlyEvents(tx: Queryable, ctx: Ctx, paymentIntentId: string): Promise<void> {
  const early = await tx.query<{ id: string; type: string; payload: Stripe.Event }>(
    `SELECT id, type, payload FROM stripe_events
     WHERE (payload -> 'data' -> 'object' ->> 'payment_intent') = $1
       AND ((type = 'charge.refunded' AND status = 'pending')
         OR (type IN ('charge.dispute.funds_withdrawn', 'charge.dispute.funds_reinstated')
             AND (status = 'pending' OR (status = 'ignored' AND last_error = $2))))
     ORDER BY created_at, id FOR UPDATE SKIP LOCKED`,
    [paymentIntentId, NO_GRANTED_PURCHASE],
  );
  for (const event of early) {
    const object = event.payload.data.object;
    const outcome =
      event.type === 'charge.refunded'
        ? await handleChargeRefunded(tx, ctx, object as Stripe.Charge)
        : await handleDispute(tx, ctx, event.type, object as Stripe.Dispute);
    await tx.query(
      `UPDATE stripe_events SET status = $2, processed_at = $3, organization_id = $4, last_error = $5, attempts = attempts + 1,
         next_attempt_at = NULL WHERE id = $1`,
      [event.id, outcome.ignored ? 'ignored' : 'processed', ctx.clock.now(), outcome.organizationId ?? null, outcome.ignored ?? null],
    );
  }
}

const INVOICE_RANK = `CASE $1::text WHEN 'draft' THEN 0 WHEN 'open' THEN 1 ELSE 2 END`;

/**
 * `invoice.created|finalized|paid|payment_failed|voided`: stored for /billing/invoices. A status never
 * moves back (draft → open → paid/void/uncollectible), so an older event arriving late changes
 * nothing. `invoice.payment_failed` of a subscription in force makes it (and the organization) past_due,
 * unless the invoice is stored as paid or void already (the event arrived late).
 */
export async function handleInvoice(tx: Queryable, ctx: Ctx, type: string, invoice: Stripe.Invoice): Promise<EventOutcome> {
  const customer = stripeId(invoice.customer);
  const organizationId = await organizationOfCustomer(tx, customer, null);
  if (!organizationId || !invoice.id) return { ignored: `no organization for customer ${customer ?? '(none)'}` };
  const now = ctx.clock.now();
  const { raw: _raw, ...stored } = invoice as Stripe.Invoice & { raw?: unknown };
  const applied = await tx.query(
    `INSERT INTO invoices (organization_id, stripe_invoice_id, status, amount_due, amount_paid, currency, hosted_invoice_url,
       period_start, period_end, raw, created_at)
     VALUES ($2, $3, $1, $4, $5, $6, $7, $8, $9, $10, $11)
     ON CONFLICT (stripe_invoice_id) DO UPDATE SET status = EXCLUDED.status, amount_due = EXCLUDED.amount_due,
       amount_paid = EXCLUDED.amount_paid, hosted_invoice_url = COALESCE(EXCLUDED.hosted_invoice_url, invoices.hosted_invoice_url), raw = EXCLUDED.raw
     WHERE invoices.organization_id = EXCLUDED.organization_id
       AND ${INVOICE_RANK} >= CASE invoices.status WHEN 'draft' THEN 0 WHEN 'open' THEN 1 ELSE 2 END
     RETURNING status`,
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
  // A failed payment of an invoice stored as paid (or void) since is old news (Stripe redelivering an
  // event whose first delivery failed): the subscription is not made past_due again.
  if (type === 'invoice.payment_failed' && applied.length > 0) {
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
