import { MODEL_CLASSES, type ModelClass } from '../../config.js';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { aiQuotaExceeded, aiTokensFree, type AiUsageResult, effectiveTerms, purchasedFloor, readBalance, settleAiTokens } from '../credits/index.js';
import type { DeploymentRow } from '../deployments/service.js';
import { effectiveFlags } from '../entitlements/flags.js';
import { classesByNormalisedName, normaliseModel } from '../ai/models.js';

export { creditsForTokens } from '../credits/index.js';
export type { AiUsageResult } from '../credits/index.js';

/**
 * The AI token quota (docs/limits.md), the gate: which model class a model is, whether a deployment may call AI at
 * all. The money (holds, settles, usage records) is written by credits/ai-usage.ts.
 */

const byNormalisedName = new WeakMap<Record<string, ModelClass>, Map<string, ModelClass>>();

/** AI_MODEL_CLASSES by normalised name, built once per map (config.ts refuses keys that collide). */
function classesOf(classes: Record<string, ModelClass>): Map<string, ModelClass> {
  let map = byNormalisedName.get(classes);
  if (!map) {
    map = classesByNormalisedName(classes, MODEL_CLASSES).byName;
    byNormalisedName.set(classes, map);
  }
  return map;
}

/**
 * The class of a model (docs/ai-proxy.md, Model classes): the entry of its exact raw name; else of its
 * normalised name (`openai/O3:latest` → `o3`, `ft:gpt-4o:org::id` → `gpt-4o`, `gpt-4o-2024-08-06` →
 * `gpt-4o`; ai/models.ts), the map's keys normalised alike; else the longest listed name it extends
 * with a `-…` variant suffix (`o1-preview` → `o1`; a tagged build `llama3.1:405b` is not a variant of
 * `llama3.1`); else AI_DEFAULT_MODEL_CLASS (premium unless set). Otherwise a caller could spell an
 * expensive model another way and pay a cheaper rate.
 */
export function modelClassOf(ctx: Pick<Ctx, 'config'>, raw: string): ModelClass {
  const listed = ctx.config.aiModelClasses;
  // Own keys only: a model called `constructor` is not a class.
  if (Object.hasOwn(listed, raw)) return listed[raw]!;
  const classes = classesOf(listed);
  const model = normaliseModel(raw);
  const own = classes.get(model);
  if (own !== undefined) return own;
  let best: string | undefined;
  for (const name of classes.keys()) {
    if (model.startsWith(`${name}-`) && (best === undefined || name.length > best.length)) best = name;
  }
  return best !== undefined ? classes.get(best)! : ctx.config.aiDefaultModelClass;
}

/** The 403 `feature_disabled` for a false flag, with its upgrade link (docs/entitlements.md, Flags and gates). */
export function featureDisabled(ctx: Pick<Ctx, 'config'>, feature: string): AppError {
  return new AppError('FEATURE_NOT_AVAILABLE', `The ${feature} feature is not available on this deployment's tier`, {
    upgrade_url: `${ctx.config.publicBaseUrl}/billing/upgrade`,
  });
}

/** 403 unless the deployment is active with `ai_enabled` (docs/entitlements.md, Flags and gates). */
export function assertAiEnabled(ctx: Pick<Ctx, 'config'>, deployment: { status: string; tier: string; flag_overrides: unknown }): void {
  if (deployment.status !== 'active' || !effectiveFlags(deployment.tier, deployment.flag_overrides).ai_enabled) {
    throw featureDisabled(ctx, 'AI');
  }
}

/**
 * A cheap look before an AI call: `ai_enabled`, and quota tokens or purchased credits left. Otherwise
 * 429 AI_QUOTA_EXCEEDED, a refusal that waiting cannot cure (credits/ai-usage.ts aiQuotaExceeded). The hold
 * (credits/ai-usage.ts) is what decides.
 */
export async function assertAiAvailable(ctx: Ctx, deployment: DeploymentRow): Promise<void> {
  assertAiEnabled(ctx, deployment);
  const now = ctx.clock.now();
  const limit = effectiveTerms(deployment, now).aiTokensLimit;
  const balance = await readBalance(ctx.db, deployment.id, now, 'system');
  // A debt left by an over-report keeps every AI call out until credits added pay it (credits/owed.ts).
  if (balance.credits_owed > 0) throw aiQuotaExceeded(ctx, limit, balance.period_end, now, '', balance.credits_owed);
  if (limit === null) return;
  if ((aiTokensFree(balance, limit) ?? 0) > 0 || purchasedFloor(balance) > 0) return;
  throw aiQuotaExceeded(ctx, limit, balance.period_end, now);
}

export interface AiUsageInput {
  inputTokens: number;
  outputTokens: number;
  model: string;
  /** Makes the accounting idempotent per deployment (the provider's response id, say). */
  requestId?: string | undefined;
}

/** Account a call's tokens after the fact, without a hold (a caller that metered its own AI call). */
export function accountAiTokens(ctx: Ctx, deployment: Pick<DeploymentRow, 'id' | 'organization_id'>, input: AiUsageInput): Promise<AiUsageResult> {
  return settleAiTokens(ctx, deployment, { ...input, modelClass: modelClassOf(ctx, input.model) });
}
