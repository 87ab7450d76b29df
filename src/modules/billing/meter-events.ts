import type { Deps } from '../../context.js';
import { claimMeterEvents, markMeterFailed, markMeterReported, markMeterRetry, markMeterSkipped, type MeterEventRow } from '../credits/index.js';
import { Stripe, stripeClient } from './stripe-client.js';

/**
 * The `meter-events` worker (docs/billing.md, Usage to Stripe meters): sends the meter outbox to Stripe's Billing Meter API. A batch is
 * one claim of up to `limit` events, sent a few at a time over one keep-alive client; each event's
 * `identifier` is its usage record id, so a batch resent after a crash (the claim's lease ran out) is
 * deduplicated by Stripe, and the request's idempotency key makes the SDK's own retry harmless too.
 * Reported rows keep the identifier Stripe acknowledged as the processor's reference (the key Stripe's
 * meter event adjustments cancel by). A refusal Stripe will repeat (400: too old, unknown customer) is
 * kept as `failed` with its reason; anything else is retried with backoff, never dropped.
 */
const LEASE_MS = 2 * 60_000;
const CONCURRENCY = 8;
const MAX_BACKOFF_MS = 60 * 60_000;

export async function reportMeterEvents(deps: Deps, limit: number): Promise<number> {
  const eventName = deps.config.stripeMeterEventName;
  const stripe = stripeClient(deps);
  if (!eventName || !stripe) return 0;
  const batch = await claimMeterEvents(deps.db, deps.clock.now(), limit, LEASE_MS);
  let next = 0;
  const lane = async () => {
    while (next < batch.length) {
      const event = batch[next++]!;
      await send(deps, stripe, eventName, event);
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, batch.length) }, lane));
  return batch.length;
}

async function send(deps: Deps, stripe: Stripe, eventName: string, e: MeterEventRow): Promise<void> {
  if (e.value <= 0) {
    // Refunded in full before it was reported: there is nothing to bill.
    await markMeterSkipped(deps.db, e.identifier, 'refunded in full before it was reported: nothing sent', deps.clock.now());
    return;
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
  } catch (error) {
    const message = (error as Error).message ?? String(error);
    if (error instanceof Stripe.errors.StripeInvalidRequestError) {
      deps.log.error({ identifier: e.identifier, err: error }, 'Stripe refused a meter event for good');
      await markMeterFailed(deps.db, e.identifier, message);
      return;
    }
    const delay = Math.min(MAX_BACKOFF_MS, 30_000 * 2 ** Math.min(Math.max(0, e.attempts - 1), 10));
    await markMeterRetry(deps.db, e.identifier, new Date(deps.clock.now().getTime() + delay), message);
  }
}
