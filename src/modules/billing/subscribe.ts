import type Stripe from 'stripe';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { tierCachesChanged } from '../deployments/service.js';
import { authorize } from '../organizations/rbac.js';
import {
  type CheckoutAnswer,
  callStripe,
  changeSubscriptionPrice,
  type ReturnUrls,
  subscriptionCheckout,
  subscriptionInForce,
  subscriptionPrice,
} from './checkout.js';
import { type BillingSelection, billingOrganization, getSubscription, type SubscriptionView } from './service.js';
import { requireStripe } from './stripe-client.js';
import type { EventOutcome } from './stripe-objects.js';
import { applySubscription, SubscriptionMovedError, subscriptionState, subscriptionVersion } from './subscriptions.js';

export type SubscribeAnswer = { kind: 'checkout'; checkout: CheckoutAnswer } | { kind: 'subscription'; subscription: SubscriptionView | null };

/**
 * POST /billing/subscription (docs/billing.md, Subscriptions; billing.manage: owners and admins): without a subscription in
 * force, a Checkout Session; with one, its price changes through the API (Stripe prorates) and the
 * answer is the subscription as Stripe now reports it, applied at once (tier, plan, events).
 */
export async function subscribe(
  ctx: Ctx,
  sel: BillingSelection,
  input: { price_id?: string | undefined; tier?: string | undefined } & ReturnUrls,
  idempotencyKey?: string,
): Promise<SubscribeAnswer> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.manage');
  const price = subscriptionPrice(ctx, input);
  const current = await subscriptionInForce(ctx, organizationId);
  if (!current) {
    return { kind: 'checkout', checkout: await subscriptionCheckout(ctx, organizationId, price, input, idempotencyKey) };
  }
  const status = await ctx.db.query<{ status: string }>('SELECT status FROM subscriptions WHERE stripe_subscription_id = $1', [current]);
  if (status[0]?.status !== 'active') {
    // Past due or unpaid: a plan change would add credits that the failing card does not pay for.
    throw new AppError('CONFLICT', `The subscription is ${status[0]?.status ?? 'not active'}: pay the open invoice (Billing Portal) before changing the plan`);
  }
  const seenVersion = await subscriptionVersion(ctx.db, current);
  const updated = await changeSubscriptionPrice(ctx, current, price);
  await applyFromApi(ctx, updated, seenVersion);
  return { kind: 'subscription', subscription: await getSubscription(ctx, { queryOrganizationId: organizationId }) };
}

/**
 * Apply a subscription the API just returned (so it is current): the same path as its events take.
 * `seenVersion` is its row's version read before the API call; an event applied since may carry a
 * newer state than the answer, so then the subscription is read again and that applied (at most three
 * reads; past them, the events of what moved the row apply Stripe's state).
 */
export async function applyFromApi(ctx: Ctx, subscription: Stripe.Subscription, seenVersion: string | null): Promise<void> {
  let state = subscriptionState(subscription);
  let seen = seenVersion;
  let outcome: EventOutcome | undefined;
  for (let read = 1; outcome === undefined; read++) {
    try {
      outcome = await ctx.db.transaction((tx) => applySubscription(tx, ctx, { state, eventAt: ctx.clock.now(), readBack: true, seenVersion: seen }));
    } catch (error) {
      if (!(error instanceof SubscriptionMovedError)) throw error;
      // Moved three times while being read: the events of those moves bring Stripe's state.
      if (read === 3) return;
      seen = await subscriptionVersion(ctx.db, state.id);
      const stripe = requireStripe(ctx);
      state = subscriptionState(await callStripe('to read the subscription', () => stripe.subscriptions.retrieve(state.id)));
    }
  }
  if (outcome.tierChanged) tierCachesChanged(ctx);
  if (outcome.planChanged) ctx.bus.publish('plan-cache');
}
