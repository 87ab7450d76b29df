import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type ApiDeps, handleApi } from './api-handler.js';
import { type CustomerInput, createCustomer, createPrice, type PriceInput } from './catalog.js';
import { type CompleteOptions, completeCheckout, expireCheckout, settleAsyncPayment } from './checkout.js';
import { createClock, randomToken } from './clock.js';
import { handleControl, handlePage } from './control-routes.js';
import { createDelivery, DEFAULT_RETRY_DELAYS_MS, type Delivery, type DeliverFn, type DeliveryMode, type DeliveryResult, fetchTransport } from './delivery.js';
import { findOrThrow } from './errors.js';
import { buildEvent, type EventOrigin } from './events.js';
import { createFaults, createIdempotencyStore, sendJson } from './http.js';
import type {
  CheckoutSessionObject,
  CustomerObject,
  DisputeObject,
  InvoiceObject,
  CardBehaviour,
  MeterEventObject,
  PaymentMethodObject,
  PriceObject,
  StripeEventObject,
  SubscriptionObject,
} from './objects.js';
import { type SaveCardOptions, saveCard, setCardBehaviour } from './payment-methods.js';
import { closeDispute, disputeCharge } from './payments.js';
import { createState, type StandInContext, type StandInStateView, snapshot } from './state.js';
import { cancelSubscription, payInvoice, renewSubscription, updateSubscription } from './subscriptions.js';

export type { CustomerInput, PriceInput } from './catalog.js';
export type { CompleteOptions } from './checkout.js';
export type { SaveCardOptions } from './payment-methods.js';
export type { DeliverFn, DeliveryMode, DeliveryResult } from './delivery.js';
export type { StandInStateView } from './state.js';
export type * from './objects.js';

export interface StripeStandInOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** The one key the API accepts; default `sk_test_standin`. */
  secretKey?: string;
  /** A `whsec_…` signing secret; one is generated when absent. */
  webhookSecret?: string;
  /** Deliver events by POSTing here. */
  webhookUrl?: string;
  /** Or deliver them yourself (tests pass one that calls Fastify's `inject`). Takes precedence over `webhookUrl`. */
  deliver?: DeliverFn;
  /** `manual` (default): events wait for `flush()`. `auto`: sent as they happen, retried with backoff. */
  delivery?: DeliveryMode;
  /** The time for every `created`, period and timestamp check; default the wall clock. */
  now?: () => Date;
  /** Auto mode: waits before each retry. */
  retryDelaysMs?: readonly number[];
  /** Called after every delivery attempt (the CLI logs them). */
  onDelivery?: (result: DeliveryResult) => void;
  /** Called after every API request with `METHOD /path → status` (the CLI logs them). */
  onRequest?: (line: string) => void;
}

export interface StripeStandIn {
  /** `http://127.0.0.1:<port>`: pass host, port and protocol from it to `new Stripe(…)`. */
  readonly url: string;
  readonly port: number;
  readonly secretKey: string;
  readonly webhookSecret: string;
  /** Every stored object, live and read-only. */
  readonly state: StandInStateView;
  now(): Date;
  /** Moves the stand-in's time forward (on top of the `now` option). */
  advanceClock(seconds: number): Date;
  createPrice(input: PriceInput): PriceObject;
  createCustomer(input?: CustomerInput): CustomerObject;
  /**
   * A card saved to the customer, as a setup-mode Checkout would leave it (no event). `behaviour` (default
   * `ok`) is how it answers off-session payments; `makeDefault: true` makes it
   * `invoice_settings.default_payment_method`, `false` leaves that alone, absent sets it only when none.
   */
  savePaymentMethod(customerId: string, options?: SaveCardOptions): PaymentMethodObject;
  /** From now on the card answers payments this way (a card that starts declining, or works again). */
  setCardBehaviour(paymentMethodId: string, behaviour: CardBehaviour): PaymentMethodObject;
  /** The customer pays (or saves a card) on the hosted page; see `CompleteOptions` for bank debits, declines and the saved card. */
  completeCheckout(sessionId: string, options?: CompleteOptions): CheckoutSessionObject;
  settleAsyncPayment(sessionId: string): CheckoutSessionObject;
  expireCheckout(sessionId: string): CheckoutSessionObject;
  /** The period ends and the renewal is paid (or, with `cancel_at_period_end`, the subscription ends). */
  advanceSubscription(subscriptionId: string): SubscriptionObject;
  /** The period ends and the renewal is declined: the subscription goes `past_due`. */
  failRenewal(subscriptionId: string): SubscriptionObject;
  /** An open invoice is paid (a retry that works); a `past_due` subscription becomes `active`. */
  payInvoice(invoiceId: string): InvoiceObject;
  /** The cardholder disputes the payment's charge: the dispute's created and funds_withdrawn events. */
  disputePayment(paymentIntentId: string, options?: { amount?: number }): DisputeObject;
  /** The dispute is decided: won (funds reinstated) or lost. */
  closeDispute(disputeId: string, outcome: 'won' | 'lost'): DisputeObject;
  /** What the billing portal's cancel button does: now, or at the period end. */
  cancelSubscription(subscriptionId: string, options?: { atPeriodEnd?: boolean }): SubscriptionObject;
  /** Stored meter events, one per identifier, in arrival order. */
  meterEvents(): MeterEventObject[];
  /** Every event created, in order; only those of `type` when given. */
  events(type?: string): StripeEventObject[];
  /** Events not yet acknowledged with a 2xx. */
  queue(): StripeEventObject[];
  flush(options?: { order?: 'created' | 'reverse' }): Promise<DeliveryResult[]>;
  /** Deliver one event `times` times, one after another or all at once. */
  deliverEvent(eventId: string, options?: { times?: number; concurrently?: boolean }): Promise<DeliveryResult[]>;
  /** Deliver one event again, signed at `signedAt` (default now): a late or stale delivery. */
  resend(eventId: string, options?: { signedAt?: Date }): Promise<DeliveryResult>;
  /** Every delivery attempt so far. */
  deliveries(): DeliveryResult[];
  /** Auto mode: wait for the deliveries under way. */
  idle(): Promise<void>;
  /** The next `count` API requests (matching `path`) answer `status` with an `api_error` and change nothing. */
  failNext(count: number, options?: { status?: number; path?: RegExp }): void;
  close(): Promise<void>;
}

type Controls = Omit<StripeStandIn, 'url' | 'port' | 'secretKey' | 'webhookSecret' | 'close'>;

export async function startStripeStandIn(options: StripeStandInOptions = {}): Promise<StripeStandIn> {
  const clock = createClock(options.now);
  const state = createState();
  const secretKey = options.secretKey ?? 'sk_test_standin';
  const webhookSecret = options.webhookSecret ?? `whsec_${randomToken(32)}`;
  const delivery = createDelivery({
    clock,
    secret: webhookSecret,
    transport: options.deliver ?? (options.webhookUrl ? fetchTransport(options.webhookUrl) : null),
    mode: options.delivery ?? 'manual',
    retryDelaysMs: options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS,
    ...(options.onDelivery ? { onResult: options.onDelivery } : {}),
  });
  const emitFor =
    (origin?: EventOrigin): StandInContext['emit'] =>
    (type, object, previous) => {
      const event = buildEvent(type, object, clock.seconds(), previous, origin);
      state.events.push(event);
      delivery.enqueue(event);
      return event;
    };
  const faults = createFaults();
  const ctx: StandInContext = { state, clock, baseUrl: '', emit: emitFor() };
  const api: ApiDeps = { ctx, secretKey, idempotency: createIdempotencyStore(), faults, emitFor, ...(options.onRequest ? { onRequest: options.onRequest } : {}) };
  let standIn: StripeStandIn | undefined;
  const server = createServer((req, res) => {
    routeRequest(api, standIn, req, res).catch((error: unknown) => sendJson(res, 500, { error: { type: 'api_error', message: (error as Error).message } }));
  });
  const port = await listen(server, options.port ?? 0);
  ctx.baseUrl = `http://127.0.0.1:${port}`;
  standIn = {
    url: ctx.baseUrl,
    port,
    secretKey,
    webhookSecret,
    ...controls(ctx, delivery, faults),
    close: async () => {
      delivery.close();
      await closeServer(server);
    },
  };
  return standIn;
}

/** The TypeScript face of the simulated customer, time, delivery and fault controls. */
function controls(ctx: StandInContext, delivery: Delivery, faults: ReturnType<typeof createFaults>): Controls {
  const { state, clock } = ctx;
  const eventById = (id: string) => findOrThrow(new Map(state.events.map((e) => [e.id, e])), id, 'event');
  return {
    state,
    now: () => clock.now(),
    advanceClock: (seconds) => clock.advance(seconds),
    createPrice: (input) => createPrice(ctx, input),
    createCustomer: (input) => createCustomer(ctx, input),
    savePaymentMethod: (customerId, opts) => saveCard(ctx, customerId, opts),
    setCardBehaviour: (id, behaviour) => setCardBehaviour(ctx, id, behaviour),
    completeCheckout: (id, opts) => completeCheckout(ctx, id, opts),
    settleAsyncPayment: (id) => settleAsyncPayment(ctx, id),
    expireCheckout: (id) => expireCheckout(ctx, id),
    advanceSubscription: (id) => renewSubscription(ctx, id, 'paid'),
    failRenewal: (id) => renewSubscription(ctx, id, 'failed'),
    payInvoice: (id) => payInvoice(ctx, id),
    disputePayment: (id, opts) => disputeCharge(ctx, id, opts),
    closeDispute: (id, outcome) => closeDispute(ctx, id, outcome),
    cancelSubscription: (id, opts) => (opts?.atPeriodEnd ? updateSubscription(ctx, id, { cancelAtPeriodEnd: true }) : cancelSubscription(ctx, id)),
    meterEvents: () => snapshot([...state.meterEvents.values()]),
    events: (type) => snapshot(type ? state.events.filter((e) => e.type === type) : state.events),
    queue: () => snapshot(delivery.queue()),
    flush: (opts) => delivery.flush(opts),
    deliverEvent: (id, opts) => delivery.deliverEvent(eventById(id), opts),
    resend: (id, opts) => delivery.resend(eventById(id), opts),
    deliveries: () => delivery.log(),
    idle: () => delivery.idle(),
    failNext: (count, opts = {}) => faults.add(count, opts.status, opts.path),
  };
}

/** `/v1/…` is the API (key needed), `/_stand-in/…` the controls, `/checkout|portal|invoices/<id>` the pages. */
async function routeRequest(api: ApiDeps, standIn: StripeStandIn | undefined, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1');
  if (!standIn) return sendJson(res, 503, { error: { type: 'api_error', message: 'The Stripe stand-in is starting' } });
  if (url.pathname.startsWith('/v1/')) return handleApi(api, req, res, url);
  if (url.pathname.startsWith('/_stand-in/')) return handleControl(standIn, req, res, url);
  if (req.method === 'GET' && handlePage(standIn, res, url)) return;
  sendJson(res, 404, { error: { type: 'invalid_request_error', message: `Unrecognized request URL (${req.method}: ${url.pathname}).` } });
}

function listen(server: Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
