import type Stripe from 'stripe';
import type {
  ChargeObject,
  CheckoutSessionObject,
  CustomerObject,
  InvoiceLineItemObject,
  InvoiceObject,
  MeterEventObject,
  PaymentIntentObject,
  PaymentMethodObject,
  PortalSessionObject,
  PriceObject,
  ProductObject,
  RefundObject,
  SetupIntentObject,
  StripeEventObject,
  SubscriptionItemObject,
  SubscriptionObject,
} from './objects.js';

/** Keys of `Ours` missing from the SDK's type, or whose type is not assignable to the SDK's. */
type Drift<Ours, Theirs> = {
  [K in keyof Ours]-?: K extends keyof Theirs ? (Ours[K] extends Theirs[K] ? never : K) : K;
}[keyof Ours];
type NoDrift<T extends never> = T;

/**
 * Compile-time conformance with the SDK's types. The exempted fields differ on purpose: the SDK's
 * `Decimal` is a string on the wire, nested objects here are subsets of the SDK's, and `object: 'item'`
 * line items have no exported type.
 */
export type ShapeChecks = [
  NoDrift<Drift<ProductObject, Stripe.Product>>,
  NoDrift<Exclude<Drift<PriceObject, Stripe.Price>, 'unit_amount_decimal'>>,
  NoDrift<Drift<CustomerObject, Stripe.Customer>>,
  NoDrift<Exclude<Drift<CheckoutSessionObject, Stripe.Checkout.Session>, 'customer_details' | 'line_items'>>,
  NoDrift<Drift<PortalSessionObject, Stripe.BillingPortal.Session>>,
  NoDrift<Exclude<Drift<SubscriptionItemObject, Stripe.SubscriptionItem>, 'price'>>,
  NoDrift<Exclude<Drift<SubscriptionObject, Stripe.Subscription>, 'items' | 'cancellation_details'>>,
  NoDrift<Exclude<Drift<InvoiceLineItemObject, Stripe.InvoiceLineItem>, 'pricing' | 'parent'>>,
  NoDrift<Exclude<Drift<InvoiceObject, Stripe.Invoice>, 'lines' | 'parent'>>,
  NoDrift<Drift<PaymentIntentObject, Stripe.PaymentIntent>>,
  NoDrift<Drift<PaymentMethodObject, Stripe.PaymentMethod>>,
  NoDrift<Drift<SetupIntentObject, Stripe.SetupIntent>>,
  NoDrift<Drift<ChargeObject, Stripe.Charge>>,
  NoDrift<Drift<RefundObject, Stripe.Refund>>,
  NoDrift<Drift<MeterEventObject, Stripe.Billing.MeterEvent>>,
  NoDrift<Exclude<Drift<StripeEventObject, Stripe.EventBase>, 'type' | 'data'>>,
];
