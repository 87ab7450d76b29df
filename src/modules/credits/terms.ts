import { monthlyPeriod } from '../../clock.js';
import type { DeploymentTerms, EffectiveTerms } from '../../lib/terms.js';

export { type DeploymentTerms, type EffectiveTerms, effectiveTerms } from '../../lib/terms.js';

/** The organization's subscription period as the billing processor last reported it (docs/billing.md, Subscriptions). */
export interface SubscriptionPeriod {
  current_period_start: Date | null;
  current_period_end: Date | null;
  /**
   * Set to end when its period ends, and no other subscription of the organization in force goes on
   * (read by the roll only; docs/metering.md, Periods).
   */
  cancel_at_period_end?: boolean;
}

/**
 * The billing period containing `now` (docs/decisions.md, Period with a subscription): the subscription's current period when it contains
 * `now`; past its end (the renewal not reported yet) the monthly anniversaries of its end (of its
 * start's day when the end was clamped to a month's last day: renewalAnchor) — where Stripe's next
 * period starts, so a renewal reported late finds the period already begun and does not
 * reset it again (credits/subscription-period.ts); without a subscription the monthly anniversary of
 * billing_anchor.
 */
export function periodFor(d: Pick<DeploymentTerms, 'billing_anchor'>, now: Date, subscription: SubscriptionPeriod | null = null): { start: Date; end: Date } {
  const start = subscription?.current_period_start;
  const end = subscription?.current_period_end;
  if (start && end && start.getTime() <= now.getTime()) {
    if (now.getTime() < end.getTime()) return { start, end };
    return monthlyPeriod(renewalAnchor(start, end), now);
  }
  return monthlyPeriod(d.billing_anchor, now);
}

/**
 * What a subscription's next periods are monthly anniversaries of: its end, unless that end is a day
 * clamped to the month's last (a period from Jan 31 ends Feb 28, and Stripe's next one ends Mar 31,
 * not Mar 28): then the start's day, at the end's time of day.
 */
function renewalAnchor(start: Date, end: Date): Date {
  const lastDayOfEndMonth = new Date(Date.UTC(end.getUTCFullYear(), end.getUTCMonth() + 1, 0)).getUTCDate();
  if (end.getUTCDate() !== lastDayOfEndMonth || start.getUTCDate() <= end.getUTCDate()) return end;
  return new Date(
    Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), start.getUTCDate(), end.getUTCHours(), end.getUTCMinutes(), end.getUTCSeconds(), end.getUTCMilliseconds()),
  );
}

/**
 * The subscription that sets an organization's periods: the one the organization names (the last one
 * Stripe reported in force, billing/subscriptions.ts), else the latest one that is not canceled.
 * `organization` is the SQL of the organization's id (a parameter, or a column of an outer query);
 * `only` a condition on the outer query alone, under which it is looked up at all (a lateral join then
 * reads no subscription for the rows that fail it).
 */
export const subscriptionPeriodSql = (organization: string, only = 'true') => `SELECT s.current_period_start, s.current_period_end,
    s.cancel_at_period_end AND NOT EXISTS (SELECT 1 FROM subscriptions o2 WHERE o2.organization_id = s.organization_id
      AND o2.stripe_subscription_id <> s.stripe_subscription_id AND o2.status IN ('active', 'past_due') AND NOT o2.cancel_at_period_end) AS cancel_at_period_end
  FROM subscriptions s JOIN organizations o ON o.id = s.organization_id
  WHERE ${only} AND s.organization_id = ${organization} AND s.status <> 'canceled' AND s.current_period_start IS NOT NULL
  ORDER BY (s.stripe_subscription_id = o.stripe_subscription_id) DESC NULLS LAST, s.current_period_end DESC NULLS LAST LIMIT 1`;

export const SUBSCRIPTION_PERIOD_SQL = subscriptionPeriodSql('$1');

/** A subscription period read as two nullable columns (a lateral join's). */
export const subscriptionPeriod = (start: Date | null, end: Date | null): SubscriptionPeriod | null =>
  start && end ? { current_period_start: start, current_period_end: end } : null;

/** What brings a balance row's period forward once it has ended (periodFor's inputs). */
export interface PeriodInputs {
  billing_anchor: Date;
  subscription: SubscriptionPeriod | null;
}

/**
 * The credit period a balance row has at `at` (docs/metering.md, Periods): its own while that holds
 * `at`; past its end, the one bringing the row up to date gives it (periodFor) — not the monthly
 * anniversaries of the old end, which differ from it once a short month clamped the anchor's day (an
 * anchor on the 31st ends a period on the 30th) or a subscription renewed on another day. Without the
 * inputs (a row of no deployment), the anniversaries of its end.
 */
export function periodAt(row: { period_start: Date; period_end: Date }, at: Date, inputs: PeriodInputs | null): { start: Date; end: Date } {
  if (row.period_end.getTime() > at.getTime()) return { start: row.period_start, end: row.period_end };
  return inputs ? periodFor(inputs, at, inputs.subscription) : monthlyPeriod(row.period_end, at);
}

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
