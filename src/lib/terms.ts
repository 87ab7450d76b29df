import { TIER_TABLE, type Tier } from './tiers.js';

/**
 * A deployment's terms: its tier's numbers unless an override is in force (docs/metering.md, Periods,
 * tier changes and overrides). Pure, below the modules (ARCHITECTURE.md, Layers): credits reads them
 * for allocations and periods, the rate limiter for the minute limit.
 */

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
