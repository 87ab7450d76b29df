import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { aiTokensFree, effectiveTerms, readBalance, viewBalance } from '../credits/index.js';
import { type AppliedBudget, budgetsThatApply } from '../budgets/applicable.js';
import { authenticateDeployment, type DeploymentRow } from '../deployments/service.js';
import { effectiveFlags } from './flags.js';
import { AI_CREDIT_RATES, FLAGS, type Flags, TIER_TABLE, type Tier } from '../../lib/tiers.js';

/** How long a client may keep a snapshot (docs/entitlements.md, The snapshot). */
export const NEXT_CHECK_SECONDS = 300;

export interface EntitlementSnapshot {
  status: 'active' | 'suspended';
  tier: Tier;
  features: Flags & {
    ai_monthly_limit: number | null;
    api_rate_limit: number | null;
    support_level: string;
  };
  quotas: {
    ai_tokens: { used: number; limit: number | null; remaining: number | null; resets_at: string };
  };
  /** The budgets that hold the deployment's (and the calling key's) charges (docs/budgets.md). */
  budgets: AppliedBudget[];
  message: string | null;
  next_check_seconds: number;
}

const invalidCredentials = () =>
  new AppError('INVALID_DEPLOYMENT_CREDENTIALS', 'Unknown deployment or wrong deployment secret');

/**
 * POST /api/v1/entitlements/check's body credentials; one answer for an unknown id and a wrong secret.
 * The snapshot itself is computed from the database on every call; `fresh` (the caller's `force`) also
 * reads the deployment from the database instead of the instance's principal cache.
 */
export function authenticateEntitlementCheck(ctx: Ctx, deploymentId: string, secret: string, fresh = false): Promise<DeploymentRow> {
  return authenticateDeployment(ctx, deploymentId, secret, invalidCredentials, fresh);
}

/**
 * The budgets of the deployment and of the API key that authenticated, if one did (docs/budgets.md,
 * "In the entitlement snapshot and the AI quota"); read on every answer, like the rest of it.
 */
function budgetsOf(ctx: Ctx, deployment: DeploymentRow, now: Date): Promise<AppliedBudget[]> {
  const key = ctx.actor.type === 'api_key' && ctx.actor.organizationId === deployment.organization_id ? ctx.actor.apiKeyId : null;
  return budgetsThatApply(ctx.db, { organizationId: deployment.organization_id, deploymentId: deployment.id, apiKeyId: key }, now);
}

export async function snapshotOf(ctx: Ctx, deployment: DeploymentRow): Promise<EntitlementSnapshot> {
  const now = ctx.clock.now();
  const tier = deployment.tier as Tier;
  const terms = effectiveTerms(deployment, now);
  const row = await readBalance(ctx.db, deployment.id, now, 'system');
  const budgets = await budgetsOf(ctx, deployment, now);
  const balance = viewBalance(row);
  const active = deployment.status === 'active';
  const flags = active
    ? effectiveFlags(tier, deployment.flag_overrides)
    : (Object.fromEntries(FLAGS.map((f) => [f, false])) as Flags);
  const limit = terms.aiTokensLimit;
  return {
    status: active ? 'active' : 'suspended',
    tier,
    features: {
      ...flags,
      ai_monthly_limit: limit,
      api_rate_limit: terms.apiRateLimit,
      support_level: TIER_TABLE[tier].supportLevel,
    },
    quotas: {
      ai_tokens: {
        used: balance.aiTokensUsed,
        limit,
        remaining: aiTokensFree(row, limit),
        resets_at: balance.periodEnd.toISOString(),
      },
    },
    budgets,
    message: active ? null : 'This deployment is suspended; every feature is off until an operator reactivates it.',
    next_check_seconds: NEXT_CHECK_SECONDS,
  };
}

export interface AiQuota {
  used: number;
  limit: number | null;
  remaining: number | null;
  resets_at: string;
  tier: Tier;
  credits_available: number | null;
  /** docs/ai-proxy.md, "What a provider's over-report costs". */
  credits_owed: number;
  credits_per_standard: number;
  credits_per_advanced: number;
  credits_per_premium: number;
  budgets: AppliedBudget[];
}

/** GET /api/v1/ai/quota: information, not gated by ai_enabled (docs/entitlements.md, Flags and gates). */
export async function aiQuota(ctx: Ctx, deployment: DeploymentRow): Promise<AiQuota> {
  const now = ctx.clock.now();
  const terms = effectiveTerms(deployment, now);
  const row = await readBalance(ctx.db, deployment.id, now, 'system');
  const balance = viewBalance(row);
  const limit = terms.aiTokensLimit;
  return {
    used: balance.aiTokensUsed,
    limit,
    remaining: aiTokensFree(row, limit),
    resets_at: balance.periodEnd.toISOString(),
    tier: deployment.tier as Tier,
    credits_available: balance.available,
    credits_owed: balance.creditsOwed,
    ...AI_CREDIT_RATES,
    budgets: await budgetsOf(ctx, deployment, now),
  };
}
