/**
 * The tier table (docs/entitlements.md): flags, limits, and the monthly credit allocation.
 * `null` means unlimited everywhere in this file.
 */
export const TIERS = ['sandbox', 'trial', 'launch', 'growth', 'enterprise'] as const;
export type Tier = (typeof TIERS)[number];

export const FLAGS = ['ai_enabled', 'billing_enabled', 'custom_domain', 'white_label', 'mcp_enabled'] as const;
export type Flag = (typeof FLAGS)[number];
export type Flags = Record<Flag, boolean>;

export const PLANS = ['free', 'pro', 'enterprise'] as const;
export type Plan = (typeof PLANS)[number];

export interface TierDefinition {
  flags: Flags;
  /** Credits granted each period (the monthly bucket, docs/metering.md). */
  monthlyCredits: number | null;
  /** AI tokens per billing period (input + output). */
  aiMonthlyLimit: number | null;
  /** Requests per sliding minute on /api/v1 (docs/limits.md). */
  apiRateLimit: number | null;
  supportLevel: 'community' | 'email' | 'priority' | 'dedicated';
}

const flags = (ai: boolean, billing: boolean, domain: boolean, white: boolean, mcp: boolean): Flags => ({
  ai_enabled: ai,
  billing_enabled: billing,
  custom_domain: domain,
  white_label: white,
  mcp_enabled: mcp,
});

export const TIER_TABLE: Record<Tier, TierDefinition> = {
  sandbox: {
    flags: flags(false, false, false, false, false),
    monthlyCredits: 0,
    aiMonthlyLimit: 0,
    apiRateLimit: 100,
    supportLevel: 'community',
  },
  trial: {
    flags: flags(true, true, false, false, true),
    monthlyCredits: 100,
    aiMonthlyLimit: 1_000,
    apiRateLimit: 500,
    supportLevel: 'email',
  },
  launch: {
    flags: flags(true, true, true, false, true),
    monthlyCredits: 2_000,
    aiMonthlyLimit: 10_000,
    apiRateLimit: 2_000,
    supportLevel: 'email',
  },
  growth: {
    flags: flags(true, true, true, true, true),
    monthlyCredits: 20_000,
    aiMonthlyLimit: 50_000,
    apiRateLimit: 10_000,
    supportLevel: 'priority',
  },
  enterprise: {
    flags: flags(true, true, true, true, true),
    monthlyCredits: null,
    aiMonthlyLimit: null,
    apiRateLimit: null,
    supportLevel: 'dedicated',
  },
};

/** Hourly request limits of the application API per organization plan (docs/limits.md). */
export const PLAN_HOURLY_LIMIT: Record<Plan, number> = { free: 1_000, pro: 10_000, enterprise: 100_000 };

/** docs/limits.md, AI token quota: credits per 1,000 AI tokens past the monthly limit, by model class. */
export const AI_CREDIT_RATES = { credits_per_standard: 1, credits_per_advanced: 3, credits_per_premium: 10 } as const;

export function isTier(value: string): value is Tier {
  return (TIERS as readonly string[]).includes(value);
}
