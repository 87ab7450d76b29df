import { monthlyPeriod } from '../../clock.js';
import { TIER_TABLE, type Tier } from '../entitlements/tiers.js';

/** The columns of a deployment that decide its allocation, limits and period. */
export interface DeploymentTerms {
  tier: string;
  billing_anchor: Date;
  override_monthly_credits: number | null;
  override_api_rate_limit: number | null;
  override_ai_tokens_limit: number | null;
  override_expires_at: Date | null;
}

export interface EffectiveTerms {
  monthlyCredits: number | null;
  aiTokensLimit: number | null;
  apiRateLimit: number | null;
  /** The next moment at which these terms change by themselves (an override expiring), or null. */
  changesAt: Date | null;
}

/** Overrides beat the tier until they expire (docs/metering.md, Periods, tier changes and overrides); the tier never changes because of them. */
export function effectiveTerms(d: DeploymentTerms, now: Date): EffectiveTerms {
  const tier = TIER_TABLE[d.tier as Tier];
  const active = d.override_expires_at === null || d.override_expires_at.getTime() > now.getTime();
  const anySet =
    d.override_monthly_credits !== null || d.override_api_rate_limit !== null || d.override_ai_tokens_limit !== null;
  return {
    monthlyCredits: active && d.override_monthly_credits !== null ? d.override_monthly_credits : tier.monthlyCredits,
    aiTokensLimit: active && d.override_ai_tokens_limit !== null ? d.override_ai_tokens_limit : tier.aiMonthlyLimit,
    apiRateLimit: active && d.override_api_rate_limit !== null ? d.override_api_rate_limit : tier.apiRateLimit,
    changesAt: active && anySet && d.override_expires_at !== null ? d.override_expires_at : null,
  };
}

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
