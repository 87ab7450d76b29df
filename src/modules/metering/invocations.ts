import { type Ctx, actorLabel } from '../../context.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { appendLedger } from '../credits/ledger.js';
import { expireReservations, releaseReservation } from '../credits/reservations.js';
import { syncBalance, viewBalance } from '../credits/service.js';
import { ledgerMonthly, monthlyRemaining } from '../credits/terms.js';
import type { InvocationRow } from './service.js';

/** Who may act on a deployment's invocations: an API key's organization, or the service key (any). */
export interface Scope {
  deploymentId: string;
  /** Set for API-key callers: rows of another organization are "not found". */
  organizationId: string | null;
}

export interface InvocationView {
  invocation_id: string;
  deployment_id: string;
  status: 'reserved' | 'recorded' | 'released' | 'expired' | 'refunded' | 'denied';
  tool_name: string;
  reserved_credits: number;
  reservation_expires_at: string | null;
  usage_id: string | null;
  credits_used: number;
  credits_refunded: number;
  created_at: string;
  updated_at: string;
}

export async function getInvocation(ctx: Ctx, scope: Scope, invocationId: string): Promise<InvocationView> {
  const now = ctx.clock.now();
  // Report an overdue reservation as what it is, not as still held.
  await expireReservations(ctx.db, now, scope.deploymentId);
  const rows = await ctx.db.query<InvocationRow & { quantity: number | null; refunded: number | null }>(
    `SELECT i.*, u.quantity, u.refunded FROM invocations i
     LEFT JOIN usage_records u ON u.id = i.usage_id
     WHERE i.deployment_id = $1 AND i.invocation_id = $2 AND ($3::uuid IS NULL OR i.organization_id = $3::uuid)
       AND i.status <> 'pending'`,
    [scope.deploymentId, invocationId, scope.organizationId],
  );
  const row = rows[0];
  if (!row) throw new NotFoundError('Invocation');
  return {
    invocation_id: row.invocation_id,
    deployment_id: row.deployment_id,
    status: row.status as InvocationView['status'],
    tool_name: row.tool_name,
    reserved_credits: row.status === 'reserved' ? row.reserved_amount : 0,
    reservation_expires_at: row.reservation_expires_at?.toISOString() ?? null,
    usage_id: row.usage_id,
    credits_used: row.quantity ?? 0,
    credits_refunded: row.refunded ?? 0,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Give back a reservation's held credits (the tool failed or was cancelled). Releasing twice is harmless. */
export async function releaseInvocation(
  ctx: Ctx,
  scope: Scope,
  invocationId: string,
): Promise<{ invocation_id: string; status: string; released_credits: number }> {
  const now = ctx.clock.now();
  await assertInvocationInScope(ctx, scope, invocationId);
  const released = await releaseReservation(ctx.db, scope.deploymentId, invocationId, now);
  if (released !== null) return { invocation_id: invocationId, status: 'released', released_credits: released };
  const view = await getInvocation(ctx, scope, invocationId);
  if (view.status === 'recorded' || view.status === 'refunded') {
    throw new AppError('CONFLICT', `Invocation ${invocationId} was already recorded; refund its usage instead`);
  }
  return { invocation_id: invocationId, status: view.status, released_credits: 0 };
}

async function assertInvocationInScope(ctx: Ctx, scope: Scope, invocationId: string): Promise<void> {
  const rows = await ctx.db.query(
    `SELECT 1 FROM invocations WHERE deployment_id = $1 AND invocation_id = $2
       AND ($3::uuid IS NULL OR organization_id = $3::uuid) AND status <> 'pending'`,
    [scope.deploymentId, invocationId, scope.organizationId],
  );
  if (rows.length === 0) throw new NotFoundError('Invocation');
}

export interface RefundInput {
  usageId: string;
  /** Omitted: everything not yet refunded. */
  amount?: number | undefined;
  reason: string;
  idempotencyKey?: string | undefined;
  /** API-key callers only see their own organization's usage. */
  organizationId: string | null;
}

export interface RefundResult {
  usage_id: string;
  refund_id: string | null;
  credits_refunded: number;
  total_refunded: number;
  credits_remaining: number | null;
}

interface UsageRow {
  id: string;
  organization_id: string;
  deployment_id: string;
  quantity: number;
  refunded: number;
  monthly_taken: number;
  purchased_taken: number;
  period_start: Date | null;
  success: boolean;
  invocation_id: string | null;
}

/**
 * Refund a recorded usage, in whole or in part, in one transaction with its ledger row. Credits go
 * back to the bucket they came from, purchased first (the reverse of the deduction order); the
 * monthly part of a usage from an earlier period comes back as purchased credits, since that
 * period's allocation no longer exists. With an idempotency key a repeated refund answers the first.
 */
export async function refundUsage(ctx: Ctx, input: RefundInput): Promise<RefundResult> {
  const now = ctx.clock.now();
  const actor = actorLabel(ctx.actor);
  return ctx.db.transaction(async (tx) => {
    const usages = await tx.query<UsageRow>(
      `SELECT id, organization_id, deployment_id, quantity, refunded, monthly_taken, purchased_taken, period_start, success, invocation_id
       FROM usage_records WHERE id = $1 AND ($2::uuid IS NULL OR organization_id = $2::uuid) FOR UPDATE`,
      [input.usageId, input.organizationId],
    );
    const usage = usages[0];
    if (!usage) throw new NotFoundError('Usage record');
    if (input.idempotencyKey) {
      const previous = await tx.query<{ id: string; amount: number; reason: string }>(
        'SELECT id, amount, reason FROM usage_refunds WHERE usage_id = $1 AND idempotency_key = $2',
        [usage.id, input.idempotencyKey],
      );
      const first = previous[0];
      if (first) {
        if ((input.amount !== undefined && input.amount !== first.amount) || input.reason !== first.reason) {
          throw new AppError('IDEMPOTENCY_KEY_REUSED', 'This idempotency key was already used for a different refund');
        }
        const balance = viewBalance(await syncBalance(tx, usage.deployment_id, now, actor));
        return {
          usage_id: usage.id,
          refund_id: first.id,
          credits_refunded: first.amount,
          total_refunded: usage.refunded,
          credits_remaining: balance.available,
        };
      }
    }
    if (!usage.success) throw new AppError('CONFLICT', 'This usage deducted nothing; there is nothing to refund');
    const refundable = usage.quantity - usage.refunded;
    const amount = input.amount ?? refundable;
    if (amount > refundable) {
      throw new ValidationError(`At most ${refundable} credits of this usage can still be refunded`, [
        { field: 'amount', message: `must be at most ${refundable}` },
      ]);
    }
    const balance = await syncBalance(tx, usage.deployment_id, now, actor);
    if (amount === 0) {
      return {
        usage_id: usage.id,
        refund_id: null,
        credits_refunded: 0,
        total_refunded: usage.refunded,
        credits_remaining: viewBalance(balance).available,
      };
    }
    const purchasedAlreadyBack = Math.min(usage.refunded, usage.purchased_taken);
    let purchasedBack = Math.min(amount, usage.purchased_taken - purchasedAlreadyBack);
    let monthlyBack = amount - purchasedBack;
    const samePeriod = usage.period_start !== null && usage.period_start.getTime() === balance.period_start.getTime();
    if (!samePeriod) {
      purchasedBack += monthlyBack;
      monthlyBack = 0;
    }
    // An operator's usage reset may have zeroed the counter this usage counted in.
    if (monthlyBack > balance.monthly_used) {
      purchasedBack += monthlyBack - balance.monthly_used;
      monthlyBack = balance.monthly_used;
    }
    const newUsed = balance.monthly_used - monthlyBack;
    const updated = await tx.query<{ purchased_balance: number; monthly_used: number; monthly_allocation: number | null; reserved: number }>(
      `UPDATE credit_balances SET monthly_used = $2, purchased_balance = purchased_balance + $3, updated_at = $4
       WHERE deployment_id = $1 RETURNING purchased_balance, monthly_used, monthly_allocation, reserved`,
      [usage.deployment_id, newUsed, purchasedBack, now],
    );
    const after = updated[0]!;
    const ledgerId = await appendLedger(tx, {
      organizationId: usage.organization_id,
      deploymentId: usage.deployment_id,
      kind: 'refund',
      amount,
      monthlyDelta: ledgerMonthly(after.monthly_allocation, newUsed) - ledgerMonthly(balance.monthly_allocation, balance.monthly_used),
      purchasedDelta: purchasedBack,
      monthlyAfter: monthlyRemaining(after.monthly_allocation, newUsed),
      purchasedAfter: after.purchased_balance,
      actor,
      usageId: usage.id,
      reason: input.reason,
      at: now,
    });
    const total = usage.refunded + amount;
    await tx.query('UPDATE usage_records SET refunded = $2 WHERE id = $1', [usage.id, total]);
    let refundId: string | null = null;
    if (input.idempotencyKey) {
      const rows = await tx.query<{ id: string }>(
        `INSERT INTO usage_refunds (usage_id, organization_id, deployment_id, idempotency_key, amount, reason, ledger_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
        [usage.id, usage.organization_id, usage.deployment_id, input.idempotencyKey, amount, input.reason, ledgerId, now],
      );
      refundId = rows[0]!.id;
    }
    if (usage.invocation_id && total === usage.quantity) {
      await tx.query(
        `UPDATE invocations SET status = 'refunded', updated_at = $3 WHERE deployment_id = $1 AND invocation_id = $2 AND status = 'recorded'`,
        [usage.deployment_id, usage.invocation_id, now],
      );
    }
    const remaining = monthlyRemaining(after.monthly_allocation, newUsed);
    return {
      usage_id: usage.id,
      refund_id: refundId,
      credits_refunded: amount,
      total_refunded: total,
      credits_remaining: remaining === null ? null : Math.max(0, remaining + after.purchased_balance - after.reserved),
    };
  });
}
