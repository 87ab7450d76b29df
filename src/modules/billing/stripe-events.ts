import type Stripe from 'stripe';
import { type Ctx, type Deps, systemCtx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, ValidationError } from '../../errors.js';
import { findInputFault } from '../../http/input-guard.js';
import { tierCachesChanged } from '../deployments/service.js';
import { stripeClient, verifyStripeEvent } from './stripe-client.js';
import { storedPackSale } from '../credits/index.js';
import { handleChargeRefunded, handleCheckoutSession, handleDispute, handleInvoice } from './stripe-handlers.js';
import { deploymentOfPaymentIntent, handlePaymentIntentCanceled, handlePaymentIntentFailed, handlePaymentIntentSucceeded, takeLinesOff } from './auto-top-up.js';
import { type EventOutcome, stripeId } from './stripe-objects.js';
import { applySubscription, subscriptionState, subscriptionVersion } from './subscriptions.js';
import { type JobPolicy, type JobQueue, retryAt, runJobs } from '../../workers/jobs.js';

/**
 * Inbound Stripe events (docs/billing.md). Each verified event is stored by its id before anything acts on it;
 * a duplicate id is acknowledged and not acted on again. The receiver then handles it at once; if that
 * fails, the event stays `pending` and the `stripe-events` worker retries it with backoff — it is never
 * lost. Handling runs in one transaction that first re-reads the event row FOR UPDATE and checks it is
 * still pending, so an event has its effect once even when the receiver and the worker meet.
 */

/** How long the receiver has to handle an event before the worker may take it over (and the worker's own lease). */
const RECEIVER_LEASE_MS = 60_000;

/** The `stripe-events` queue's policy (docs/jobs.md): 30 s doubling up to 1 h, never given up (an event is never lost). */
export const STRIPE_EVENTS_POLICY: JobPolicy = {
  batchSize: 20,
  leaseMs: RECEIVER_LEASE_MS,
  maxAttempts: null,
  backoff: { kind: 'exponential', baseMs: 30_000, factor: 2, capMs: 60 * 60_000, jitter: 0 },
  concurrency: 1,
};

export async function receiveStripeEvent(deps: Deps, rawBody: string, signature: string | undefined): Promise<{ duplicate: boolean }> {
  // What is wrong with the request itself is 400 whether or not the installation is configured. The
  // body is kept raw for the signature, so the input guard (docs/input.md) runs here: a value
  // PostgreSQL cannot store (NUL in jsonb) is refused before anything is stored.
  checkedJson(rawBody);
  if (!signature) throw new ValidationError('Missing Stripe-Signature header', [{ field: 'stripe-signature', message: 'required' }]);
  const secret = deps.config.stripeWebhookSecret;
  if (!secret) throw new AppError('BILLING_NOT_CONFIGURED', 'Stripe events are not accepted: STRIPE_WEBHOOK_SECRET is not set');
  const now = deps.clock.now();
  const event = verifyStripeEvent(rawBody, signature, secret, now);
  const stored = await deps.db.query<{ id: string }>(
    `INSERT INTO stripe_events (id, type, created_at, payload, status, attempts, next_attempt_at, received_at)
     VALUES ($1, $2, $3, $4, 'pending', 0, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING id`,
    [event.id, event.type, new Date(event.created * 1000), rawBody, new Date(now.getTime() + RECEIVER_LEASE_MS), now],
  );
  if (!stored[0]) return { duplicate: true };
  try {
    await handleStoredEvent(deps, event.id);
  } catch (error) {
    // Stored and acknowledged: the worker takes it from here.
    deps.log.warn({ err: error, stripeEvent: event.id, type: event.type }, 'stripe event handling failed; the worker retries it');
  }
  return { duplicate: false };
}

const notJson = () => new ValidationError('The body is not JSON (or carries __proto__)', [{ field: 'body', message: 'must be the JSON event Stripe sent' }]);

/**
 * The body as JSON, checked as the input guard checks every other body (values PostgreSQL cannot
 * store, depth) and, like Fastify's own parser, refusing `__proto__` and `constructor.prototype` keys
 * (that walk is recursive, so it runs once the depth is known to be small).
 */
function checkedJson(text: string): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw notJson();
  }
  const fault = findInputFault(parsed, '');
  if (fault) throw ValidationError.forField(fault.field, fault.message);
  try {
    JSON.parse(text, (key, value) => {
      if (key === '__proto__' || (key === 'constructor' && value !== null && typeof value === 'object' && 'prototype' in value)) throw notJson();
      return value;
    });
  } catch {
    throw notJson();
  }
}

interface StoredEvent {
  id: string;
  type: string;
  created_at: Date;
  payload: Stripe.Event;
  status: string;
  attempts: number;
}

/** Handle one stored event if it is still pending; on failure record the error and when to try again, then rethrow. */
export async function handleStoredEvent(deps: Deps, id: string): Promise<void> {
  const rows = await deps.db.query<StoredEvent>("SELECT * FROM stripe_events WHERE id = $1 AND status = 'pending'", [id]);
  const stored = rows[0];
  if (!stored) return;
  const ctx = systemCtx(deps);
  try {
    // The API read happens before the transaction, so no lock waits on the network; the row's version
    // read before it lets the transaction see whether another state was applied meanwhile (without a
    // secret key there is no read-back, and no version to read).
    const subscriptionId = stored.type.startsWith('customer.subscription.') ? (stored.payload.data.object as { id?: unknown }).id : undefined;
    const seenVersion = typeof subscriptionId === 'string' && stripeClient(deps) ? await subscriptionVersion(deps.db, subscriptionId) : undefined;
    const readBack = await readBackSubscription(deps, stored);
    // A pack's grant or take-back changes a balance: it runs in a deduction batch's transaction and
    // commits with it (credits/batcher.ts); every other event in a transaction of its own.
    const balance = await balanceChangedBy(deps, stored);
    const inTransaction = <T>(fn: (tx: Queryable) => Promise<T>): Promise<T> =>
      balance ? deps.deductions.within(balance, fn) : deps.db.transaction(fn);
    const outcome = await inTransaction(async (tx) => {
      const locked = await tx.query<{ status: string }>('SELECT status FROM stripe_events WHERE id = $1 FOR UPDATE', [id]);
      if (locked[0]?.status !== 'pending') return null;
      const result = await actOn(tx, ctx, stored, readBack, readBack ? seenVersion : undefined);
      await tx.query(
        `UPDATE stripe_events SET status = $2, processed_at = $3, organization_id = $4, last_error = $5, attempts = attempts + 1,
           next_attempt_at = NULL WHERE id = $1`,
        [id, result.ignored ? 'ignored' : 'processed', ctx.clock.now(), result.organizationId ?? null, result.ignored ?? null],
      );
      return result;
    });
    // What was ignored is acknowledged to Stripe (200) and kept with its reason; a grant asked for
    // what was never sold is worth an operator's look.
    if (outcome?.refused) deps.log.warn({ stripeEvent: id, type: stored.type, reason: outcome.ignored }, 'stripe event refused: it grants nothing');
    else if (outcome?.ignored) deps.log.info({ stripeEvent: id, type: stored.type, reason: outcome.ignored }, 'stripe event ignored');
    if (outcome?.tierChanged) tierCachesChanged(ctx);
    if (outcome?.planChanged) ctx.bus.publish('plan-cache');
    if (outcome?.autoTopUpOff) await takeLinesOff(deps, outcome.autoTopUpOff);
    // Packs granted or taken back, periods moved: rare, so every instance drops every cached balance.
    if (outcome && !outcome.ignored) ctx.bus.publish('balance-cache');
  } catch (error) {
    // This try is the event's (attempts + 1)-th failure.
    await deps.db.query(
      `UPDATE stripe_events SET attempts = attempts + 1, next_attempt_at = $2, last_error = $3 WHERE id = $1 AND status = 'pending'`,
      [id, retryAt(STRIPE_EVENTS_POLICY, stored.attempts + 1, deps.clock.now()), String((error as Error).message ?? error).slice(0, 1000)],
    );
    throw error;
  }
}

/** The deployment whose balance the event may change (a credit pack's grant or take-back), or null. */
async function balanceChangedBy(deps: Deps, stored: StoredEvent): Promise<string | null> {
  const object = stored.payload.data.object as unknown;
  switch (stored.type) {
    case 'checkout.session.completed':
    case 'checkout.session.async_payment_succeeded': {
      // The stored sale's deployment, whatever the event's metadata says.
      const id = (object as { id?: unknown }).id;
      return typeof id === 'string' ? ((await storedPackSale(deps.db, id))?.deployment_id ?? null) : null;
    }
    case 'payment_intent.succeeded':
    case 'payment_intent.payment_failed':
    case 'payment_intent.canceled':
      // A stored auto top-up's deployment (billing/auto-top-up.ts); any other PaymentIntent changes no balance.
      return deploymentOfPaymentIntent(deps.db, object);
    case 'charge.refunded':
    case 'charge.dispute.funds_withdrawn':
    case 'charge.dispute.funds_reinstated': {
      const paymentIntent = stripeId((object as Stripe.Charge | Stripe.Dispute).payment_intent);
      if (!paymentIntent) return null;
      const rows = await deps.db.query<{ deployment_id: string }>(
        'SELECT deployment_id FROM credit_purchases WHERE stripe_payment_intent_id = $1',
        [paymentIntent],
      );
      return rows[0]?.deployment_id ?? null;
    }
    default:
      return null;
  }
}

async function actOn(
  tx: Queryable,
  ctx: Ctx,
  stored: StoredEvent,
  readBack: Stripe.Subscription | 'missing' | null,
  seenVersion: string | null | undefined,
): Promise<EventOutcome> {
  const object = stored.payload.data.object as unknown;
  const foreign = foreignEvent(ctx, stored.payload);
  if (foreign) return { ignored: foreign, refused: true };
  switch (stored.type) {
    case 'customer.subscription.created':
    case 'customer.subscription.updated':
    case 'customer.subscription.deleted':
      if (readBack === 'missing') {
        // Not this account's subscription (or gone): its event may end what we have, never grant a tier.
        const state = subscriptionState(object as Stripe.Subscription);
        if (state.status !== 'canceled') return { ignored: `Stripe does not know subscription ${state.id}: nothing applied`, refused: true };
        return applySubscription(tx, ctx, { state, eventAt: stored.created_at, readBack: false, seenVersion: undefined });
      }
      return applySubscription(tx, ctx, {
        state: subscriptionState(readBack ?? (object as Stripe.Subscription)),
        eventAt: stored.created_at,
        readBack: readBack !== null,
        seenVersion,
      });
    case 'checkout.session.completed':
    case 'checkout.session.async_payment_succeeded':
      return handleCheckoutSession(tx, ctx, object as Stripe.Checkout.Session);
    case 'charge.refunded':
      return handleChargeRefunded(tx, ctx, object as Stripe.Charge);
    case 'charge.dispute.funds_withdrawn':
    case 'charge.dispute.funds_reinstated':
      return handleDispute(tx, ctx, stored.type, object as Stripe.Dispute);
    case 'payment_intent.succeeded':
      return handlePaymentIntentSucceeded(tx, ctx, object as Stripe.PaymentIntent);
    case 'payment_intent.payment_failed':
      return handlePaymentIntentFailed(tx, ctx, object as Stripe.PaymentIntent);
    case 'payment_intent.canceled':
      return handlePaymentIntentCanceled(tx, ctx, object as Stripe.PaymentIntent);
    case 'invoice.created':
    case 'invoice.finalized':
    case 'invoice.paid':
    case 'invoice.payment_failed':
    case 'invoice.voided':
      return handleInvoice(tx, ctx, stored.type, object as Stripe.Invoice);
    default:
      return { ignored: `event type ${stored.type} is not handled` };
  }
}

/**
 * An event this installation's own Stripe account did not make (docs/billing.md, Inbound events): one of
 * a connected account (`account` set: an endpoint that also listens to Connect events shares our
 * secret), or of the other mode than the secret key's (a live event with a test key, or the reverse).
 * Such an event is stored and acted on in nothing: its customers, subscriptions and payments are not
 * ours, and its metadata could name any organization.
 */
function foreignEvent(ctx: Ctx, event: Stripe.Event): string | null {
  const account = (event as { account?: unknown }).account;
  if (account !== undefined && account !== null) return 'an event of a connected account: this installation sells on its own account only';
  const key = ctx.config.stripeSecretKey;
  const live = key ? /^(sk|rk)_live_/.test(key) : null;
  const test = key ? /^(sk|rk)_test_/.test(key) : null;
  if ((live && event.livemode !== true) || (test && event.livemode !== false)) {
    return `a ${event.livemode ? 'live' : 'test'} mode event, and the secret key is ${live ? 'live' : 'test'} mode`;
  }
  return null;
}

/**
 * Order is not trusted (docs/billing.md, Inbound events): with a secret key, the subscription is read back from the API and its
 * current state applied, whatever the event's age. A subscription Stripe does not know is `missing`
 * (not this account's: actOn applies only an end from such an event); any other failure leaves the
 * event for the worker.
 */
async function readBackSubscription(deps: Deps, stored: StoredEvent): Promise<Stripe.Subscription | 'missing' | null> {
  if (!stored.type.startsWith('customer.subscription.')) return null;
  const stripe = stripeClient(deps);
  if (!stripe) return null;
  const id = (stored.payload.data.object as { id?: unknown }).id;
  if (typeof id !== 'string') return null;
  try {
    return await stripe.subscriptions.retrieve(id);
  } catch (error) {
    if ((error as { code?: string }).code === 'resource_missing') return 'missing';
    throw error;
  }
}

/**
 * The `stripe-events` queue (docs/jobs.md): due pending events, leased by moving next_attempt_at (as
 * the receiver's own lease does), handled one by one, oldest Stripe `created` first.
 */
export const STRIPE_EVENTS_QUEUE: JobQueue<{ id: string; created_at: Date }, Deps> = {
  name: 'stripe-events',
  table: 'stripe_events',
  policy: STRIPE_EVENTS_POLICY,
  claim: {
    name: 'stripe-events',
    table: 'stripe_events',
    key: 'id',
    pending: "q.status = 'pending'",
    dueAt: 'q.next_attempt_at',
    lease: { kind: 'due', column: 'next_attempt_at' },
    orderBy: 'q.created_at, q.id',
    returning: 'j.id, j.created_at',
  },
  order: (a, b) => a.created_at.getTime() - b.created_at.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
  keyOf: (row) => row.id,
  async handle({ row }, deps) {
    try {
      await handleStoredEvent(deps, row.id);
      return 'done';
    } catch (error) {
      // handleStoredEvent recorded the failure and the next try.
      deps.log.warn({ err: error, stripeEvent: row.id }, 'stripe event handling failed again');
      return 'retry';
    }
  },
};

/** The `stripe-events` worker's pass (STRIPE_EVENTS_QUEUE through the job runner). */
export function retryStripeEvents(deps: Deps, limit: number): Promise<number> {
  return runJobs(deps, STRIPE_EVENTS_QUEUE, { batch: limit });
}

/**
 * Settled events are kept 30 days — far past Stripe's three days of redelivery, so a duplicate is
 * still recognised — and then deleted by the `stripe-event-retention` worker. Pending ones stay.
 */
export const STRIPE_EVENT_RETENTION_MS = 30 * 24 * 60 * 60_000;

export async function pruneStripeEvents(deps: Deps, limit: number): Promise<number> {
  const cutoff = new Date(deps.clock.now().getTime() - STRIPE_EVENT_RETENTION_MS);
  const rows = await deps.db.query<{ id: string }>(
    `DELETE FROM stripe_events WHERE id IN (SELECT id FROM stripe_events WHERE status <> 'pending' AND received_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
     RETURNING id`,
    [cutoff, limit],
  );
  return rows.length;
}
