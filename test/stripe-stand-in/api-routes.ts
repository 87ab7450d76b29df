import { createCustomer, createPrice, createProduct, updateCustomer } from './catalog.js';
import { type CheckoutInput, createCheckoutSession, createPortalSession, expireCheckout, listCheckoutSessions, withLineItems } from './checkout.js';
import { findOrThrow, invalidParam, invalidRequest } from './errors.js';
import {
  type Allowed,
  type FormObject,
  boolean,
  integer,
  mergeMetadata,
  oneOf,
  requiredText,
  stringMap,
  text,
  valueAt,
} from './forms.js';
import { recordMeterEvent } from './meter-events.js';
import { listPaymentMethods } from './payment-methods.js';
import { createPaymentIntent, createRefund } from './payments.js';
import type { StandInContext } from './state.js';
import { cancelSubscription, updateSubscription } from './subscriptions.js';

/** One endpoint of the modelled API: the parameters it accepts and what it does. */
export interface ApiRoute {
  method: 'GET' | 'POST' | 'DELETE';
  /** Matches the path; its one capture, if any, is the object id. */
  pattern: RegExp;
  allowed: Allowed;
  handle(ctx: StandInContext, form: FormObject, id: string): object;
}

const RETRIEVE: Allowed = { expand: 'hash' };

function required<T>(value: T | undefined, param: string): T {
  if (value === undefined) throw invalidParam(param, `Missing required param: ${param}.`, 'parameter_missing');
  return value;
}

function url(form: FormObject, param: string): string | undefined {
  const value = text(form, param);
  if (value !== undefined && !URL.canParse(value)) throw invalidParam(param, `Not a valid URL`, 'url_invalid');
  return value;
}

/** Present only when the parameter was sent (an absent `subscription_data` differs from an empty one). */
function metadataIfSent(form: FormObject, param: string, current: Record<string, string> = {}): Record<string, string> | undefined {
  return valueAt(form, param) === undefined ? undefined : mergeMetadata(current, form, param);
}

function expands(form: FormObject): string[] {
  const value = valueAt(form, 'expand');
  return value === undefined ? [] : typeof value === 'string' ? [value] : Object.values(value).filter((v) => typeof v === 'string');
}

function priceParams(form: FormObject) {
  if (valueAt(form, 'product') !== undefined && valueAt(form, 'product_data') !== undefined) {
    throw invalidRequest('You may only specify one of these parameters: product, product_data.');
  }
  return {
    product: text(form, 'product'),
    productName: valueAt(form, 'product_data') === undefined ? undefined : requiredText(form, 'product_data[name]'),
    unitAmount: required(integer(form, 'unit_amount'), 'unit_amount'),
    currency: requiredText(form, 'currency'),
    interval: valueAt(form, 'recurring') === undefined ? undefined : required(oneOf(form, 'recurring[interval]', ['month', 'year'] as const), 'recurring[interval]'),
    intervalCount: integer(form, 'recurring[interval_count]'),
    lookupKey: text(form, 'lookup_key'),
    transferLookupKey: boolean(form, 'transfer_lookup_key'),
    nickname: text(form, 'nickname'),
    metadata: mergeMetadata({}, form),
  };
}

function checkoutParams(form: FormObject): CheckoutInput {
  if (valueAt(form, 'customer') !== undefined && valueAt(form, 'customer_email') !== undefined) {
    throw invalidRequest('You may only specify one of these parameters: customer, customer_email.');
  }
  const mode = required(oneOf(form, 'mode', ['payment', 'subscription', 'setup'] as const), 'mode');
  const quantity = integer(form, 'line_items[0][quantity]') ?? 1;
  if (quantity < 1) throw invalidParam('line_items[0][quantity]', 'Invalid positive integer');
  const clientReferenceId = text(form, 'client_reference_id');
  if (clientReferenceId !== undefined && clientReferenceId.length > 200) {
    throw invalidParam('client_reference_id', 'client_reference_id can have up to 200 characters.');
  }
  return {
    mode,
    customer: text(form, 'customer'),
    customerEmail: text(form, 'customer_email'),
    // Setup mode takes no line items; checkModeFits refuses them there.
    price: mode === 'setup' && valueAt(form, 'line_items') === undefined ? undefined : requiredText(form, 'line_items[0][price]'),
    quantity,
    currency: text(form, 'currency'),
    successUrl: url(form, 'success_url'),
    cancelUrl: url(form, 'cancel_url'),
    clientReferenceId,
    metadata: mergeMetadata({}, form),
    subscriptionMetadata: valueAt(form, 'subscription_data') === undefined ? undefined : mergeMetadata({}, form, 'subscription_data[metadata]'),
    paymentIntentMetadata: valueAt(form, 'payment_intent_data') === undefined ? undefined : mergeMetadata({}, form, 'payment_intent_data[metadata]'),
    setupFutureUsage: oneOf(form, 'payment_intent_data[setup_future_usage]', ['off_session', 'on_session'] as const),
    setupIntentMetadata: valueAt(form, 'setup_intent_data') === undefined ? undefined : mergeMetadata({}, form, 'setup_intent_data[metadata]'),
  };
}

const CUSTOMER_PARAMS: Allowed = { email: true, name: true, description: true, metadata: 'hash', expand: 'hash' };

function customerParams(form: FormObject, currentMetadata: Record<string, string> = {}) {
  return {
    email: text(form, 'email'),
    name: text(form, 'name'),
    description: text(form, 'description'),
    metadata: metadataIfSent(form, 'metadata', currentMetadata),
  };
}

/** `invoice_settings[default_payment_method]`: absent keeps it, '' unsets it. */
function defaultPaymentMethodParam(form: FormObject): string | null | undefined {
  const value = text(form, 'invoice_settings[default_payment_method]');
  return value === '' ? null : value;
}

export const API_ROUTES: readonly ApiRoute[] = [
  {
    method: 'POST',
    pattern: /^\/v1\/products$/,
    allowed: { id: true, name: true, description: true, metadata: 'hash', expand: 'hash' },
    handle: (ctx, form) =>
      createProduct(ctx, { id: text(form, 'id'), name: requiredText(form, 'name'), description: text(form, 'description'), metadata: mergeMetadata({}, form) }),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/prices$/,
    allowed: {
      product: true,
      product_data: { name: true },
      unit_amount: true,
      currency: true,
      recurring: { interval: true, interval_count: true },
      lookup_key: true,
      transfer_lookup_key: true,
      nickname: true,
      metadata: 'hash',
      expand: 'hash',
    },
    handle: (ctx, form) => createPrice(ctx, priceParams(form)),
  },
  { method: 'GET', pattern: /^\/v1\/prices\/([^/]+)$/, allowed: RETRIEVE, handle: (ctx, _form, id) => findOrThrow(ctx.state.prices, id, 'price') },
  { method: 'POST', pattern: /^\/v1\/customers$/, allowed: CUSTOMER_PARAMS, handle: (ctx, form) => createCustomer(ctx, customerParams(form)) },
  { method: 'GET', pattern: /^\/v1\/customers\/([^/]+)$/, allowed: RETRIEVE, handle: (ctx, _form, id) => findOrThrow(ctx.state.customers, id, 'customer') },
  {
    method: 'POST',
    pattern: /^\/v1\/customers\/([^/]+)$/,
    allowed: { ...CUSTOMER_PARAMS, invoice_settings: { default_payment_method: true } },
    handle: (ctx, form, id) =>
      updateCustomer(ctx, id, {
        ...customerParams(form, findOrThrow(ctx.state.customers, id, 'customer').metadata),
        defaultPaymentMethod: defaultPaymentMethodParam(form),
      }),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/customers\/([^/]+)\/payment_methods$/,
    allowed: { type: true, limit: true, starting_after: true, expand: 'hash' },
    handle: (ctx, form, id) =>
      listPaymentMethods(ctx, id, { type: text(form, 'type'), limit: integer(form, 'limit'), startingAfter: text(form, 'starting_after') }),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/payment_methods\/([^/]+)$/,
    allowed: RETRIEVE,
    handle: (ctx, _form, id) => findOrThrow(ctx.state.paymentMethods, id, 'PaymentMethod'),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/payment_intents$/,
    allowed: { amount: true, currency: true, customer: true, payment_method: true, off_session: true, confirm: true, description: true, metadata: 'hash', expand: 'hash' },
    handle: (ctx, form) =>
      createPaymentIntent(ctx, {
        amount: required(integer(form, 'amount'), 'amount'),
        currency: requiredText(form, 'currency'),
        customer: text(form, 'customer'),
        paymentMethod: text(form, 'payment_method'),
        offSession: boolean(form, 'off_session'),
        confirm: boolean(form, 'confirm'),
        description: text(form, 'description'),
        metadata: mergeMetadata({}, form),
      }),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/payment_intents\/([^/]+)$/,
    allowed: RETRIEVE,
    handle: (ctx, _form, id) => findOrThrow(ctx.state.paymentIntents, id, 'payment_intent'),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/setup_intents\/([^/]+)$/,
    allowed: RETRIEVE,
    handle: (ctx, _form, id) => findOrThrow(ctx.state.setupIntents, id, 'setup_intent'),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/checkout\/sessions$/,
    allowed: {
      mode: true,
      customer: true,
      customer_email: true,
      line_items: { '0': { price: true, quantity: true } },
      success_url: true,
      cancel_url: true,
      client_reference_id: true,
      metadata: 'hash',
      currency: true,
      subscription_data: { metadata: 'hash' },
      payment_intent_data: { metadata: 'hash', setup_future_usage: true },
      setup_intent_data: { metadata: 'hash' },
      expand: 'hash',
    },
    handle: (ctx, form) => createCheckoutSession(ctx, checkoutParams(form)),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/checkout\/sessions$/,
    allowed: { customer: true, status: true, limit: true, starting_after: true, expand: 'hash' },
    handle: (ctx, form) =>
      listCheckoutSessions(ctx, {
        customer: text(form, 'customer'),
        status: oneOf(form, 'status', ['open', 'complete', 'expired'] as const),
        limit: integer(form, 'limit'),
        startingAfter: text(form, 'starting_after'),
      }),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/checkout\/sessions\/([^/]+)\/expire$/,
    allowed: RETRIEVE,
    handle: (ctx, _form, id) => expireCheckout(ctx, id),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/checkout\/sessions\/([^/]+)$/,
    allowed: RETRIEVE,
    handle: (ctx, form, id) => {
      const session = findOrThrow(ctx.state.checkoutSessions, id, 'checkout.session');
      return expands(form).includes('line_items') ? withLineItems(ctx, session) : session;
    },
  },
  {
    method: 'POST',
    pattern: /^\/v1\/billing_portal\/sessions$/,
    allowed: { customer: true, return_url: true, expand: 'hash' },
    handle: (ctx, form) => createPortalSession(ctx, { customer: requiredText(form, 'customer'), returnUrl: url(form, 'return_url') }),
  },
  {
    method: 'GET',
    pattern: /^\/v1\/subscriptions\/([^/]+)$/,
    allowed: RETRIEVE,
    handle: (ctx, _form, id) => findOrThrow(ctx.state.subscriptions, id, 'subscription'),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/subscriptions\/([^/]+)$/,
    allowed: {
      items: { '0': { id: true, price: true, quantity: true } },
      cancel_at_period_end: true,
      proration_behavior: true,
      payment_behavior: true,
      metadata: 'hash',
      expand: 'hash',
    },
    handle: (ctx, form, id) => {
      const current = findOrThrow(ctx.state.subscriptions, id, 'subscription');
      oneOf(form, 'proration_behavior', ['create_prorations', 'none', 'always_invoice']);
      // The simulated card always pays, so every payment_behavior applies the update at once.
      oneOf(form, 'payment_behavior', ['allow_incomplete', 'default_incomplete', 'error_if_incomplete', 'pending_if_incomplete']);
      return updateSubscription(ctx, id, {
        itemId: text(form, 'items[0][id]'),
        price: text(form, 'items[0][price]'),
        quantity: integer(form, 'items[0][quantity]'),
        cancelAtPeriodEnd: boolean(form, 'cancel_at_period_end'),
        metadata: metadataIfSent(form, 'metadata', current.metadata),
      });
    },
  },
  {
    method: 'DELETE',
    pattern: /^\/v1\/subscriptions\/([^/]+)$/,
    allowed: { invoice_now: true, prorate: true, cancellation_details: { comment: true, feedback: true }, expand: 'hash' },
    handle: (ctx, _form, id) => cancelSubscription(ctx, id),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/refunds$/,
    allowed: { payment_intent: true, charge: true, amount: true, reason: true, metadata: 'hash', expand: 'hash' },
    handle: (ctx, form) =>
      createRefund(ctx, {
        paymentIntent: text(form, 'payment_intent'),
        charge: text(form, 'charge'),
        amount: integer(form, 'amount'),
        reason: oneOf(form, 'reason', ['duplicate', 'fraudulent', 'requested_by_customer']),
        metadata: mergeMetadata({}, form),
      }),
  },
  {
    method: 'POST',
    pattern: /^\/v1\/billing\/meter_events$/,
    allowed: { event_name: true, payload: 'hash', identifier: true, timestamp: true, expand: 'hash' },
    handle: (ctx, form) =>
      recordMeterEvent(ctx, {
        eventName: requiredText(form, 'event_name'),
        payload: required(stringMap(form, 'payload'), 'payload'),
        identifier: text(form, 'identifier'),
        timestamp: integer(form, 'timestamp'),
      }),
  },
];

/** The route for a request, with the id its path carries. */
export function matchApiRoute(method: string, path: string): { route: ApiRoute; id: string } | undefined {
  for (const route of API_ROUTES) {
    if (route.method !== method) continue;
    const match = route.pattern.exec(path);
    if (match) return { route, id: decodeURIComponent(match[1] ?? '') };
  }
  return undefined;
}
