import { randomUUID } from 'node:crypto';
import { type Ctx, actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';
import { requestHash } from '../../lib/canonical-json.js';
import { type DeductInput, type DeductResult, deduct, recordDeniedUsage } from '../credits/deduct.js';
import { RESERVATION_TTL_MS, expireReservations, holdCredits } from '../credits/reservations.js';
import { syncBalance, viewBalance } from '../credits/service.js';
import { monthlyRemaining } from '../credits/terms.js';
import { costOfTool } from './costs.js';
import { type DenialReason, decide, gate } from './decide.js';
import type { DeploymentState } from './state.js';

/** SPEC §4: an invocation id deduplicates for this long. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

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

export interface RecordResult {
  success: boolean;
  credits_used: number;
  credits_remaining: number | null;
  error: string | null;
  usage_id: string | null;
  invocation_id: string | null;
}

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

class Denied extends Error {}

async function reserve(
  ctx: Ctx,
  state: DeploymentState,
  cost: number,
  toolName: string,
  invocationId: string,
): Promise<CheckResult> {
  const now = ctx.clock.now();
  const expiresAt = new Date(now.getTime() + RESERVATION_TTL_MS);
  const deploymentId = state.deployment_id;
  try {
    return await ctx.db.transaction(async (tx) => {
      const inserted = await tx.query(
        `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, status, reserved_amount,
           reservation_expires_at, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 'reserved', $5, $6, $7, $7)
         ON CONFLICT (deployment_id, invocation_id) DO NOTHING RETURNING invocation_id`,
        [deploymentId, invocationId, state.organization_id, toolName, cost, expiresAt, now],
      );
      if (inserted.length === 0) {
        const existing = await lockInvocation(tx, deploymentId, invocationId);
        const fresh = existing.created_at.getTime() > now.getTime() - IDEMPOTENCY_WINDOW_MS;
        if (fresh && existing.tool_name !== toolName) throw reused();
        if (fresh && existing.status === 'reserved') {
          const balance = viewBalance(await syncBalance(tx, deploymentId, now, actorLabel(ctx.actor)));
          return allowedReservation(state.tier, existing.reserved_amount, balance.available, invocationId, existing.reservation_expires_at!);
        }
        if (fresh && (existing.status === 'recorded' || existing.status === 'refunded')) {
          throw new AppError('IDEMPOTENCY_KEY_REUSED', `Invocation ${invocationId} was already recorded`);
        }
        if (existing.status === 'reserved') await releaseHeld(tx, deploymentId, existing.reserved_amount, now);
        // Released, expired, denied, or older than the idempotency window: this is a new reservation.
        await tx.query(
          `UPDATE invocations SET status = 'reserved', tool_name = $3, reserved_amount = $4, reservation_expires_at = $5,
             request_hash = NULL, usage_id = NULL, response = NULL, created_at = $6, updated_at = $6
           WHERE deployment_id = $1 AND invocation_id = $2`,
          [deploymentId, invocationId, toolName, cost, expiresAt, now],
        );
      }
      let hold = await holdCredits(tx, deploymentId, cost, now);
      if (hold.stale) {
        await syncBalance(tx, deploymentId, now, actorLabel(ctx.actor));
        hold = await holdCredits(tx, deploymentId, cost, now);
      }
      if (!hold.held && (await expireReservations(tx, now, deploymentId)) > 0) {
        hold = await holdCredits(tx, deploymentId, cost, now);
      }
      if (!hold.held) throw new Denied();
      // The hold is the last statement before COMMIT: the balance row stays locked one round trip.
      return allowedReservation(state.tier, cost, hold.available, invocationId, expiresAt);
    });
  } catch (err) {
    if (err instanceof Denied) return denial('insufficient_credits', state.tier);
    throw err;
  }
}

function allowedReservation(
  tier: string,
  cost: number,
  available: number | null,
  invocationId: string,
  expiresAt: Date,
): CheckResult {
  return {
    allowed: true,
    reason: null,
    tier,
    credit_cost: cost,
    credits_available: available,
    invocation_id: invocationId,
    reservation_expires_at: expiresAt.toISOString(),
  };
}

async function releaseHeld(tx: Queryable, deploymentId: string, amount: number, now: Date): Promise<void> {
  await tx.query('UPDATE credit_balances SET reserved = reserved - $2, updated_at = $3 WHERE deployment_id = $1', [
    deploymentId,
    amount,
    now,
  ]);
}

export interface InvocationRow {
  deployment_id: string;
  invocation_id: string;
  organization_id: string;
  tool_name: string;
  request_hash: string | null;
  status: 'pending' | 'reserved' | 'recorded' | 'released' | 'expired' | 'refunded' | 'denied';
  reserved_amount: number;
  reservation_expires_at: Date | null;
  usage_id: string | null;
  response: RecordResult | null;
  created_at: Date;
  updated_at: Date;
}

async function lockInvocation(tx: Queryable, deploymentId: string, invocationId: string): Promise<InvocationRow> {
  const rows = await tx.query<InvocationRow>(
    'SELECT * FROM invocations WHERE deployment_id = $1 AND invocation_id = $2 FOR UPDATE',
    [deploymentId, invocationId],
  );
  return rows[0]!;
}

function reused(): AppError {
  return new AppError(
    'IDEMPOTENCY_KEY_REUSED',
    'This invocation id was already used with a different request; use a new id for a new call',
  );
}

export function remainingAfter(r: DeductResult): number | null {
  const monthly = monthlyRemaining(r.monthly_allocation, r.monthly_used);
  return monthly === null ? null : Math.max(0, monthly + r.purchased_balance - r.reserved);
}

/** record-usage (stdio) and usage (service): deduct once, keep a usage record either way. */
export async function recordUsage(
  ctx: Ctx,
  state: DeploymentState | null,
  missing: DenialReason,
  input: RecordInput,
): Promise<RecordOutcome> {
  const cost = await costOfTool(ctx, input.toolName);
  const now = ctx.clock.now();
  const denied = gate(state, missing);
  const base: Omit<DeductInput, 'recordFailure' | 'releaseReserved' | 'cost'> = {
    deploymentId: state?.deployment_id ?? '',
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
    const result = await deductWithRetry(ctx, ctx.db, { ...base, cost: cost.credits, releaseReserved: 0 }, (s.balance?.reserved ?? 0) > 0);
    return { replayed: false, result: toRecordResult(result, cost.credits, null) };
  }
  return recordIdempotent(ctx, s, { ...base, cost: cost.credits }, input);
}

/**
 * The deduction with its two slow paths: a stale row is synced first; when other reservations hold
 * credits, overdue ones are released before a refusal is final (the first attempt then keeps no
 * failed usage record, so a refusal is recorded once).
 */
export async function deductWithRetry(
  ctx: Ctx,
  db: Queryable,
  input: Omit<DeductInput, 'recordFailure'>,
  heldByOthers: boolean,
): Promise<DeductResult> {
  const reportToMeter = ctx.config.stripeMeterEventName !== undefined;
  const attempt = { ...input, reportToMeter, recordFailure: !heldByOthers };
  let result = await deduct(db, attempt);
  if (!result.found) {
    if (db === ctx.db) await ctx.db.transaction((tx) => syncBalance(tx, input.deploymentId, input.now, input.actor));
    else await syncBalance(db, input.deploymentId, input.now, input.actor);
    result = await deduct(db, attempt);
    if (!result.found) throw new Error(`balance of deployment ${input.deploymentId} could not be brought up to date`);
  }
  if (!result.deducted && heldByOthers) {
    await expireReservations(db, input.now, input.deploymentId);
    result = await deduct(db, { ...input, reportToMeter, recordFailure: true });
  }
  return result;
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
  base: Omit<DeductInput, 'recordFailure' | 'releaseReserved'>,
  input: RecordInput,
): Promise<RecordOutcome> {
  const invocationId = input.invocationId!;
  const hash = requestHash({ tool_name: input.toolName, mcp_user_id: input.mcpUserId ?? null, metadata: input.metadata ?? null });
  const now = base.now;
  // One transaction: a concurrent request with the same id waits on the invocation row and then replays.
  return ctx.db.transaction(async (tx) => {
    const inserted = await tx.query(
      `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6)
       ON CONFLICT (deployment_id, invocation_id) DO NOTHING RETURNING invocation_id`,
      [state.deployment_id, invocationId, state.organization_id, input.toolName, hash, now],
      'invocation_insert',
    );
    let cost = base.cost;
    let releaseReserved = 0;
    if (inserted.length === 0) {
      const existing = await lockInvocation(tx, state.deployment_id, invocationId);
      const fresh = existing.created_at.getTime() > now.getTime() - IDEMPOTENCY_WINDOW_MS;
      if (!fresh) {
        if (existing.status === 'reserved') await releaseHeld(tx, state.deployment_id, existing.reserved_amount, now);
      } else if (existing.status === 'recorded' || existing.status === 'refunded') {
        if (existing.request_hash !== hash) throw reused();
        return { replayed: true, result: existing.response! };
      } else if (existing.tool_name !== input.toolName) {
        throw reused();
      } else if (existing.status === 'reserved') {
        // The price was fixed when the credits were held.
        cost = existing.reserved_amount;
        releaseReserved = existing.reserved_amount;
      }
      // A held reservation of this call (the common path) needs no reset: the deduction marks it recorded.
      if (!(fresh && existing.status === 'reserved')) {
        await tx.query(
          `UPDATE invocations SET status = 'pending', tool_name = $3, request_hash = $4, updated_at = $5,
             created_at = CASE WHEN created_at > $6 THEN created_at ELSE $5 END
           WHERE deployment_id = $1 AND invocation_id = $2`,
          [state.deployment_id, invocationId, input.toolName, hash, now, new Date(now.getTime() - IDEMPOTENCY_WINDOW_MS)],
        );
      }
    }
    const heldByOthers = (state.balance?.reserved ?? 0) - releaseReserved > 0;
    const deducted = await deductWithRetry(ctx, tx, { ...base, cost, releaseReserved, recordInvocation: { requestHash: hash } }, heldByOthers);
    const result = toRecordResult(deducted, cost, invocationId);
    // A deduction marked the invocation recorded with this answer itself (DEDUCT_SQL's inv step).
    // A refusal is not final: the same id may be recorded once the balance allows it.
    if (!deducted.deducted) {
      await tx.query(`UPDATE invocations SET status = $3, updated_at = $4 WHERE deployment_id = $1 AND invocation_id = $2`, [
        state.deployment_id,
        invocationId,
        releaseReserved === 0 ? 'denied' : 'reserved',
        now,
      ]);
    }
    return { replayed: false, result };
  });
}
