import { randomUUID } from 'node:crypto';
import { type Ctx, actorLabel } from '../../context.js';
import { requestHash } from '../../lib/canonical-json.js';
import type { BatchDeduction } from '../credits/batcher.js';
import { type DeductResult, recordDeniedUsage, remainingAfter } from '../credits/deduct.js';
import { recordInvocation, reserveInvocation, type StoredRecordAnswer } from '../credits/invocations.js';
import { costOfTool } from './costs.js';
import { type DenialReason, decide, gate } from './decide.js';
import type { DeploymentState } from './state.js';


export interface CheckInput {
  toolName: string;
  reserve?: boolean | undefined;
  invocationId?: string | undefined;
}

export interface CheckResult {
  allowed: boolean;
  reason: DenialReason | null;
  tier: string | null;
  credit_cost: number;
  credits_available: number | null;
  invocation_id?: string;
  reservation_expires_at?: string;
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

/** check-entitlement of both modes; with reserve:true an allowed answer also holds the cost for 5 minutes. */
export async function checkEntitlement(
  ctx: Ctx,
  state: DeploymentState | null,
  missing: DenialReason,
  input: CheckInput,
): Promise<CheckResult> {
  const cost = await costOfTool(ctx, input.toolName);
  if (!input.reserve) {
    const decision = await decide(ctx, state, missing, cost.credits);
    if (!decision.allowed) return denial(decision.reason!, decision.tier);
    return { allowed: true, reason: null, tier: decision.tier, credit_cost: cost.credits, credits_available: decision.available };
  }
  const denied = gate(state, missing);
  if (denied) return denial(denied.reason!, denied.tier);
  return reserve(ctx, state!, cost.credits, input.toolName, input.invocationId ?? randomUUID());
}

async function reserve(ctx: Ctx, state: DeploymentState, cost: number, toolName: string, invocationId: string): Promise<CheckResult> {
  const outcome = await reserveInvocation(ctx, state, { cost, toolName, invocationId });
  ctx.metrics.reservations.inc({ outcome: outcome.held ? 'held' : 'refused' });
  if (!outcome.held) return denial('insufficient_credits', state.tier);
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
  const now = ctx.clock.now();
  const denied = gate(state, missing);
  // Every field a deduction takes, set once: adding a field to a spread object is V8's slow path
  // (about 2 µs on Node 20), overwriting one is not.
  const base: BatchDeduction = {
    deploymentId: state?.deployment_id ?? '',
    organizationId: state?.organization_id ?? '',
    cost: cost.credits,
    releaseReserved: 0,
    claimInvocation: undefined,
    now,
    action: cost.action,
    toolName: input.toolName,
    mcpUserId: input.mcpUserId ?? null,
    metadata: input.metadata ?? null,
    actor: actorLabel(ctx.actor),
    invocationId: input.invocationId ?? null,
  };
  if (denied) {
    let usageId: string | null = null;
    if (state) usageId = await recordDeniedUsage(ctx.db, { ...base, organizationId: state.organization_id, reason: denied.reason! });
    return {
      replayed: false,
      result: { success: false, credits_used: 0, credits_remaining: null, error: denied.reason, usage_id: usageId, invocation_id: base.invocationId },
    };
  }
  const s = state!;
  if (input.invocationId === undefined) {
    const outcome = await ctx.deductions.submit(base);
    if (!outcome.claimed) throw new Error('a deduction without an invocation id claims nothing');
    return { replayed: false, result: toRecordResult(outcome.result, cost.credits, null) };
  }
  return recordIdempotent(ctx, s, base, input);
}

function toRecordResult(r: DeductResult, cost: number, invocationId: string | null): RecordResult {
  return {
    success: r.deducted,
    credits_used: r.deducted ? cost : 0,
    credits_remaining: remainingAfter(r),
    error: r.deducted ? null : 'insufficient_credits',
    usage_id: r.usageId,
    invocation_id: invocationId,
  };
}

async function recordIdempotent(
  ctx: Ctx,
  state: DeploymentState,
  base: BatchDeduction,
  input: RecordInput,
): Promise<RecordOutcome> {
  const invocationId = input.invocationId!;
  const hash = requestHash({ tool_name: input.toolName, mcp_user_id: input.mcpUserId ?? null, metadata: input.metadata ?? null });
  // The common cases, a fresh id and the record of a held reservation (which spends it at the price it
  // was held for), go through the group commit; any other id seen before (a retry, a reuse, an overdue
  // reservation) takes the full path, which replays, refuses or starts over.
  const batched = await ctx.deductions.submit({ ...base, invocationId, claimInvocation: { requestHash: hash } });
  if (batched.claimed) return { replayed: false, result: toRecordResult(batched.result, batched.cost, invocationId) };
  // The balance this instance holds may be a cached copy: assume others hold credits, so a refusal
  // first releases expired holds (one more statement, on a refusal only).
  const recorded = await recordInvocation(
    ctx,
    { ...state, reservedByAll: Number.MAX_SAFE_INTEGER },
    { ...base, invocationId },
    hash,
  );
  if (recorded.replayed) return { replayed: true, result: recorded.answer };
  return { replayed: false, result: toRecordResult(recorded.deducted, recorded.cost, invocationId) };
}
