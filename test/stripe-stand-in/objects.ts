import type { Interval } from './clock.js';

/**
 * The objects the stand-in stores and answers, as they travel on the wire. Each is a subset of the SDK's
 * type of the same name (API version 2026-10-28.endive); `ShapeChecks` in shape-checks.ts fails to
 * compile when a field is misspelled or its type drifts from the SDK's.
 */
export type Metadata = Record<string, string>;

export interface ListObject<T> {
  object: 'list';
  data: T[];
  has_more: boolean;
  total_count: number;
  url: string;
}

export interface ProductObject {
  id: string;
  object: 'product';
  active: boolean;
  created: number;
  default_price: string | null;
  description: string | null;
  images: string[];
  livemode: boolean;
  metadata: Metadata;
  name: string;
  shippable: boolean | null;
  type: 'service';
  unit_label: string | null;
  updated: number;
  url: string | null;
}

export interface PriceObject {
  id: string;
  object: 'price';
  active: boolean;
  billing_scheme: 'per_unit';
  created: number;
  currency: string;
  custom_unit_amount: null;
  livemode: boolean;
  lookup_key: string | null;
  metadata: Metadata;
  nickname: string | null;
  product: string;
  recurring: { interval: Interval; interval_count: number; meter: null; trial_period_days: null; usage_type: 'licensed' } | null;
  tax_behavior: 'unspecified';
  tiers_mode: null;
  transform_quantity: null;
  type: 'one_time' | 'recurring';
  unit_amount: number;
  /** A decimal string on the wire; the SDK turns it into its `Decimal`. */
  unit_amount_decimal: string;
}

export interface CustomerObject {
  id: string;
  object: 'customer';
  balance: number;
  created: number;
  currency: string | null;
  default_source: null;
  delinquent: boolean;
  description: string | null;
  email: string | null;
  invoice_prefix: string;
  livemode: boolean;
  metadata: Metadata;
  name: string | null;
  next_invoice_sequence: number;
  phone: string | null;
  preferred_locales: string[];
  shipping: null;
  /** `default_payment_method` is what an off-session payment (auto top-up) charges. */
  invoice_settings: { custom_fields: null; default_payment_method: string | null; footer: null; rendering_options: null };
  tax_exempt: 'none';
  test_clock: null;
}

export interface CheckoutLineItemObject {
  id: string;
  object: 'item';
  amount_discount: number;
  amount_subtotal: number;
  amount_tax: number;
  amount_total: number;
  currency: string;
  description: string;
  price: PriceObject;
  quantity: number;
}

export interface CheckoutSessionObject {
  id: string;
  object: 'checkout.session';
  /** `null` in setup mode, as Stripe's. */
  amount_subtotal: number | null;
  amount_total: number | null;
  cancel_url: string | null;
  client_reference_id: string | null;
  created: number;
  /** In setup mode, the `currency` parameter or `null`. */
  currency: string | null;
  customer: string | null;
  customer_details: { email: string | null; name: string | null } | null;
  customer_email: string | null;
  expires_at: number;
  invoice: string | null;
  livemode: boolean;
  line_items?: ListObject<CheckoutLineItemObject>;
  metadata: Metadata;
  mode: 'payment' | 'subscription' | 'setup';
  payment_intent: string | null;
  payment_method_types: string[];
  payment_status: 'paid' | 'unpaid' | 'no_payment_required';
  status: 'open' | 'complete' | 'expired';
  subscription: string | null;
  /** Setup mode: the SetupIntent that saved the card, once complete. */
  setup_intent: string | null;
  success_url: string | null;
  ui_mode: 'hosted';
  url: string | null;
}

export interface PortalSessionObject {
  id: string;
  object: 'billing_portal.session';
  configuration: string;
  created: number;
  customer: string;
  flow: null;
  livemode: boolean;
  locale: null;
  on_behalf_of: null;
  return_url: string | null;
  url: string;
}

export interface SubscriptionItemObject {
  id: string;
  object: 'subscription_item';
  created: number;
  current_period_end: number;
  current_period_start: number;
  discounts: string[];
  metadata: Metadata;
  price: PriceObject;
  quantity: number;
  subscription: string;
  tax_rates: [];
}

export type SubscriptionStatus = 'active' | 'past_due' | 'unpaid' | 'canceled' | 'incomplete' | 'incomplete_expired' | 'trialing';

export interface SubscriptionObject {
  id: string;
  object: 'subscription';
  billing_cycle_anchor: number;
  cancel_at: number | null;
  cancel_at_period_end: boolean;
  canceled_at: number | null;
  cancellation_details: { comment: null; feedback: null; reason: 'cancellation_requested' | 'payment_failed' | null };
  collection_method: 'charge_automatically';
  created: number;
  currency: string;
  customer: string;
  days_until_due: null;
  default_payment_method: null;
  description: null;
  discounts: string[];
  ended_at: number | null;
  items: ListObject<SubscriptionItemObject>;
  latest_invoice: string | null;
  livemode: boolean;
  metadata: Metadata;
  pause_collection: null;
  start_date: number;
  status: SubscriptionStatus;
  trial_end: number | null;
  trial_start: number | null;
}

export interface InvoiceLineItemObject {
  id: string;
  object: 'line_item';
  amount: number;
  currency: string;
  description: string;
  discountable: boolean;
  discounts: string[];
  invoice: string;
  livemode: boolean;
  metadata: Metadata;
  parent: {
    type: 'subscription_item_details';
    invoice_item_details: null;
    subscription_item_details: {
      invoice_item: null;
      proration: boolean;
      proration_details: { credited_items: null };
      subscription: string;
      subscription_item: string;
    };
  };
  period: { start: number; end: number };
  pricing: { type: 'price_details'; price_details: { price: string; product: string }; unit_amount_decimal: string };
  quantity: number;
  subtotal: number;
  taxes: [];
}

export interface InvoiceObject {
  id: string;
  object: 'invoice';
  amount_due: number;
  amount_overpaid: number;
  amount_paid: number;
  amount_remaining: number;
  attempt_count: number;
  attempted: boolean;
  auto_advance: boolean;
  billing_reason: 'subscription_create' | 'subscription_cycle';
  collection_method: 'charge_automatically';
  created: number;
  currency: string;
  customer: string;
  customer_email: string | null;
  customer_name: string | null;
  description: null;
  due_date: null;
  effective_at: number | null;
  hosted_invoice_url: string | null;
  invoice_pdf: null;
  lines: ListObject<InvoiceLineItemObject>;
  livemode: boolean;
  metadata: Metadata;
  next_payment_attempt: number | null;
  number: string | null;
  parent: {
    type: 'subscription_details';
    quote_details: null;
    subscription_details: { metadata: Metadata; subscription: string };
  };
  /** As Stripe: for a renewal these look back one period; the paid-for period is `lines.data[0].period`. */
  period_end: number;
  period_start: number;
  status: 'draft' | 'open' | 'paid' | 'void' | 'uncollectible';
  status_transitions: { finalized_at: number | null; marked_uncollectible_at: null; paid_at: number | null; voided_at: null };
  subtotal: number;
  total: number;
}

export type PaymentIntentStatus = 'succeeded' | 'processing' | 'requires_payment_method' | 'requires_confirmation';

/** Why the last confirmation failed: what the 402 answer said, with the card that failed. */
export interface LastPaymentErrorObject {
  type: 'card_error';
  charge: string;
  code: 'card_declined' | 'authentication_required';
  decline_code: 'generic_decline' | 'authentication_required';
  doc_url: string;
  message: string;
  payment_method: PaymentMethodObject;
}

export interface PaymentIntentObject {
  id: string;
  object: 'payment_intent';
  amount: number;
  amount_capturable: number;
  amount_received: number;
  canceled_at: null;
  capture_method: 'automatic';
  client_secret: string;
  confirmation_method: 'automatic';
  created: number;
  currency: string;
  customer: string | null;
  description: string | null;
  last_payment_error: LastPaymentErrorObject | null;
  latest_charge: string | null;
  livemode: boolean;
  metadata: Metadata;
  /** The card paid with; `null` again after a failed confirmation (the card is in `last_payment_error`). */
  payment_method: string | null;
  payment_method_types: string[];
  setup_future_usage: 'off_session' | 'on_session' | null;
  status: PaymentIntentStatus;
}

/** How a saved card answers a later payment: Stripe's test cards 4242…, 0341 (declines once attached) and 3184 (always asks for 3-D Secure). */
export type CardBehaviour = 'ok' | 'card_declined' | 'authentication_required';

export interface PaymentMethodObject {
  id: string;
  object: 'payment_method';
  allow_redisplay: 'always' | 'limited' | 'unspecified';
  billing_details: { address: null; email: string | null; name: string | null; phone: null; tax_id: null };
  card: {
    brand: 'visa';
    checks: { address_line1_check: null; address_postal_code_check: null; cvc_check: 'pass' | null };
    country: 'US';
    display_brand: 'visa';
    exp_month: number;
    exp_year: number;
    fingerprint: string;
    funding: 'credit';
    generated_from: null;
    last4: string;
    networks: { available: string[]; preferred: null };
    regulated_status: 'unregulated';
    three_d_secure_usage: { supported: boolean };
    wallet: null;
  };
  created: number;
  /** `null` for a card used once (a Checkout payment without `setup_future_usage`). */
  customer: string | null;
  customer_account: null;
  livemode: boolean;
  metadata: Metadata;
  type: 'card';
}

export interface SetupIntentObject {
  id: string;
  object: 'setup_intent';
  cancellation_reason: null;
  client_secret: string;
  created: number;
  customer: string;
  description: string | null;
  last_setup_error: null;
  latest_attempt: null;
  livemode: boolean;
  mandate: null;
  metadata: Metadata;
  next_action: null;
  on_behalf_of: null;
  payment_method: string;
  payment_method_types: string[];
  single_use_mandate: null;
  status: 'succeeded';
  usage: 'off_session';
}

export interface ChargeObject {
  id: string;
  object: 'charge';
  amount: number;
  amount_captured: number;
  amount_refunded: number;
  balance_transaction: null;
  captured: boolean;
  created: number;
  currency: string;
  customer: string | null;
  description: string | null;
  disputed: boolean;
  failure_code: string | null;
  failure_message: string | null;
  livemode: boolean;
  metadata: Metadata;
  paid: boolean;
  payment_intent: string;
  payment_method: string | null;
  receipt_url: string | null;
  refunded: boolean;
  status: 'succeeded' | 'pending' | 'failed';
}

export interface RefundObject {
  id: string;
  object: 'refund';
  amount: number;
  balance_transaction: null;
  charge: string;
  created: number;
  currency: string;
  metadata: Metadata;
  payment_intent: string;
  reason: string | null;
  receipt_number: null;
  status: 'succeeded';
}

export interface DisputeObject {
  id: string;
  object: 'dispute';
  amount: number;
  charge: string;
  created: number;
  currency: string;
  is_charge_refundable: boolean;
  livemode: boolean;
  metadata: Metadata;
  payment_intent: string | null;
  reason: string;
  status: 'needs_response' | 'won' | 'lost';
}

export interface MeterEventObject {
  object: 'billing.meter_event';
  created: number;
  event_name: string;
  identifier: string;
  livemode: boolean;
  payload: Record<string, string>;
  timestamp: number;
}

export interface StripeEventObject {
  id: string;
  object: 'event';
  api_version: string;
  created: number;
  type: string;
  data: { object: object; previous_attributes?: Record<string, unknown> };
  livemode: boolean;
  pending_webhooks: number;
  request: { id: string | null; idempotency_key: string | null };
}
