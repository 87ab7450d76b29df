import { newId, nextPeriodEnd } from './clock.js';
import { findOrThrow, invalidParam, invalidRequest } from './errors.js';
import { type Collection, draftInvoice, issueInvoice, markFailed, markPaid } from './invoices.js';
import type { InvoiceObject, Metadata, PriceObject, SubscriptionItemObject, SubscriptionObject } from './objects.js';
import { type StandInContext, changedFields, snapshot } from './state.js';

export interface SubscriptionStart {
  customer: string;
  price: PriceObject;
  quantity: number;
  metadata: Metadata;
  /** `open` is a bank debit on its way: the subscription stays `incomplete` until its invoice is paid. */
  collection: Exclude<Collection, 'failed'>;
}

/** A new subscription billed at once: `customer.subscription.created`, then its first invoice's events. */
export function startSubscription(ctx: StandInContext, input: SubscriptionStart): SubscriptionObject {
  const sub = buildSubscription(ctx, input);
  ctx.state.subscriptions.set(sub.id, sub);
  const invoice = draftInvoice(ctx, sub, 'subscription_create', { start: sub.created, end: sub.created });
  sub.latest_invoice = invoice.id;
  ctx.emit('customer.subscription.created', sub);
  issueInvoice(ctx, invoice, input.collection);
  return sub;
}

function buildSubscription(ctx: StandInContext, input: SubscriptionStart): SubscriptionObject {
  const now = ctx.clock.seconds();
  const id = newId('sub_');
  const interval = input.price.recurring?.interval ?? 'month';
  const item: SubscriptionItemObject = {
    id: newId('si_'),
    object: 'subscription_item',
    created: now,
    current_period_end: nextPeriodEnd(now, interval, now),
    current_period_start: now,
    discounts: [],
    metadata: {},
    price: snapshot(input.price),
    quantity: input.quantity,
    subscription: id,
    tax_rates: [],
  };
  return {
    id,
    object: 'subscription',
    billing_cycle_anchor: now,
    cancel_at: null,
    cancel_at_period_end: false,
    canceled_at: null,
    cancellation_details: { comment: null, feedback: null, reason: null },
    collection_method: 'charge_automatically',
    created: now,
    currency: input.price.currency,
    customer: input.customer,
    days_until_due: null,
    default_payment_method: null,
    description: null,
    discounts: [],
    ended_at: null,
    items: { object: 'list', data: [item], has_more: false, total_count: 1, url: `/v1/subscription_items?subscription=${id}` },
    latest_invoice: null,
    livemode: false,
    metadata: { ...input.metadata },
    pause_collection: null,
    start_date: now,
    status: input.collection === 'paid' ? 'active' : 'incomplete',
    trial_end: null,
    trial_start: null,
  };
}

function itemOf(sub: SubscriptionObject): SubscriptionItemObject {
  return sub.items.data[0]!;
}

/**
 * The period ends and Stripe bills the next one: `customer.subscription.updated` (the new period), then the
 * renewal invoice's events; a declined renewal then moves the subscription to `past_due` (a second
 * `customer.subscription.updated`). A subscription set to cancel at period end ends instead.
 */
export function renewSubscription(ctx: StandInContext, id: string, collection: 'paid' | 'failed'): SubscriptionObject {
  const sub = findOrThrow(ctx.state.subscriptions, id, 'subscription');
  if (!['active', 'past_due', 'trialing'].includes(sub.status)) throw invalidRequest(`Subscription ${id} is ${sub.status}; only a live subscription renews.`);
  if (sub.cancel_at_period_end) return endSubscription(ctx, sub, itemOf(sub).current_period_end);
  const before = snapshot(sub);
  const invoice = startNextPeriod(ctx, sub);
  if (collection === 'paid') sub.status = 'active';
  ctx.emit('customer.subscription.updated', sub, changedFields(before, sub));
  issueInvoice(ctx, invoice, collection);
  if (collection === 'failed') setStatus(ctx, sub, 'past_due');
  return snapshot(sub);
}

function startNextPeriod(ctx: StandInContext, sub: SubscriptionObject): InvoiceObject {
  const item = itemOf(sub);
  const ended = { start: item.current_period_start, end: item.current_period_end };
  item.current_period_start = ended.end;
  item.current_period_end = nextPeriodEnd(sub.billing_cycle_anchor, item.price.recurring?.interval ?? 'month', ended.end);
  const invoice = draftInvoice(ctx, sub, 'subscription_cycle', ended);
  sub.latest_invoice = invoice.id;
  return invoice;
}

function setStatus(ctx: StandInContext, sub: SubscriptionObject, status: SubscriptionObject['status']): void {
  if (sub.status === status) return;
  const before = snapshot(sub);
  sub.status = status;
  ctx.emit('customer.subscription.updated', sub, changedFields(before, sub));
}

/** Collect an open invoice (a retried card, a settled bank debit); its subscription becomes `active` again. */
export function payInvoice(ctx: StandInContext, invoiceId: string): InvoiceObject {
  const invoice = findOrThrow(ctx.state.invoices, invoiceId, 'invoice');
  markPaid(ctx, invoice);
  const sub = ctx.state.subscriptions.get(invoice.parent.subscription_details.subscription);
  if (sub && sub.latest_invoice === invoice.id && ['past_due', 'incomplete', 'unpaid'].includes(sub.status)) setStatus(ctx, sub, 'active');
  return snapshot(invoice);
}

/** A declined attempt on an open invoice (`invoice.payment_failed`); the subscription's status stays. */
export function declineInvoice(ctx: StandInContext, invoiceId: string): InvoiceObject {
  const invoice = findOrThrow(ctx.state.invoices, invoiceId, 'invoice');
  if (invoice.status !== 'open') throw invalidRequest(`Invoice ${invoice.id} is ${invoice.status}, not open.`, 'invoice_not_open');
  markFailed(ctx, invoice);
  return snapshot(invoice);
}

export interface SubscriptionUpdate {
  itemId?: string;
  price?: string;
  quantity?: number;
  cancelAtPeriodEnd?: boolean;
  /** Already merged by the caller (Stripe's metadata rules). */
  metadata?: Metadata;
}

/** `POST /v1/subscriptions/:id`: emits `customer.subscription.updated` with `previous_attributes` when anything changed. */
export function updateSubscription(ctx: StandInContext, id: string, update: SubscriptionUpdate): SubscriptionObject {
  const sub = findOrThrow(ctx.state.subscriptions, id, 'subscription');
  const touchesBilling = update.price !== undefined || update.quantity !== undefined || update.cancelAtPeriodEnd !== undefined;
  if (sub.status === 'canceled' && touchesBilling) {
    throw invalidRequest('A canceled subscription can only update its cancellation_details and metadata.');
  }
  const before = snapshot(sub);
  if (update.price !== undefined || update.quantity !== undefined) changeItem(ctx, sub, update);
  if (update.cancelAtPeriodEnd !== undefined) setCancelAtPeriodEnd(ctx, sub, update.cancelAtPeriodEnd);
  if (update.metadata !== undefined) sub.metadata = update.metadata;
  const previous = changedFields(before, sub);
  if (Object.keys(previous).length > 0) ctx.emit('customer.subscription.updated', sub, previous);
  return snapshot(sub);
}

/** A price or quantity change keeps the current period (the stand-in does not model prorations). */
function changeItem(ctx: StandInContext, sub: SubscriptionObject, update: SubscriptionUpdate): void {
  const item = itemOf(sub);
  if (update.itemId !== item.id) {
    const message = update.itemId === undefined ? 'The Stripe stand-in models one item: pass items[0][id].' : `No such subscription item: '${update.itemId}'`;
    throw invalidParam('items[0][id]', message, update.itemId === undefined ? 'parameter_missing' : 'resource_missing');
  }
  if (update.price !== undefined) {
    const price = findOrThrow(ctx.state.prices, update.price, 'price', 'items[0][price]');
    if (!price.recurring) throw invalidParam('items[0][price]', 'The price specified is not recurring. Subscriptions need a recurring price.');
    if (price.currency !== sub.currency) throw invalidParam('items[0][price]', `The price's currency (${price.currency}) differs from the subscription's (${sub.currency}).`);
    item.price = snapshot(price);
  }
  if (update.quantity !== undefined) {
    if (update.quantity < 1) throw invalidParam('items[0][quantity]', 'Invalid positive integer');
    item.quantity = update.quantity;
  }
}

/** As Stripe: `cancel_at` follows the period end, and `canceled_at` records when the cancellation was asked for. */
function setCancelAtPeriodEnd(ctx: StandInContext, sub: SubscriptionObject, cancel: boolean): void {
  sub.cancel_at_period_end = cancel;
  sub.cancel_at = cancel ? itemOf(sub).current_period_end : null;
  sub.canceled_at = cancel ? ctx.clock.seconds() : null;
  sub.cancellation_details = { comment: null, feedback: null, reason: cancel ? 'cancellation_requested' : null };
}

/** `DELETE /v1/subscriptions/:id`: ends now; emits `customer.subscription.deleted`. */
export function cancelSubscription(ctx: StandInContext, id: string): SubscriptionObject {
  const sub = findOrThrow(ctx.state.subscriptions, id, 'subscription');
  if (sub.status === 'canceled') throw invalidRequest(`Subscription ${id} is already canceled.`);
  sub.canceled_at = ctx.clock.seconds();
  return endSubscription(ctx, sub, ctx.clock.seconds());
}

function endSubscription(ctx: StandInContext, sub: SubscriptionObject, at: number): SubscriptionObject {
  sub.status = 'canceled';
  sub.ended_at = at;
  sub.canceled_at ??= at;
  sub.cancellation_details = { comment: null, feedback: null, reason: 'cancellation_requested' };
  ctx.emit('customer.subscription.deleted', sub);
  return snapshot(sub);
}
