import { createCustomer } from './catalog.js';
import { newId } from './clock.js';
import { findOrThrow, invalidParam, invalidRequest } from './errors.js';
import type { CardBehaviour, CheckoutLineItemObject, CheckoutSessionObject, ListObject, Metadata, PortalSessionObject, PriceObject } from './objects.js';
import { saveCard, succeededSetupIntent } from './payment-methods.js';
import { createPayment, settlePayment } from './payments.js';
import { type CheckoutOrder, type StandInContext, snapshot } from './state.js';
import { declineInvoice, payInvoice, startSubscription } from './subscriptions.js';

const SESSION_LIFETIME_SECONDS = 24 * 3600;

export interface CheckoutInput {
  mode: 'payment' | 'subscription' | 'setup';
  customer?: string;
  customerEmail?: string;
  /** Absent in setup mode only. */
  price?: string;
  quantity: number;
  /** Setup mode (optional); in the other modes it must be the price's. */
  currency?: string;
  successUrl?: string;
  cancelUrl?: string;
  clientReferenceId?: string;
  metadata: Metadata;
  subscriptionMetadata?: Metadata;
  paymentIntentMetadata?: Metadata;
  /** `payment_intent_data[setup_future_usage]`: payment mode saves the card to the customer. */
  setupFutureUsage?: 'off_session' | 'on_session';
  /** `setup_intent_data[metadata]`, setup mode only. */
  setupIntentMetadata?: Metadata;
}

export function createCheckoutSession(ctx: StandInContext, input: CheckoutInput): CheckoutSessionObject {
  const price = input.mode === 'setup' ? null : findOrThrow(ctx.state.prices, required(input.price, 'line_items'), 'price', 'line_items[0][price]');
  checkModeFits(input, price);
  if (input.customer !== undefined) findOrThrow(ctx.state.customers, input.customer, 'customer', 'customer');
  const now = ctx.clock.seconds();
  const id = newId('cs_test_');
  const amount = price ? price.unit_amount * input.quantity : null;
  const session: CheckoutSessionObject = {
    id,
    object: 'checkout.session',
    amount_subtotal: amount,
    amount_total: amount,
    cancel_url: input.cancelUrl ?? null,
    client_reference_id: input.clientReferenceId ?? null,
    created: now,
    currency: price?.currency ?? input.currency?.toLowerCase() ?? null,
    customer: input.customer ?? null,
    customer_details: null,
    customer_email: input.customerEmail ?? null,
    expires_at: now + SESSION_LIFETIME_SECONDS,
    invoice: null,
    livemode: false,
    metadata: input.metadata,
    mode: input.mode,
    payment_intent: null,
    payment_method_types: ['card'],
    payment_status: input.mode === 'setup' ? 'no_payment_required' : 'unpaid',
    setup_intent: null,
    status: 'open',
    subscription: null,
    success_url: input.successUrl ?? null,
    ui_mode: 'hosted',
    url: `${ctx.baseUrl}/checkout/${id}`,
  };
  ctx.state.checkoutSessions.set(id, session);
  ctx.state.checkoutOrders.set(id, {
    price: price?.id ?? null,
    quantity: input.quantity,
    customerEmail: input.customerEmail ?? null,
    subscriptionMetadata: input.subscriptionMetadata ?? {},
    paymentIntentMetadata: input.paymentIntentMetadata ?? {},
    setupFutureUsage: input.setupFutureUsage ?? null,
    setupIntentMetadata: input.setupIntentMetadata ?? {},
    pendingAsync: null,
  });
  return snapshot(session);
}

function required<T>(value: T | undefined, param: string): T {
  if (value === undefined) throw invalidParam(param, `Missing required param: ${param}.`, 'parameter_missing');
  return value;
}

function checkModeFits(input: CheckoutInput, price: PriceObject | null): void {
  if (!price) {
    if (input.price !== undefined) throw invalidParam('line_items', 'You cannot pass `line_items` in `setup` mode.');
    if (input.subscriptionMetadata) throw invalidParam('subscription_data', 'You can not pass `subscription_data` in `setup` mode.');
    if (input.paymentIntentMetadata || input.setupFutureUsage) throw invalidParam('payment_intent_data', 'You can not pass `payment_intent_data` in `setup` mode.');
    if (input.currency !== undefined && !/^[a-zA-Z]{3}$/.test(input.currency)) throw invalidParam('currency', `Invalid currency: ${input.currency}`);
    return;
  }
  if (input.setupIntentMetadata) throw invalidParam('setup_intent_data', `You can not pass \`setup_intent_data\` in \`${input.mode}\` mode.`);
  if (input.currency !== undefined && input.currency.toLowerCase() !== price.currency) {
    throw invalidParam('currency', `The currency ${input.currency} does not match the currency of the price (${price.currency}).`);
  }
  if (input.mode === 'payment' && price.recurring) {
    throw invalidParam(
      'mode',
      'You specified `payment` mode but passed a recurring price. Either switch to `subscription` mode or use only one-time prices.',
    );
  }
  if (input.mode === 'subscription' && !price.recurring) {
    throw invalidParam('mode', 'You must provide at least one recurring price in `subscription` mode when using prices.');
  }
  if (input.mode === 'payment' && input.subscriptionMetadata) {
    throw invalidParam('subscription_data', 'You can not pass `subscription_data` in `payment` mode.');
  }
  if (input.mode === 'subscription' && input.paymentIntentMetadata) {
    throw invalidParam('payment_intent_data', 'You can not pass `payment_intent_data` in `subscription` mode.');
  }
}

/** The session with its one line item, for `expand[]=line_items`. */
export function withLineItems(ctx: StandInContext, session: CheckoutSessionObject): CheckoutSessionObject {
  const order = findOrThrow(ctx.state.checkoutOrders, session.id, 'checkout.session');
  const url = `/v1/checkout/sessions/${session.id}/line_items`;
  if (order.price === null) return { ...snapshot(session), line_items: { object: 'list', data: [], has_more: false, total_count: 0, url } };
  const price = findOrThrow(ctx.state.prices, order.price, 'price');
  const product = ctx.state.products.get(price.product);
  const item: CheckoutLineItemObject = {
    id: `li_${session.id.slice('cs_test_'.length)}`,
    object: 'item',
    amount_discount: 0,
    amount_subtotal: session.amount_subtotal ?? 0,
    amount_tax: 0,
    amount_total: session.amount_total ?? 0,
    currency: price.currency,
    description: product?.name ?? price.product,
    price: snapshot(price),
    quantity: order.quantity,
  };
  const lineItems: ListObject<CheckoutLineItemObject> = {
    object: 'list',
    data: [item],
    has_more: false,
    total_count: 1,
    url,
  };
  return { ...snapshot(session), line_items: lineItems };
}

export interface CompleteOptions {
  /** A bank debit: `checkout.session.completed` with `payment_status: 'unpaid'` now, the outcome on `settleAsyncPayment`. Not in setup mode. */
  asyncPayment?: boolean;
  /** With `asyncPayment`, the debit bounces on settlement. Alone, the card is declined: the session stays open. */
  fail?: boolean;
  /**
   * How the card the customer enters answers later off-session payments, when it is saved (setup mode, or
   * payment mode with `payment_intent_data[setup_future_usage]`); default `ok`. The payment at checkout
   * itself always succeeds.
   */
  card?: CardBehaviour;
}

/** The customer pays (or, in setup mode, saves a card) on the hosted page. */
export function completeCheckout(ctx: StandInContext, id: string, options: CompleteOptions = {}): CheckoutSessionObject {
  const session = openSession(ctx, id);
  const order = ctx.state.checkoutOrders.get(id)!;
  if (options.asyncPayment && session.mode === 'setup') throw invalidRequest('A setup-mode Checkout Session takes no payment (asyncPayment does not apply).');
  if (options.fail && !options.asyncPayment) return snapshot(session);
  const savesCard = session.mode === 'setup' || (order.setupFutureUsage !== null && !options.asyncPayment);
  session.customer ??= session.mode === 'subscription' || savesCard ? createCustomer(ctx, { email: order.customerEmail }).id : null;
  const customer = session.customer ? ctx.state.customers.get(session.customer) : undefined;
  session.customer_details = { email: customer?.email ?? order.customerEmail, name: customer?.name ?? null };
  session.status = 'complete';
  session.url = null;
  if (session.mode !== 'setup') session.payment_status = options.asyncPayment ? 'unpaid' : 'paid';
  order.pendingAsync = options.asyncPayment ? { fail: options.fail ?? false } : null;
  // A card paid once without setup_future_usage is not attached to anyone (a bank debit has no card).
  const card = options.asyncPayment ? null : saveCard(ctx, savesCard ? session.customer : null, { behaviour: options.card ?? 'ok', makeDefault: false });
  if (session.mode === 'setup') {
    session.setup_intent = succeededSetupIntent(ctx, { customer: session.customer!, paymentMethod: card!.id, metadata: order.setupIntentMetadata }).id;
  } else if (session.mode === 'payment') {
    chargeOnce(ctx, session, order, card?.id ?? null, options.asyncPayment ? 'processing' : 'succeeded');
  } else {
    subscribe(ctx, session, order, findOrThrow(ctx.state.prices, order.price!, 'price'), options.asyncPayment ? 'open' : 'paid');
  }
  ctx.emit('checkout.session.completed', session);
  return snapshot(session);
}

function openSession(ctx: StandInContext, id: string): CheckoutSessionObject {
  const session = findOrThrow(ctx.state.checkoutSessions, id, 'checkout.session');
  if (session.status === 'open' && ctx.clock.seconds() >= session.expires_at) expireCheckout(ctx, id);
  if (session.status !== 'open') throw invalidRequest(`Checkout Session ${id} is ${session.status}.`, 'checkout_session_not_open');
  return session;
}

/** The Checkout payment; `payment_intent.succeeded` when it is not a bank debit still on its way. */
function chargeOnce(ctx: StandInContext, session: CheckoutSessionObject, order: CheckoutOrder, card: string | null, outcome: 'succeeded' | 'processing'): void {
  const { intent } = createPayment(ctx, {
    amount: session.amount_total ?? 0,
    currency: session.currency ?? 'usd',
    customer: session.customer,
    description: null,
    metadata: order.paymentIntentMetadata,
    paymentMethod: card,
    setupFutureUsage: order.setupFutureUsage,
    outcome,
  });
  session.payment_intent = intent.id;
  if (outcome === 'succeeded') ctx.emit('payment_intent.succeeded', intent);
}

function subscribe(ctx: StandInContext, session: CheckoutSessionObject, order: CheckoutOrder, price: PriceObject, collection: 'paid' | 'open'): void {
  const sub = startSubscription(ctx, {
    customer: session.customer!,
    price,
    quantity: order.quantity,
    metadata: order.subscriptionMetadata,
    collection,
  });
  session.subscription = sub.id;
  session.invoice = sub.latest_invoice;
}

/** The bank debit of an async completion clears (or bounces, with `fail`): `checkout.session.async_payment_*`. */
export function settleAsyncPayment(ctx: StandInContext, id: string): CheckoutSessionObject {
  const session = findOrThrow(ctx.state.checkoutSessions, id, 'checkout.session');
  const order = ctx.state.checkoutOrders.get(id)!;
  if (!order.pendingAsync) throw invalidRequest(`Checkout Session ${id} has no payment on its way.`);
  const succeeded = !order.pendingAsync.fail;
  order.pendingAsync = null;
  if (session.payment_intent) settlePayment(ctx, session.payment_intent, succeeded);
  if (session.invoice && succeeded) payInvoice(ctx, session.invoice);
  if (session.invoice && !succeeded) declineInvoice(ctx, session.invoice);
  if (succeeded) session.payment_status = 'paid';
  ctx.emit(succeeded ? 'checkout.session.async_payment_succeeded' : 'checkout.session.async_payment_failed', session);
  return snapshot(session);
}

export interface CheckoutSessionListInput {
  customer?: string;
  status?: 'open' | 'complete' | 'expired';
  /** 1 to 100, default 10. */
  limit?: number;
  startingAfter?: string;
}

/** `GET /v1/checkout/sessions`: newest first, by customer and status; a session past its expiry is expired first. */
export function listCheckoutSessions(ctx: StandInContext, input: CheckoutSessionListInput): Omit<ListObject<CheckoutSessionObject>, 'total_count'> {
  const limit = input.limit ?? 10;
  if (limit < 1 || limit > 100) throw invalidParam('limit', 'Invalid integer: limit must be between 1 and 100');
  for (const session of ctx.state.checkoutSessions.values()) {
    if (session.status === 'open' && ctx.clock.seconds() >= session.expires_at) expireCheckout(ctx, session.id);
  }
  let sessions = [...ctx.state.checkoutSessions.values()]
    .filter((s) => (input.customer === undefined || s.customer === input.customer) && (input.status === undefined || s.status === input.status))
    .reverse();
  if (input.startingAfter !== undefined) {
    const at = sessions.findIndex((s) => s.id === input.startingAfter);
    if (at < 0) throw invalidParam('starting_after', `No such checkout.session: '${input.startingAfter}'`, 'resource_missing');
    sessions = sessions.slice(at + 1);
  }
  return { object: 'list', data: snapshot(sessions.slice(0, limit)), has_more: sessions.length > limit, url: '/v1/checkout/sessions' };
}

/** The customer walked away and the session timed out: `checkout.session.expired`. */
export function expireCheckout(ctx: StandInContext, id: string): CheckoutSessionObject {
  const session = findOrThrow(ctx.state.checkoutSessions, id, 'checkout.session');
  if (session.status !== 'open') throw invalidRequest(`Checkout Session ${id} is ${session.status}.`, 'checkout_session_not_open');
  session.status = 'expired';
  session.url = null;
  ctx.emit('checkout.session.expired', session);
  return snapshot(session);
}

export function createPortalSession(ctx: StandInContext, input: { customer: string; returnUrl?: string }): PortalSessionObject {
  findOrThrow(ctx.state.customers, input.customer, 'customer', 'customer');
  const id = newId('bps_');
  const session: PortalSessionObject = {
    id,
    object: 'billing_portal.session',
    configuration: 'bpc_standin',
    created: ctx.clock.seconds(),
    customer: input.customer,
    flow: null,
    livemode: false,
    locale: null,
    on_behalf_of: null,
    return_url: input.returnUrl ?? null,
    url: `${ctx.baseUrl}/portal/${id}`,
  };
  ctx.state.portalSessions.set(id, session);
  return snapshot(session);
}
