import { monthlyPeriod } from '../../clock.js';
import type { DeploymentTerms, EffectiveTerms } from '../../lib/terms.js';

export { type DeploymentTerms, type EffectiveTerms, effectiveTerms } from '../../lib/terms.js';

/** The organization's subscription period as the billing processor last reported it (docs/billing.md, Subscriptions). */
export interface SubscriptionPeriod {
  current_period_start: Date | null;
  current_period_end: Date | null;
}

/**
 * The billing period containing `now` (docs/decisions.md, Period with a subscription): the subscription's current period when it contains
 * `now`; past its end (the renewal not reported yet) the monthly anniversaries of its end — where
 * Stripe's next period starts, so a renewal reported late finds the period already begun and does not
 * reset it again (credits/subscription-period.ts); without a subscription the monthly anniversary of
 * billing_anchor.
 */
export function periodFor(d: DeploymentTerms, now: Date, subscription: SubscriptionPeriod | null = null): { start: Date; end: Date } {
  const start = subscription?.current_period_start;
  const end = subscription?.current_period_end;
  if (start && end && start.getTime() <= now.getTime()) {
    if (now.getTime() < end.getTime()) return { start, end };
    return monthlyPeriod(end, now);
  }
  return monthlyPeriod(d.billing_anchor, now);
}

/**
 * The subscription that sets an organization's periods: the one the organization names (the last one
 * Stripe reported in force, billing/subscriptions.ts), else the latest one that is not canceled.
 */
export const SUBSCRIPTION_PERIOD_SQL = `SELECT s.current_period_start, s.current_period_end
  FROM subscriptions s JOIN organizations o ON o.id = s.organization_id
  WHERE s.organization_id = $1 AND s.status <> 'canceled' AND s.current_period_start IS NOT NULL
  ORDER BY (s.stripe_subscription_id = o.stripe_subscription_id) DESC NULLS LAST, s.current_period_end DESC NULLS LAST LIMIT 1`;

/** When a balance row must next be brought up to date: its period end, or an override expiring sooner. */
export function syncBeforeFor(periodEnd: Date, terms: EffectiveTerms): Date {
  if (terms.changesAt && terms.changesAt.getTime() < periodEnd.getTime()) return terms.changesAt;
  return periodEnd;
}

/** What the monthly bucket holds; null = unlimited. */
export function monthlyRemaining(allocation: number | null, used: number): number | null {
  return allocation === null ? null : Math.max(0, allocation - used);
}

/** The monthly bucket as the ledger counts it: an unlimited bucket counts 0. */
export function ledgerMonthly(allocation: number | null, used: number): number {
  return allocation === null ? 0 : Math.max(0, allocation - used);
}
