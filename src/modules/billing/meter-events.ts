import type { Deps } from '../../context.js';
import { claimMeterEvents, markMeterFailed, markMeterReported, markMeterRetry, markMeterSkipped, type MeterEventRow } from '../credits/index.js';
import { Stripe, stripeClient } from './stripe-client.js';
import { type JobOutcome, type JobPolicy, type JobQueue, retryAt, runJobs } from '../../workers/jobs.js';

/**
 * The `meter-events` worker (docs/billing.md, Usage to Stripe meters): sends the meter outbox to Stripe's Billing Meter API. A batch is
 * one claim of up to `limit` events, sent a few at a time over one keep-alive client; each event's
 * `identifier` is its usage record id, so a batch resent after a crash (the claim's lease ran out) is
 * deduplicated by Stripe, and the request's idempotency key makes the SDK's own retry harmless too.
 * Reported rows keep the identifier Stripe acknowledged as the processor's reference (the key Stripe's
 * meter event adjustments cancel by). A refusal Stripe will repeat (400: too old, unknown customer) is
 * kept as `failed` with its reason; anything else is retried with backoff, never dropped.
 */
export const METER_POLICY: JobPolicy = {
  batchSize: 100,
  leaseMs: 2 * 60_000,
  maxAttempts: null,
  // 30 s doubling up to 1 h; the attempt is counted at the claim.
  backoff: { kind: 'exponential', baseMs: 30_000, factor: 2, capMs: 60 * 60_000, jitter: 0 },
  concurrency: 8,
};

/**
 * The `meter-events` queue (docs/jobs.md). The outbox is a money table, so its claim is the credits
 * module's (claimMeterEvents, built with the runner's claim statement); sent 8 at a time.
 */
export const METER_QUEUE: JobQueue<MeterEventRow, Deps, { eventName: string; stripe: Stripe }> = {
  name: 'meter-events',
  table: 'meter_event_outbox',
  policy: METER_POLICY,
  claim: (db, at) => claimMeterEvents(db, at.now, at.limit, METER_POLICY.leaseMs!),
  setup: (deps) => {
    const eventName = deps.config.stripeMeterEventName;
    const stripe = stripeClient(deps);
    return eventName && stripe ? { eventName, stripe } : null;
  },
  keyOf: (row) => row.identifier,
  handle: ({ row, setup }, deps) => send(deps, setup.stripe, setup.eventName, row),
};

/** One pass (METER_QUEUE through the job runner). Returns how many events it claimed. */
export function reportMeterEvents(deps: Deps, limit: number): Promise<number> {
  return runJobs(deps, METER_QUEUE, { batch: limit });
}

async function send(deps: Deps, stripe: Stripe, eventName: string, e: MeterEventRow): Promise<JobOutcome> {
  if (e.value <= 0) {
    // Refunded in full before it was reported: there is nothing to bill.
    await markMeterSkipped(deps.db, e.identifier, 'refunded in full before it was reported: nothing sent', deps.clock.now());
    return 'skipped';
  }
  try {
    const sent = await stripe.billing.meterEvents.create(
      {
        event_name: eventName,
        payload: { stripe_customer_id: e.stripe_customer_id, value: String(e.value) },
        identifier: e.identifier,
        timestamp: Math.floor(e.event_at.getTime() / 1000),
      },
      // The value can shrink between tries (a refund before the report): a key per value keeps a retry
      // from being refused as a different request; the identifier is what Stripe deduplicates on.
      { idempotencyKey: `creditgate-meter-${e.identifier}-${e.value}` },
    );
    await markMeterReported(deps.db, e.identifier, sent.identifier ?? e.identifier, deps.clock.now());
    return 'done';
  } catch (error) {
    const message = (error as Error).message ?? String(error);
    if (error instanceof Stripe.errors.StripeInvalidRequestError) {
      deps.log.error({ identifier: e.identifier, err: error }, 'Stripe refused a meter event for good');
      await markMeterFailed(deps.db, e.identifier, message);
      return 'failed';
    }
    // The claim counted this attempt: `attempts` failures so far.
    await markMeterRetry(deps.db, e.identifier, retryAt(METER_POLICY, e.attempts, deps.clock.now()), message);
    return 'retry';
  }
}
