import type { Clock } from './clock.js';
import type {
  ChargeObject,
  CheckoutSessionObject,
  CustomerObject,
  InvoiceObject,
  Metadata,
  MeterEventObject,
  CardBehaviour,
  PaymentIntentObject,
  PaymentMethodObject,
  PortalSessionObject,
  PriceObject,
  ProductObject,
  RefundObject,
  DisputeObject,
  SetupIntentObject,
  StripeEventObject,
  SubscriptionObject,
} from './objects.js';

/** What a Checkout Session sells and what it carries to the objects it creates; not part of the wire object. */
export interface CheckoutOrder {
  /** `null` in setup mode (no line items). */
  price: string | null;
  quantity: number;
  customerEmail: string | null;
  subscriptionMetadata: Metadata;
  paymentIntentMetadata: Metadata;
  /** Payment mode: `payment_intent_data[setup_future_usage]`, which saves the card to the customer. */
  setupFutureUsage: 'off_session' | 'on_session' | null;
  setupIntentMetadata: Metadata;
  /** Set between an async completion and its settlement. */
  pendingAsync: { fail: boolean } | null;
}

/** Everything the stand-in knows, by id, in creation order. */
export interface StandInState {
  products: Map<string, ProductObject>;
  prices: Map<string, PriceObject>;
  customers: Map<string, CustomerObject>;
  checkoutSessions: Map<string, CheckoutSessionObject>;
  checkoutOrders: Map<string, CheckoutOrder>;
  portalSessions: Map<string, PortalSessionObject>;
  subscriptions: Map<string, SubscriptionObject>;
  invoices: Map<string, InvoiceObject>;
  paymentIntents: Map<string, PaymentIntentObject>;
  charges: Map<string, ChargeObject>;
  refunds: Map<string, RefundObject>;
  disputes: Map<string, DisputeObject>;
  paymentMethods: Map<string, PaymentMethodObject>;
  /** By PaymentMethod id: how the card answers a payment (not part of the wire object). */
  cardBehaviours: Map<string, { payment_method: string; behaviour: CardBehaviour }>;
  setupIntents: Map<string, SetupIntentObject>;
  /** By identifier: a repeated identifier is the same event. */
  meterEvents: Map<string, MeterEventObject>;
  events: StripeEventObject[];
}

type ReadonlyView<T> = T extends Map<infer K, infer V> ? ReadonlyMap<K, Readonly<V>> : T extends Array<infer V> ? ReadonlyArray<Readonly<V>> : T;

/** Read access for tests: the live maps, typed so a test cannot change them by accident. */
export type StandInStateView = { readonly [K in keyof StandInState]: ReadonlyView<StandInState[K]> };

export function createState(): StandInState {
  return {
    products: new Map(),
    prices: new Map(),
    customers: new Map(),
    checkoutSessions: new Map(),
    checkoutOrders: new Map(),
    portalSessions: new Map(),
    subscriptions: new Map(),
    invoices: new Map(),
    paymentIntents: new Map(),
    charges: new Map(),
    refunds: new Map(),
    disputes: new Map(),
    paymentMethods: new Map(),
    cardBehaviours: new Map(),
    setupIntents: new Map(),
    meterEvents: new Map(),
    events: [],
  };
}

/** What every operation needs: the state, the time, where links point, and how to record an event. */
export interface StandInContext {
  state: StandInState;
  clock: Clock;
  /** `http://127.0.0.1:<port>`, for `url` fields. */
  baseUrl: string;
  emit(type: string, object: object, previousAttributes?: Record<string, unknown>): StripeEventObject;
}

/** A deep copy, so stored objects never leak to callers or into event snapshots by reference. */
export function snapshot<T>(value: T): T {
  return structuredClone(value);
}

/** Stripe's `previous_attributes`: each top-level field that changed, with its former value. */
export function changedFields(before: object, after: object): Record<string, unknown> {
  const previous: Record<string, unknown> = {};
  const old = before as Record<string, unknown>;
  for (const [key, value] of Object.entries(after)) {
    if (JSON.stringify(old[key]) !== JSON.stringify(value)) previous[key] = old[key] ?? null;
  }
  return previous;
}
