import { randomUUID } from 'node:crypto';
import { type Ctx, actorLabel } from '../../context.js';
import { requestHash } from '../../lib/canonical-json.js';
import {
  apiKeyOf,
  budgetRefusal,
  type DeductResult,
  type PaymentRequired,
  recordDeniedUsage,
  recordUsage as recordCreditsUsage,
  remainingAfter,
  reserveInvocation,
  type StoredRecordAnswer,
  type UsageRequest,
} from '../credits/index.js';
import { topUpUrl } from '../billing/top-up-link.js';
import { costOfTool } from './costs.js';
import { type DenialReason, decide, gate } from './decide.js';
import type { DeploymentState } from './state.js';


export interface CheckInput {
  toolName: string;
  reserve?: boolean | undefined;
  invocationId?: string | undefined;
  /** The call's end user (docs/budgets.md): counted by end-user budgets. */
  endUserId?: string | null | undefined;
}

export interface CheckResult {
  allowed: boolean;
  reason: DenialReason | null;
  tier: string | null;
  credit_cost: number;
  credits_available: number | null;
  invocation_id?: string;
  reservation_expires_at?: string;
  payment_required?: PaymentRequired;
}

export interface RecordInput {
  toolName: string;
  metadata?: unknown;
  mcpUserId?: string | null | undefined;
  invocationId?: string | undefined;
}

/** The answer of record-usage; a recorded invocation keeps it for replays (credits/invocations.ts). */
export type RecordResult = StoredRecordAnswer;

export interface RecordOutcome {
  result: RecordResult;
  replayed: boolean;
}

function denial(reason: DenialReason, tier: string | null): CheckResult {
  return { allowed: false, reason, tier, credit_cost: 0, credits_available: null };
}

/**
 * What a refusal for credits tells the caller (docs/metering.md, Denials): the price and what is
 * spendable, and the top-up link when billing is available for the deployment (docs/billing.md, "Top-up link").
 */
function creditsRefusal(ctx: Ctx, state: DeploymentState, cost: number, available: number | null): PaymentRequired {
  const url = topUpUrl(ctx, state.deployment_id, state);
  return { reason: 'insufficient_credits', credits_required: cost, credits_available: available, ...(url === undefined ? {} : { top_up_url: url }) };
}

function withPayment<T extends object>(answer: T, payment: PaymentRequired): T {
  return { ...answer, payment_required: payment };
}

/** check-entitlement of both modes; with reserve:true an allowed answer also holds the cost for 5 minutes. */
export async function checkEntitlement(
  ctx: Ctx,
  state: DeploymentState | null,
  missing: DenialReason,
  input: CheckInput,
): Promise<CheckResult> {
  const cost = await costOfTool(ctx, input.toolName);
  if (!input.reserve) {
    const decision = await decide(ctx, state, missing, cost.credits, { apiKeyId: apiKeyOf(ctx), endUserId: input.endUserId ?? null, toolName: input.toolName });
    if (decision.budget) return { ...denial('budget_exceeded', decision.tier), payment_required: budgetRefusal(decision.budget, cost.credits, null) };
    if (!decision.allowed && decision.reason === 'insufficient_credits' && decision.state) {
      return withPayment(denial('insufficient_credits', decision.tier), creditsRefusal(ctx, decision.state, cost.credits, decision.available ?? null));
    }
    if (!decision.allowed) return denial(decision.reason!, decision.tier);
    return { allowed: true, reason: null, tier: decision.tier, credit_cost: cost.credits, credits_available: decision.available };
  }
  const denied = gate(state, missing);
  if (denied) return denial(denied.reason!, denied.tier);
  return reserve(ctx, state!, cost.credits, input.toolName, input.invocationId ?? randomUUID(), input.endUserId ?? null);
}

async function reserve(
  ctx: Ctx,
  state: DeploymentState,
  cost: number,
  toolName: string,
  invocationId: string,
  endUserId: string | null,
): Promise<CheckResult> {
  const outcome = await reserveInvocation(ctx, state, { cost, toolName, invocationId, endUserId });
  ctx.metrics.reservations.inc({ outcome: outcome.held ? 'held' : 'refused' });
  if (!outcome.held && outcome.budget) return { ...denial('budget_exceeded', state.tier), payment_required: budgetRefusal(outcome.budget, cost, null) };
  // The refused hold rolled back, with what it read: the spendable credits are not known here.
  if (!outcome.held) return withPayment(denial('insufficient_credits', state.tier), creditsRefusal(ctx, state, cost, null));
  return {
    allowed: true,
    reason: null,
    tier: state.tier,
    credit_cost: outcome.amount,
    credits_available: outcome.available,
    invocation_id: invocationId,
    reservation_expires_at: outcome.expiresAt.toISOString(),
  };
}

/** record-usage (stdio) and usage (service): deduct once, keep a usage record either way. */
export async function recordUsage(
  ctx: Ctx,
  state: DeploymentState | null,
  missing: DenialReason,
  input: RecordInput,
): Promise<RecordOutcome> {
  const outcome = await recordOnce(ctx, state, missing, input);
  // A replay deducted nothing now: counted when it was first recorded.
  if (!outcome.replayed) {
    const { result } = outcome;
    if (result.success) {
      ctx.metrics.deductions.inc({ source: 'mcp' });
      ctx.metrics.creditsDeducted.inc({ source: 'mcp' }, result.credits_used);
    } else {
      ctx.metrics.deductionRefusals.inc({ source: 'mcp', reason: result.error ?? 'unknown' });
    }
  }
  return outcome;
}

async function recordOnce(
  ctx: Ctx,
  state: DeploymentState | null,
  missing: DenialReason,
  input: RecordInput,
): Promise<RecordOutcome> {
  const cost = await costOfTool(ctx, input.toolName);
  const invocationId = input.invocationId ?? null;
  const usage: UsageRequest = {
    deploymentId: state?.deployment_id ?? '',
    organizationId: state?.organization_id ?? '',
    cost: cost.credits,
    now: ctx.clock.now(),
    action: cost.action,
    toolName: input.toolName,
    mcpUserId: input.mcpUserId ?? null,
    metadata: input.metadata ?? null,
    actor: actorLabel(ctx.actor),
  };
  const denied = gate(state, missing);
  if (denied) {
    let usageId: string | null = null;
    if (state) usageId = await recordDeniedUsage(ctx.db, { ...usage, invocationId, reason: denied.reason! });
    return {
      replayed: false,
      result: { success: false, credits_used: 0, credits_remaining: null, error: denied.reason, usage_id: usageId, invocation_id: invocationId },
    };
  }
  const idempotency =
    invocationId === null
      ? undefined
      : { invocationId, requestHash: requestHash({ tool_name: input.toolName, mcp_user_id: input.mcpUserId ?? null, metadata: input.metadata ?? null }) };
  const recorded = await recordCreditsUsage(ctx, usage, idempotency);
  if (recorded.replayed) return { replayed: true, result: recorded.answer };
  return { replayed: false, result: toRecordResult(ctx, state!, recorded.result, recorded.cost, invocationId) };
}

function toRecordResult(ctx: Ctx, state: DeploymentState, r: DeductResult, cost: number, invocationId: string | null): RecordResult {
  const result: RecordResult = {
    success: r.deducted,
    credits_used: r.deducted ? cost : 0,
    credits_remaining: remainingAfter(r),
    error: r.deducted ? null : r.budget ? 'budget_exceeded' : 'insufficient_credits',
    usage_id: r.usageId,
    invocation_id: invocationId,
  };
  if (!r.deducted && r.budget) result.payment_required = budgetRefusal(r.budget, cost, remainingAfter(r));
  else if (!r.deducted) result.payment_required = creditsRefusal(ctx, state, cost, remainingAfter(r));
  return result;
}
