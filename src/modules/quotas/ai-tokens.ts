import type { Ctx } from '../../context.js';
import type { ModelClass } from '../../config.js';
import { actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, ValidationError } from '../../errors.js';
import { type BalanceRow, purchasedFloor as spendablePurchased, readBalance, syncBalance } from '../credits/service.js';
import { appendLedger } from '../credits/ledger.js';
import { enqueueMeterEvent } from '../credits/meter-outbox.js';
import { effectiveTerms, monthlyRemaining } from '../credits/terms.js';
import type { DeploymentRow } from '../deployments/service.js';
import { effectiveFlags } from '../entitlements/flags.js';
import { AI_CREDIT_RATES } from '../entitlements/tiers.js';
import { emitThresholds } from './thresholds.js';

/**
 * SPEC §6 AI token quota: input + output tokens counted per period against the tier's (or the
 * override's) limit; tokens past the limit are paid from purchased credits at the model class's rate
 * per 1,000 tokens, rounded up per accounted call; with neither left, AI calls are refused with 429.
 * The AI proxy calls `assertAiAvailable` before it calls the provider and `accountAiTokens` after.
 */

const RATE: Record<ModelClass, number> = {
  standard: AI_CREDIT_RATES.credits_per_standard,
  advanced: AI_CREDIT_RATES.credits_per_advanced,
  premium: AI_CREDIT_RATES.credits_per_premium,
};

export function modelClassOf(ctx: Pick<Ctx, 'config'>, model: string): ModelClass {
  return ctx.config.aiModelClasses[model] ?? ctx.config.aiDefaultModelClass;
}

/** Credits for tokens past the limit: rate per 1,000 tokens, rounded up. */
export function creditsForTokens(tokens: number, cls: ModelClass): number {
  return tokens <= 0 ? 0 : Math.ceil((tokens * RATE[cls]) / 1000);
}

/** The seed's 403 for a false flag, with the upgrade link of SPEC §5. */
export function featureDisabled(ctx: Pick<Ctx, 'config'>, feature: string): AppError {
  return new AppError('FEATURE_NOT_AVAILABLE', `The ${feature} feature is not available on this deployment's tier`, {
    upgrade_url: `${ctx.config.publicBaseUrl}/billing/upgrade`,
  });
}

/**
 * Before an AI call: the deployment must be active with `ai_enabled`, and have tokens left in the period
 * or purchased credits to pay for more. Otherwise 429 AI_QUOTA_EXCEEDED with Retry-After up to the reset.
 */
export async function assertAiAvailable(ctx: Ctx, deployment: DeploymentRow): Promise<void> {
  if (deployment.status !== 'active' || !effectiveFlags(deployment.tier, deployment.flag_overrides).ai_enabled) {
    throw featureDisabled(ctx, 'AI');
  }
  const now = ctx.clock.now();
  const limit = effectiveTerms(deployment, now).aiTokensLimit;
  if (limit === null) return;
  const balance = await readBalance(ctx.db, deployment.id, now, 'system');
  if (balance.ai_tokens_used < limit || spendablePurchased(balance) > 0) return;
  const seconds = Math.max(1, Math.ceil((balance.period_end.getTime() - now.getTime()) / 1000));
  throw new AppError(
    'AI_QUOTA_EXCEEDED',
    `The AI token quota of ${limit} tokens for this period is used up and no purchased credits are left; it resets at ${balance.period_end.toISOString()}`,
    { quota_exceeded: true, upgrade_url: `${ctx.config.publicBaseUrl}/billing/upgrade`, resets_at: balance.period_end.toISOString() },
    { 'retry-after': String(seconds) },
  );
}

export interface AiUsageInput {
  inputTokens: number;
  outputTokens: number;
  model: string;
  /** Makes the accounting idempotent per deployment (the provider's response id, say). */
  requestId?: string | undefined;
}

export interface AiUsageResult {
  usageId: string;
  tokens: number;
  tokensOverLimit: number;
  modelClass: ModelClass;
  /** Credits the tokens past the limit cost. */
  creditsDue: number;
  /** Credits taken from purchased credits (less than due only when they ran out during the call). */
  creditsCharged: number;
  used: number;
  limit: number | null;
  remaining: number | null;
  resetsAt: string;
  /** True when the same requestId was accounted before; nothing was counted again. */
  replayed: boolean;
}

interface AiUsageRow {
  id: string;
  quantity: number;
  metadata: { tokens: number; tokens_over_limit: number; model_class: ModelClass; credits_due: number };
}

/**
 * After an AI call: count its tokens and pay for the part past the limit, in one transaction under the
 * balance row's lock (which also rolls the period, once, whichever instance comes first). The ledger
 * row, the usage record and any `quota.threshold` events are written in the same transaction.
 */
export async function accountAiTokens(ctx: Ctx, deployment: Pick<DeploymentRow, 'id' | 'organization_id'>, input: AiUsageInput): Promise<AiUsageResult> {
  for (const field of ['inputTokens', 'outputTokens'] as const) {
    if (!Number.isSafeInteger(input[field]) || input[field] < 0) {
      throw new ValidationError(`${field} must be a whole number of tokens, 0 or more`, [{ field, message: 'must be an integer ≥ 0' }]);
    }
  }
  const now = ctx.clock.now();
  const actor = actorLabel(ctx.actor);
  const modelClass = modelClassOf(ctx, input.model);
  const tokens = input.inputTokens + input.outputTokens;
  return ctx.db.transaction(async (tx) => {
    const before = await syncBalance(tx, deployment.id, now, actor);
    const terms = await termsOf(tx, deployment.id, now);
    const limit = terms.aiTokensLimit;
    const view = (used: number) => ({
      used,
      limit,
      remaining: limit === null ? null : Math.max(0, limit - used),
      resetsAt: before.period_end.toISOString(),
    });
    if (input.requestId !== undefined) {
      const seen = await tx.query<AiUsageRow>(
        `SELECT id, quantity, metadata FROM usage_records
         WHERE deployment_id = $1 AND metric = 'ai_tokens' AND invocation_id = $2`,
        [deployment.id, input.requestId],
      );
      const row = seen[0];
      if (row) {
        return {
          usageId: row.id,
          tokens: row.metadata.tokens,
          tokensOverLimit: row.metadata.tokens_over_limit,
          modelClass: row.metadata.model_class,
          creditsDue: row.metadata.credits_due,
          creditsCharged: row.quantity,
          ...view(before.ai_tokens_used),
          replayed: true,
        };
      }
    }
    const usedBefore = before.ai_tokens_used;
    const usedAfter = usedBefore + tokens;
    const overLimit = limit === null ? 0 : Math.max(0, usedAfter - Math.max(limit, usedBefore));
    const creditsDue = creditsForTokens(overLimit, modelClass);
    const charged = Math.min(creditsDue, spendablePurchased(before));
    const updated = await tx.query<BalanceRow>(
      `UPDATE credit_balances SET ai_tokens_used = $2, purchased_balance = purchased_balance - $3,
         purchased_consumed = purchased_consumed + $3, updated_at = $4
       WHERE deployment_id = $1 RETURNING *`,
      [deployment.id, usedAfter, charged, now],
    );
    const after = updated[0]!;
    let ledgerId: number | null = null;
    const usageId = crypto.randomUUID();
    if (charged > 0) {
      ledgerId = await appendLedger(tx, {
        organizationId: deployment.organization_id,
        deploymentId: deployment.id,
        kind: 'deduct',
        amount: -charged,
        monthlyDelta: 0,
        purchasedDelta: -charged,
        monthlyAfter: monthlyRemaining(after.monthly_allocation, after.monthly_used),
        purchasedAfter: after.purchased_balance,
        actor,
        usageId,
        reason: `AI tokens past the limit: ${overLimit} ${modelClass} tokens`,
        at: now,
      });
    }
    await tx.query(
      `INSERT INTO usage_records (id, organization_id, deployment_id, metric, quantity, tool_name, metadata, success, error,
         ledger_id, invocation_id, purchased_taken, period_start, "timestamp")
       VALUES ($1, $2, $3, 'ai_tokens', $4, $5, $6, true, $7, $8, $9, $4, $10, $11)`,
      [
        usageId,
        deployment.organization_id,
        deployment.id,
        charged,
        input.model,
        JSON.stringify({
          input_tokens: input.inputTokens,
          output_tokens: input.outputTokens,
          tokens,
          tokens_over_limit: overLimit,
          model_class: modelClass,
          credits_due: creditsDue,
          credits_short: creditsDue - charged,
        }),
        charged < creditsDue ? 'insufficient_credits' : null,
        ledgerId,
        input.requestId ?? null,
        after.period_start,
        now,
      ],
    );
    if (charged > 0 && ctx.config.stripeMeterEventName !== undefined) {
      await enqueueMeterEvent(tx, { usageId, organizationId: deployment.organization_id, deploymentId: deployment.id, value: charged, at: now });
    }
    await emitThresholds(tx, {
      organizationId: deployment.organization_id,
      deploymentId: deployment.id,
      quota: 'ai_tokens',
      before: usedBefore,
      after: usedAfter,
      limit,
      periodStart: after.period_start,
      periodEnd: after.period_end,
      now,
    });
    return {
      usageId,
      tokens,
      tokensOverLimit: overLimit,
      modelClass,
      creditsDue,
      creditsCharged: charged,
      ...view(usedAfter),
      replayed: false,
    };
  });
}

async function termsOf(tx: Queryable, deploymentId: string, now: Date) {
  const rows = await tx.query<DeploymentRow>('SELECT * FROM deployments WHERE id = $1', [deploymentId]);
  return effectiveTerms(rows[0]!, now);
}

