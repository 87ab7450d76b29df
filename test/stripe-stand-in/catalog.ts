import { type Interval, newId, randomToken } from './clock.js';
import { findOrThrow, invalidParam, StripeApiError } from './errors.js';
import type { CustomerObject, Metadata, PriceObject, ProductObject } from './objects.js';
import { type StandInContext, snapshot } from './state.js';

export interface ProductInput {
  id?: string;
  name: string;
  description?: string;
  metadata?: Metadata;
}

export function createProduct(ctx: StandInContext, input: ProductInput): ProductObject {
  if (input.id !== undefined && ctx.state.products.has(input.id)) {
    throw invalidParam('id', `Product already exists.`, 'resource_already_exists');
  }
  const now = ctx.clock.seconds();
  const product: ProductObject = {
    id: input.id ?? newId('prod_'),
    object: 'product',
    active: true,
    created: now,
    default_price: null,
    description: input.description ?? null,
    images: [],
    livemode: false,
    metadata: input.metadata ?? {},
    name: input.name,
    shippable: null,
    type: 'service',
    unit_label: null,
    updated: now,
    url: null,
  };
  ctx.state.products.set(product.id, product);
  return snapshot(product);
}

export interface PriceInput {
  /** An existing product id; or give `productName` to create one, as `product_data[name]` does. */
  product?: string;
  productName?: string;
  /** In the currency's smallest unit (cents). */
  unitAmount: number;
  currency?: string;
  /** Recurring when set; one-time otherwise. */
  interval?: Interval;
  intervalCount?: number;
  lookupKey?: string;
  transferLookupKey?: boolean;
  nickname?: string;
  metadata?: Metadata;
}

export function createPrice(ctx: StandInContext, input: PriceInput): PriceObject {
  validatePriceInput(input);
  const productId = resolveProduct(ctx, input);
  claimLookupKey(ctx, input);
  const price: PriceObject = {
    id: newId('price_'),
    object: 'price',
    active: true,
    billing_scheme: 'per_unit',
    created: ctx.clock.seconds(),
    currency: (input.currency ?? 'usd').toLowerCase(),
    custom_unit_amount: null,
    livemode: false,
    lookup_key: input.lookupKey ?? null,
    metadata: input.metadata ?? {},
    nickname: input.nickname ?? null,
    product: productId,
    recurring: input.interval
      ? { interval: input.interval, interval_count: input.intervalCount ?? 1, meter: null, trial_period_days: null, usage_type: 'licensed' }
      : null,
    tax_behavior: 'unspecified',
    tiers_mode: null,
    transform_quantity: null,
    type: input.interval ? 'recurring' : 'one_time',
    unit_amount: input.unitAmount,
    unit_amount_decimal: String(input.unitAmount),
  };
  ctx.state.prices.set(price.id, price);
  return snapshot(price);
}

function validatePriceInput(input: PriceInput): void {
  if (!Number.isInteger(input.unitAmount) || input.unitAmount < 0 || input.unitAmount > 99_999_999) {
    throw invalidParam('unit_amount', 'Invalid unit_amount: must be a whole number of cents between 0 and 99999999');
  }
  if (input.currency !== undefined && !/^[a-zA-Z]{3}$/.test(input.currency)) {
    throw invalidParam('currency', `Invalid currency: ${input.currency}`);
  }
  if (input.intervalCount !== undefined && (!Number.isInteger(input.intervalCount) || input.intervalCount !== 1)) {
    throw invalidParam('recurring[interval_count]', 'The Stripe stand-in models interval_count 1 only');
  }
}

function resolveProduct(ctx: StandInContext, input: PriceInput): string {
  if (input.product !== undefined) return findOrThrow(ctx.state.products, input.product, 'product', 'product').id;
  if (input.productName !== undefined) return createProduct(ctx, { name: input.productName }).id;
  throw invalidParam('product', 'Missing required param: product or product_data.', 'parameter_missing');
}

/** Stripe refuses a lookup key already in use unless `transfer_lookup_key` moves it to the new price. */
function claimLookupKey(ctx: StandInContext, input: PriceInput): void {
  if (input.lookupKey === undefined) return;
  for (const price of ctx.state.prices.values()) {
    if (price.lookup_key !== input.lookupKey) continue;
    if (!input.transferLookupKey) {
      throw invalidParam('lookup_key', `A price (\`${price.id}\`) already uses that lookup key.`, 'lookup_key_already_exists');
    }
    price.lookup_key = null;
  }
}

export interface CustomerInput {
  email?: string | null;
  name?: string | null;
  description?: string | null;
  metadata?: Metadata;
}

export interface CustomerUpdate extends CustomerInput {
  /** `invoice_settings[default_payment_method]`: a card attached to this customer, or `null` (sent as '') to unset. */
  defaultPaymentMethod?: string | null;
}

export function createCustomer(ctx: StandInContext, input: CustomerInput = {}): CustomerObject {
  const customer: CustomerObject = {
    id: newId('cus_'),
    object: 'customer',
    balance: 0,
    created: ctx.clock.seconds(),
    currency: null,
    default_source: null,
    delinquent: false,
    description: input.description ?? null,
    email: input.email ?? null,
    invoice_prefix: randomToken(8).toUpperCase(),
    livemode: false,
    metadata: input.metadata ?? {},
    name: input.name ?? null,
    next_invoice_sequence: 1,
    phone: null,
    preferred_locales: [],
    shipping: null,
    invoice_settings: { custom_fields: null, default_payment_method: null, footer: null, rendering_options: null },
    tax_exempt: 'none',
    test_clock: null,
  };
  ctx.state.customers.set(customer.id, customer);
  return snapshot(customer);
}

/** Fields given replace the stored ones; `metadata` is already merged by the caller (Stripe's merge rules). */
export function updateCustomer(ctx: StandInContext, id: string, input: CustomerUpdate): CustomerObject {
  const customer = findOrThrow(ctx.state.customers, id, 'customer');
  if (input.defaultPaymentMethod) {
    const param = 'invoice_settings[default_payment_method]';
    if (ctx.state.paymentMethods.get(input.defaultPaymentMethod)?.customer !== id) {
      throw noSuchPaymentMethodOf(input.defaultPaymentMethod, param);
    }
  }
  if (input.defaultPaymentMethod !== undefined) customer.invoice_settings.default_payment_method = input.defaultPaymentMethod;
  if (input.email !== undefined) customer.email = input.email;
  if (input.name !== undefined) customer.name = input.name;
  if (input.description !== undefined) customer.description = input.description;
  if (input.metadata !== undefined) customer.metadata = input.metadata;
  return snapshot(customer);
}

/** Stripe's answer when a PaymentMethod is missing or not attached to the customer that names it. */
export function noSuchPaymentMethodOf(paymentMethodId: string, param: string): StripeApiError {
  return new StripeApiError(400, {
    type: 'invalid_request_error',
    code: 'resource_missing',
    param,
    message: `The customer does not have a payment method with the ID ${paymentMethodId}. The payment method must be attached to the customer.`,
    doc_url: 'https://stripe.com/docs/error-codes/resource-missing',
  });
}
