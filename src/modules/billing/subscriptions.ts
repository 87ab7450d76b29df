import type Stripe from 'stripe';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { writeAudit } from '../audit/service.js';
import { followSubscriptionPeriod } from '../credits/index.js';
import { changeTier, type DeploymentRow } from '../deployments/service.js';
import type { Plan, Tier } from '../../lib/tiers.js';
import { emitEvent } from '../events/outbox.js';
import { keepSubscriptionOfDeletedOrganization } from './deleted-organizations.js';
import { type EventOutcome, organizationOfCustomer, stripeId, toDate } from './stripe-objects.js';

/** Our subscription statuses (active, canceled, past_due, unpaid) from Stripe's eight (docs/billing.md, Subscriptions). */
export type SubscriptionStatus = 'active' | 'canceled' | 'past_due' | 'unpaid';

const STATUS: Record<string, SubscriptionStatus> = {
  active: 'active',
  trialing: 'active',
  past_due: 'past_due',
  unpaid: 'unpaid',
  // The first payment has not gone through, or collection is paused: no paid tier, not ended either.
  incomplete: 'unpaid',
  paused: 'unpaid',
  canceled: 'canceled',
  incomplete_expired: 'canceled',
};

/** An organization's subscription_status: active, canceled or past_due. */
const ORGANIZATION_STATUS: Record<SubscriptionStatus, string> = { active: 'active', past_due: 'past_due', unpaid: 'past_due', canceled: 'canceled' };

/** The organization's plan follows the tier it pays for (docs/billing.md, Subscriptions). */
export const PLAN_OF_TIER: Record<Tier, Plan> = { sandbox: 'free', trial: 'free', launch: 'pro', growth: 'pro', enterprise: 'enterprise' };

export interface SubscriptionState {
  id: string;
  customer: string;
  status: SubscriptionStatus;
  stripeStatus: string;
  priceId: string | null;
  periodStart: Date | null;
  periodEnd: Date | null;
  cancelAtPeriodEnd: boolean;
  organizationId: string | null;
}

/**
 * What creditgate reads of a Stripe subscription. Since API version 2025-03-31 the period lives on
 * the items; an account pinned to an older version sends it on the subscription: both are read.
 */
export function subscriptionState(s: Stripe.Subscription): SubscriptionState {
  const item = s.items?.data?.[0] as (Stripe.SubscriptionItem & Record<string, unknown>) | undefined;
  const legacy = s as unknown as { current_period_start?: number; current_period_end?: number };
  return {
    id: s.id,
    customer: stripeId(s.customer) ?? '',
    status: STATUS[s.status] ?? 'unpaid',
    stripeStatus: s.status,
    priceId: item?.price?.id ?? null,
    periodStart: toDate(item?.current_period_start ?? legacy.current_period_start),
    periodEnd: toDate(item?.current_period_end ?? legacy.current_period_end),
    cancelAtPeriodEnd: s.cancel_at_period_end === true,
    organizationId: typeof s.metadata?.organization_id === 'string' ? s.metadata.organization_id : null,
  };
}

/** A subscription's row changed while its state was read back from Stripe (applySubscription). */
export class SubscriptionMovedError extends Error {
  constructor(subscriptionId: string) {
    super(`subscription ${subscriptionId} changed while it was read back; read again at the next try`);
  }
}

/**
 * The version (`xmin`) of a subscription's row, or null when it has none: read before the read-back,
 * handed to applySubscription, which applies the state read only if the row is still at it.
 */
export async function subscriptionVersion(q: Queryable, subscriptionId: string): Promise<string | null> {
  const rows = await q.query<{ version: string }>('SELECT xmin::text AS version FROM subscriptions WHERE stripe_subscription_id = $1', [subscriptionId]);
  return rows[0]?.version ?? null;
}

interface SubscriptionRow {
  id: string;
  organization_id: string;
  status: string;
  stripe_price_id: string | null;
  current_period_start: Date | null;
  current_period_end: Date | null;
  cancel_at_period_end: boolean;
  last_event_at: Date | null;
}

/**
 * Apply a subscription's state (docs/billing.md, Subscriptions) in the caller's transaction: the subscriptions row, the
 * organization's status and plan, the primary deployment's tier (STRIPE_PRICE_TIERS; a subscription
 * not in force falls back to NEW_ORG_TIER), the credit period of its deployments (docs/metering.md, Periods), and the
 * `subscription.updated` event. `eventAt` is the event's `created`; `readBack` says the state was read
 * from the API just now, so it is current whatever the event's age.
 */
export async function applySubscription(
  tx: Queryable,
  ctx: Ctx,
  input: { state: SubscriptionState; eventAt: Date; readBack: boolean; seenVersion?: string | null },
): Promise<EventOutcome> {
  const { state, eventAt } = input;
  const now = ctx.clock.now();
  const organizationId = await organizationOfCustomer(tx, state.customer, state.organizationId);
  if (!organizationId) {
    if (state.customer && (await keepSubscriptionOfDeletedOrganization(tx, state, eventAt, now))) {
      return { ignored: `the organization of customer ${state.customer} is deleted; its subscription is canceled` };
    }
    return { ignored: `no organization for customer ${state.customer}` };
  }
  // One subscription event at a time per organization, whichever instance received it.
  // NO KEY UPDATE: foreign-key checks of concurrent money writes (their events) take KEY SHARE on this row.
  await tx.query('SELECT id FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [organizationId]);
  const existing = await tx.query<SubscriptionRow & { version: string }>(
    'SELECT *, xmin::text AS version FROM subscriptions WHERE stripe_subscription_id = $1 FOR UPDATE',
    [state.id],
  );
  const before = existing[0];
  if (input.seenVersion !== undefined && (before?.version ?? null) !== input.seenVersion) {
    // Another state was applied between the read-back and this lock: the state read may be older than
    // it. The event stays pending, and its next try reads the subscription again.
    throw new SubscriptionMovedError(state.id);
  }
  if (before && before.organization_id !== organizationId) {
    return { ignored: `subscription ${state.id} belongs to another organization than its customer's` };
  }
  if (before?.status === 'canceled' && state.status !== 'canceled') {
    // Stripe never revives a canceled subscription: this is a stale read or a same-second reordering.
    return { organizationId, ignored: 'the subscription is canceled, which is final' };
  }
  if (!input.readBack && before?.last_event_at && eventAt.getTime() < before.last_event_at.getTime()) {
    return { organizationId, ignored: `older than the last applied event (${before.last_event_at.toISOString()})` };
  }
  const lastEventAt = before?.last_event_at && before.last_event_at.getTime() > eventAt.getTime() ? before.last_event_at : eventAt;
  await tx.query(
    `INSERT INTO subscriptions (organization_id, stripe_subscription_id, stripe_customer_id, stripe_price_id, status,
       current_period_start, current_period_end, cancel_at_period_end, last_event_at, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
     ON CONFLICT (stripe_subscription_id) DO UPDATE SET stripe_price_id = EXCLUDED.stripe_price_id, status = EXCLUDED.status,
       current_period_start = EXCLUDED.current_period_start, current_period_end = EXCLUDED.current_period_end,
       cancel_at_period_end = EXCLUDED.cancel_at_period_end, last_event_at = EXCLUDED.last_event_at, updated_at = EXCLUDED.updated_at`,
    [organizationId, state.id, state.customer, state.priceId, state.status, state.periodStart, state.periodEnd, state.cancelAtPeriodEnd, lastEventAt, now],
  );

  const inForce = state.status === 'active' || state.status === 'past_due';
  const priceTier = state.priceId ? ctx.config.stripePriceTiers[state.priceId] : undefined;
  // A subscription in force on a price STRIPE_PRICE_TIERS does not list keeps the tier it has: a gap in
  // the configuration must not downgrade a paying customer (the audit row names the price).
  const target: Tier | null = inForce ? (priceTier ?? null) : ctx.config.newOrgTier;
  // Another subscription of the organization still in force keeps the organization's tier (a
  // replacement that was created before the old one was deleted, say).
  const other = await tx.query<SubscriptionRow & { stripe_subscription_id: string; stripe_customer_id: string }>(
    `SELECT * FROM subscriptions
     WHERE organization_id = $1 AND stripe_subscription_id <> $2 AND status IN ('active', 'past_due')
     ORDER BY updated_at DESC LIMIT 1`,
    [organizationId, state.id],
  );
  // What governs the organization: this subscription when it is in force, or when none is; else the
  // other one in force, as it was last applied. Two can overlap (two Checkouts opened before either was
  // paid): the end of one in force must bring back the tier of the other, not leave its own.
  const still = other[0];
  const governing =
    inForce || !still
      ? { id: state.id, customer: state.customer, status: state.status, start: state.periodStart, end: state.periodEnd, target }
      : {
          id: still.stripe_subscription_id,
          customer: still.stripe_customer_id,
          status: still.status as SubscriptionStatus,
          start: still.current_period_start,
          end: still.current_period_end,
          target: (still.stripe_price_id ? ctx.config.stripePriceTiers[still.stripe_price_id] : undefined) ?? null,
        };
  const changes: Record<string, unknown> = {};
  const primary = await tx.query<DeploymentRow>('SELECT * FROM deployments WHERE organization_id = $1 AND is_primary FOR UPDATE', [organizationId]);
  const deployment = primary[0];
  const tier: Tier = governing.target ?? (deployment?.tier as Tier | undefined) ?? ctx.config.newOrgTier;
  await tx.query(
    `UPDATE organizations SET subscription_status = $2, stripe_subscription_id = $3, plan = $4,
       stripe_customer_id = COALESCE(stripe_customer_id, $5), updated_at = $6
     WHERE id = $1`,
    [organizationId, ORGANIZATION_STATUS[governing.status], governing.id, PLAN_OF_TIER[tier], governing.customer, now],
  );
  if (deployment && deployment.tier !== tier) {
    await changeTier(tx, ctx, deployment, tier);
    changes.tier = { from: deployment.tier, to: tier };
  }
  const governingInForce = governing.status === 'active' || governing.status === 'past_due';
  if (governingInForce && governing.start && governing.end) {
    const deployments = await tx.query<{ id: string }>("SELECT id FROM deployments WHERE organization_id = $1 AND status = 'active'", [organizationId]);
    for (const d of deployments) {
      await followSubscriptionPeriod(tx, { deploymentId: d.id, start: governing.start, end: governing.end, now, actor: 'stripe' });
    }
  }
  if (inForce && state.priceId && !priceTier) changes.unknown_price = state.priceId;
  const changed =
    !before ||
    before.status !== state.status ||
    before.stripe_price_id !== state.priceId ||
    before.cancel_at_period_end !== state.cancelAtPeriodEnd ||
    before.current_period_end?.getTime() !== state.periodEnd?.getTime();
  if (changed || changes.tier) {
    const data = {
      organization_id: organizationId,
      subscription_id: state.id,
      status: state.status,
      previous_status: before?.status ?? null,
      price_id: state.priceId,
      tier,
      current_period_start: state.periodStart?.toISOString() ?? null,
      current_period_end: state.periodEnd?.toISOString() ?? null,
      cancel_at_period_end: state.cancelAtPeriodEnd,
    };
    await emitEvent(tx, { organizationId, type: 'subscription.updated', data, at: now });
    await writeAudit(tx, ctx, {
      organizationId,
      action: before ? 'update' : 'create',
      resourceType: 'subscription',
      resourceId: state.id,
      metadata: { status: state.status, price_id: state.priceId, ...changes },
    });
  }
  return { organizationId, tierChanged: changes.tier !== undefined, planChanged: true };
}
