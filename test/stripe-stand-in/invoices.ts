import { newId } from './clock.js';
import { findOrThrow, invalidRequest } from './errors.js';
import type { InvoiceLineItemObject, InvoiceObject, SubscriptionObject } from './objects.js';
import { createPayment } from './payments.js';
import type { StandInContext } from './state.js';

/** How an invoice's collection ends: paid, declined, or left open (a bank debit still on its way). */
export type Collection = 'paid' | 'failed' | 'open';

const RETRY_AFTER_SECONDS = 3 * 24 * 3600;

/**
 * A draft invoice for the subscription's current period. `lookBack` is Stripe's invoice period: the
 * subscription's creation instant for the first invoice, the period just ended for a renewal.
 */
export function draftInvoice(
  ctx: StandInContext,
  sub: SubscriptionObject,
  reason: InvoiceObject['billing_reason'],
  lookBack: { start: number; end: number },
): InvoiceObject {
  const customer = findOrThrow(ctx.state.customers, sub.customer, 'customer');
  const id = newId('in_');
  const line = lineFor(ctx, sub, id);
  const invoice: InvoiceObject = {
    id,
    object: 'invoice',
    amount_due: line.amount,
    amount_overpaid: 0,
    amount_paid: 0,
    amount_remaining: line.amount,
    attempt_count: 0,
    attempted: false,
    auto_advance: true,
    billing_reason: reason,
    collection_method: 'charge_automatically',
    created: ctx.clock.seconds(),
    currency: sub.currency,
    customer: sub.customer,
    customer_email: customer.email,
    customer_name: customer.name,
    description: null,
    due_date: null,
    effective_at: null,
    hosted_invoice_url: null,
    invoice_pdf: null,
    lines: { object: 'list', data: [line], has_more: false, total_count: 1, url: `/v1/invoices/${id}/lines` },
    livemode: false,
    metadata: {},
    next_payment_attempt: null,
    number: null,
    parent: { type: 'subscription_details', quote_details: null, subscription_details: { metadata: { ...sub.metadata }, subscription: sub.id } },
    period_end: lookBack.end,
    period_start: lookBack.start,
    status: 'draft',
    status_transitions: { finalized_at: null, marked_uncollectible_at: null, paid_at: null, voided_at: null },
    subtotal: line.amount,
    total: line.amount,
  };
  ctx.state.invoices.set(id, invoice);
  return invoice;
}

function lineFor(ctx: StandInContext, sub: SubscriptionObject, invoiceId: string): InvoiceLineItemObject {
  const item = sub.items.data[0]!;
  const product = ctx.state.products.get(item.price.product);
  const amount = item.price.unit_amount * item.quantity;
  const every = item.price.recurring?.interval ?? 'month';
  return {
    id: newId('il_'),
    object: 'line_item',
    amount,
    currency: sub.currency,
    description: `${item.quantity} × ${product?.name ?? item.price.product} (at ${formatAmount(item.price.unit_amount, sub.currency)} / ${every})`,
    discountable: true,
    discounts: [],
    invoice: invoiceId,
    livemode: false,
    metadata: { ...sub.metadata },
    parent: {
      type: 'subscription_item_details',
      invoice_item_details: null,
      subscription_item_details: {
        invoice_item: null,
        proration: false,
        proration_details: { credited_items: null },
        subscription: sub.id,
        subscription_item: item.id,
      },
    },
    period: { start: item.current_period_start, end: item.current_period_end },
    pricing: { type: 'price_details', price_details: { price: item.price.id, product: item.price.product }, unit_amount_decimal: String(item.price.unit_amount) },
    quantity: item.quantity,
    subtotal: amount,
    taxes: [],
  };
}

export function formatAmount(cents: number, currency: string): string {
  return `${(cents / 100).toFixed(2)} ${currency.toUpperCase()}`;
}

/** `invoice.created`, `invoice.finalized`, then the collection's outcome: Stripe's order for an automatic invoice. */
export function issueInvoice(ctx: StandInContext, invoice: InvoiceObject, collection: Collection): void {
  ctx.emit('invoice.created', invoice);
  finalize(ctx, invoice);
  ctx.emit('invoice.finalized', invoice);
  if (collection === 'paid') markPaid(ctx, invoice);
  if (collection === 'failed') markFailed(ctx, invoice);
}

function finalize(ctx: StandInContext, invoice: InvoiceObject): void {
  const customer = findOrThrow(ctx.state.customers, invoice.customer, 'customer');
  const now = ctx.clock.seconds();
  invoice.status = 'open';
  invoice.number = `${customer.invoice_prefix}-${String(customer.next_invoice_sequence).padStart(4, '0')}`;
  customer.next_invoice_sequence += 1;
  invoice.hosted_invoice_url = `${ctx.baseUrl}/invoices/${invoice.id}`;
  invoice.status_transitions.finalized_at = now;
  invoice.effective_at = now;
}

/** The customer's card is charged: a PaymentIntent and charge, then `invoice.paid` and `invoice.payment_succeeded`. */
export function markPaid(ctx: StandInContext, invoice: InvoiceObject): void {
  if (invoice.status !== 'open') throw invalidRequest(`Invoice ${invoice.id} is ${invoice.status}, not open.`, 'invoice_not_open');
  createPayment(ctx, {
    amount: invoice.amount_due,
    currency: invoice.currency,
    customer: invoice.customer,
    description: invoice.billing_reason === 'subscription_create' ? 'Subscription creation' : 'Subscription update',
    metadata: {},
    outcome: 'succeeded',
  });
  invoice.amount_paid = invoice.amount_due;
  invoice.amount_remaining = 0;
  invoice.attempted = true;
  invoice.attempt_count += 1;
  invoice.next_payment_attempt = null;
  invoice.status = 'paid';
  invoice.status_transitions.paid_at = ctx.clock.seconds();
  ctx.emit('invoice.paid', invoice);
  ctx.emit('invoice.payment_succeeded', invoice);
}

/** The card is declined: the invoice stays open and Stripe schedules another attempt. */
export function markFailed(ctx: StandInContext, invoice: InvoiceObject): void {
  invoice.attempted = true;
  invoice.attempt_count += 1;
  invoice.next_payment_attempt = ctx.clock.seconds() + RETRY_AFTER_SECONDS;
  ctx.emit('invoice.payment_failed', invoice);
}
