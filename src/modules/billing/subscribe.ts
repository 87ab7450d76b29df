import type Stripe from 'stripe';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { tierCachesChanged } from '../deployments/service.js';
import { authorize } from '../organizations/rbac.js';
import { type CheckoutAnswer, changeSubscriptionPrice, type ReturnUrls, subscriptionCheckout, subscriptionInForce, subscriptionPrice } from './checkout.js';
import { type BillingSelection, billingOrganization, getSubscription, type SubscriptionView } from './service.js';
import { applySubscription, subscriptionState } from './subscriptions.js';

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
  const updated = await changeSubscriptionPrice(ctx, current, price);
  await applyFromApi(ctx, updated);
  return { kind: 'subscription', subscription: await getSubscription(ctx, { queryOrganizationId: organizationId }) };
}

/** Apply a subscription the API just returned (so it is current): the same path as its events take. */
export async function applyFromApi(ctx: Ctx, subscription: Stripe.Subscription): Promise<void> {
  const outcome = await ctx.db.transaction((tx) =>
    applySubscription(tx, ctx, { state: subscriptionState(subscription), eventAt: ctx.clock.now(), readBack: true }),
  );
  if (outcome.tierChanged) tierCachesChanged(ctx);
  if (outcome.planChanged) ctx.bus.publish('plan-cache');
}
