import { forgetBalance } from './balance-cache.js';
import type { Ctx } from '../../context.js';
import { actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';
import { giveBack } from './budgets.js';
import { applyOne } from './engine/plan.js';
import type { BatchDeduction } from './engine/types.js';
import { IDEMPOTENCY_WINDOW_MS, RESERVATION_TTL_MS } from './reservations.js';

export { IDEMPOTENCY_WINDOW_MS };
import { type DeductResult, remainingAfter } from './rules.js';
import { syncBalance, viewBalance } from './service.js';

/**
 * Invocations (docs/metering.md, Reservations and Idempotency): the idempotency and reservation rows of metered calls. Written only here
 * (docs/adr/0003-credits-owns-money.md); metering decides and shapes answers, this module keeps the
 * rows and the balance moving together.
 */


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
  budget_windows: string[] | null;
  response: StoredRecordAnswer | null;
  created_at: Date;
  updated_at: Date;
}

/** The answer a recorded invocation keeps for replays (written with the deduction, credits/engine/write.ts). */
export interface StoredRecordAnswer {
  success: boolean;
  credits_used: number;
  credits_remaining: number | null;
  error: string | null;
  usage_id: string | null;
  invocation_id: string | null;
  /** A refusal by a budget (docs/budgets.md): which one, and when its window ends. Never stored for a replay (a refused id is not recorded). */
  payment_required?: PaymentRequired;
}

/** What a refusal that money could lift says (docs/budgets.md; a budget's refusal names the budget and when it resets). */
export interface PaymentRequired {
  reason: 'insufficient_credits' | 'budget_exceeded';
  credits_required: number;
  credits_available: number | null;
  budget_id?: string;
  resets_at?: string;
  /** A refusal for credits, when billing is available: the top-up page (docs/billing.md, "Top-up link"). */
  top_up_url?: string;
}

/** The `payment_required` of a budget's refusal of a charge of `cost`. */
export function budgetRefusal(budget: { id: string; resetsAt: Date }, cost: number, available: number | null): PaymentRequired {
  return { reason: 'budget_exceeded', credits_required: cost, credits_available: available, budget_id: budget.id, resets_at: budget.resetsAt.toISOString() };
}

async function lockInvocation(tx: Queryable, deploymentId: string, invocationId: string): Promise<InvocationRow> {
  const rows = await tx.query<InvocationRow>(
    'SELECT * FROM invocations WHERE deployment_id = $1 AND invocation_id = $2 FOR UPDATE',
    [deploymentId, invocationId],
  );
  return rows[0]!;
}

export function reusedInvocation(): AppError {
  return new AppError(
    'IDEMPOTENCY_KEY_REUSED',
    'This invocation id was already used with a different request; use a new id for a new call',
  );
}

/** A lapsed hold of an id that starts over: its credits go back, and its budget windows' count with them. */
async function releaseHeld(tx: Queryable, existing: InvocationRow, now: Date): Promise<void> {
  await tx.query('UPDATE credit_balances SET reserved = reserved - $2, updated_at = $3 WHERE deployment_id = $1', [
    existing.deployment_id,
    existing.reserved_amount,
    now,
  ]);
  await giveBack(tx, existing.budget_windows, existing.reserved_amount, now);
}

export type ReserveOutcome =
  | { held: true; amount: number; available: number | null; expiresAt: Date }
  | { held: false; budget?: { id: string; resetsAt: Date } | undefined };

/** The API key a call was authenticated by, for its `api_key` budgets (docs/budgets.md). */
export const apiKeyOf = (ctx: Pick<Ctx, 'actor'>): string | null => (ctx.actor.type === 'api_key' ? ctx.actor.apiKeyId : null);

/** A refused hold: its transaction rolls back, and the refusal says which budget refused it, if one did. */
class Denied extends Error {
  constructor(readonly budget: { id: string; resetsAt: Date } | undefined) {
    super('refused');
  }
}

/**
 * Hold `cost` credits for an invocation for 5 minutes (check-entitlement with reserve:true). A fresh
 * reservation of the same id answers what it holds while the hold runs; a recorded one is 422; a
 * lapsed, old or finished one starts over. The hold goes through the money engine under the balance
 * row's lock, so reservations never promise more than the balance.
 */
export async function reserveInvocation(
  ctx: Ctx,
  deployment: { deployment_id: string; organization_id: string },
  input: { cost: number; toolName: string; invocationId: string; endUserId?: string | null },
): Promise<ReserveOutcome> {
  const { cost, toolName, invocationId } = input;
  const now = ctx.clock.now();
  const expiresAt = new Date(now.getTime() + RESERVATION_TTL_MS);
  const deploymentId = deployment.deployment_id;
  const request: BatchDeduction = {
    deploymentId,
    organizationId: deployment.organization_id,
    invocationId,
    toolName,
    cost,
    hold: { expiresAt },
    releaseReserved: 0,
    action: 'reservation',
    mcpUserId: input.endUserId ?? null,
    metadata: null,
    actor: actorLabel(ctx.actor),
    apiKeyId: apiKeyOf(ctx),
    now,
  };
  // A fresh id goes through the queue (credits/engine/queue.ts): held or refused in arrival order with
  // the deductions of its batch, in one commit with them. An id seen before takes the path below.
  const batched = await ctx.deductions.submit(request);
  if (batched.claimed) {
    const r = batched.result;
    return r.deducted ? { held: true, amount: cost, available: remainingAfter(r), expiresAt } : { held: false, budget: r.budget };
  }
  try {
    return await ctx.db.transaction(async (tx): Promise<ReserveOutcome> => {
      const inserted = await tx.query(
        `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, status, reserved_amount,
           reservation_expires_at, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 'reserved', $5, $6, $7, $7)
         ON CONFLICT (deployment_id, invocation_id) DO NOTHING RETURNING invocation_id`,
        [deploymentId, invocationId, deployment.organization_id, toolName, cost, expiresAt, now],
      );
      if (inserted.length === 0) {
        const existing = await lockInvocation(tx, deploymentId, invocationId);
        const fresh = existing.created_at.getTime() > now.getTime() - IDEMPOTENCY_WINDOW_MS;
        if (fresh && existing.tool_name !== toolName) throw reusedInvocation();
        // A hold still running is answered as it stands; one past its 5 minutes holds nothing any more
        // (the sweep gives it back when it comes): it is released below and a new hold is taken.
        const holding = existing.status === 'reserved' && existing.reservation_expires_at!.getTime() > now.getTime();
        if (fresh && holding) {
          const balance = viewBalance(await syncBalance(tx, deploymentId, now, actorLabel(ctx.actor)));
          return { held: true, amount: existing.reserved_amount, available: balance.available, expiresAt: existing.reservation_expires_at! };
        }
        if (fresh && (existing.status === 'recorded' || existing.status === 'refunded')) {
          // `invocation_status` tells a paid call (recorded: running it again is a retry the record will
          // replay) from one whose charge was refunded (running it again is a new call to pay for).
          throw new AppError(
            'IDEMPOTENCY_KEY_REUSED',
            existing.status === 'refunded'
              ? `Invocation ${invocationId} was recorded and then refunded: a new run is a new call, with a new invocation_id`
              : `Invocation ${invocationId} was already recorded`,
            { invocation_status: existing.status },
          );
        }
        if (existing.status === 'reserved') await releaseHeld(tx, existing, now);
        // Released, expired, denied, or older than the idempotency window: this is a new reservation.
        await tx.query(
          `UPDATE invocations SET status = 'reserved', tool_name = $3, reserved_amount = $4, reservation_expires_at = $5,
             request_hash = NULL, usage_id = NULL, response = NULL, budget_windows = NULL, created_at = $6, updated_at = $6
           WHERE deployment_id = $1 AND invocation_id = $2`,
          [deploymentId, invocationId, toolName, cost, expiresAt, now],
        );
      }
      // The row is this transaction's: the engine holds the credits as a batch of one.
      const hold = await applyOne(tx, { ...request, owned: true }, reportsToMeter(ctx));
      // Rolls the transaction back: the invocation row goes back to what it was with the refusal.
      if (!hold.claimed || !hold.result.deducted) throw new Denied(hold.claimed ? hold.result.budget : undefined);
      return { held: true, amount: cost, available: remainingAfter(hold.result), expiresAt };
    });
  } catch (err) {
    if (err instanceof Denied) return { held: false, budget: err.budget };
    throw err;
  } finally {
    // A hold moves what a check may promise: this instance reads the row again next time.
    forgetBalance(ctx, deploymentId);
  }
}

/**
 * Give back a reservation's held credits (docs/metering.md, Reservations: the tool failed or was cancelled), through the
 * money engine like the hold itself. Returns the credits given back, or null if the invocation held nothing.
 */
export async function releaseInvocationHold(
  ctx: Ctx,
  deployment: { deployment_id: string; organization_id: string },
  invocationId: string,
): Promise<number | null> {
  const now = ctx.clock.now();
  const deploymentId = deployment.deployment_id;
  const request: BatchDeduction = {
    deploymentId,
    organizationId: deployment.organization_id,
    invocationId,
    toolName: '',
    cost: 0,
    release: true,
    releaseReserved: 0,
    action: 'release',
    mcpUserId: null,
    metadata: null,
    actor: actorLabel(ctx.actor),
    now,
  };
  // Not settled by a batch of many (a hold made in the same batch, an overdue hold): a batch of one,
  // which settles either.
  let batched = await ctx.deductions.submit(request);
  if (!batched.claimed) batched = await ctx.db.transaction((tx) => applyOne(tx, request, reportsToMeter(ctx)));
  const released = batched.claimed && batched.result.deducted ? batched.cost : null;
  if (released !== null) forgetBalance(ctx, deploymentId);
  return released;
}

export type RecordedInvocation =
  | { replayed: true; answer: StoredRecordAnswer }
  | { replayed: false; cost: number; deducted: DeductResult };

/** Meter events are written with the deductions when a Stripe meter is configured (docs/billing.md, Usage to Stripe meters). */
export const reportsToMeter = (ctx: Pick<Ctx, 'config'>): boolean => ctx.config.stripeMeterEventName !== undefined;

/**
 * Record an idempotent call (docs/metering.md, Idempotency) whose id was seen before: one transaction
 * in which a concurrent request with the same id waits on the invocation row and then replays. A
 * reservation of this call fixes its price and is spent by the deduction; a refusal is not final (the
 * same id may be recorded once the balance allows). The deduction is the engine's, as a batch of one.
 */
export async function recordInvocation(
  ctx: Ctx,
  request: BatchDeduction & { invocationId: string; claimInvocation: { requestHash: string } },
): Promise<RecordedInvocation> {
  const { invocationId, deploymentId, now } = request;
  const requestHash = request.claimInvocation.requestHash;
  return ctx.db.transaction(async (tx): Promise<RecordedInvocation> => {
    const inserted = await tx.query(
      `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6)
       ON CONFLICT (deployment_id, invocation_id) DO NOTHING RETURNING invocation_id`,
      [deploymentId, invocationId, request.organizationId, request.toolName, requestHash, now],
      'invocation_insert',
    );
    let cost = request.cost;
    let releaseReserved = 0;
    let heldWindows: string[] | undefined;
    if (inserted.length === 0) {
      const existing = await lockInvocation(tx, deploymentId, invocationId);
      const fresh = existing.created_at.getTime() > now.getTime() - IDEMPOTENCY_WINDOW_MS;
      // A hold past its expiry holds nothing, whether or not the sweep has released it yet: its
      // credits go back and the call is priced now, as after a sweep (docs/metering.md, Reservations).
      const lapsed = existing.status === 'reserved' && existing.reservation_expires_at !== null && existing.reservation_expires_at.getTime() <= now.getTime();
      if (!fresh || lapsed) {
        if (existing.status === 'reserved') await releaseHeld(tx, existing, now);
        if (fresh && existing.tool_name !== request.toolName) throw reusedInvocation();
      } else if (existing.status === 'recorded' || existing.status === 'refunded') {
        if (existing.request_hash !== requestHash) throw reusedInvocation();
        return { replayed: true, answer: existing.response! };
      } else if (existing.tool_name !== request.toolName) {
        throw reusedInvocation();
      } else if (existing.status === 'reserved') {
        // The price was fixed when the credits were held.
        cost = existing.reserved_amount;
        releaseReserved = existing.reserved_amount;
        heldWindows = existing.budget_windows ?? [];
      }
      // A held reservation of this call (the common path) needs no reset: the deduction marks it recorded.
      if (!(fresh && existing.status === 'reserved' && !lapsed)) {
        await tx.query(
          `UPDATE invocations SET status = 'pending', tool_name = $3, request_hash = $4, updated_at = $5, budget_windows = NULL,
             created_at = CASE WHEN created_at > $6 THEN created_at ELSE $5 END
           WHERE deployment_id = $1 AND invocation_id = $2`,
          [deploymentId, invocationId, request.toolName, requestHash, now, new Date(now.getTime() - IDEMPOTENCY_WINDOW_MS)],
        );
      }
    }
    // The engine marks the invocation recorded with its answer, or denied; a refused spend of a hold
    // leaves it held (credits/engine/write.ts).
    const outcome = await applyOne(tx, { ...request, cost, releaseReserved, heldWindows, owned: true }, reportsToMeter(ctx));
    if (!outcome.claimed) throw new Error(`invocation ${invocationId} was not settled by its own transaction`);
    return { replayed: false, cost, deducted: outcome.result };
  });
}
