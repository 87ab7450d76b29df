import { forgetBalance } from './balance-cache.js';
import { type Ctx, actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { isUuid } from '../../lib/ids.js';
import { writeAudit } from '../audit/service.js';
import { giveBack } from './budgets.js';
import { appendLedger } from './ledger.js';
import { payOwed } from './owed.js';
import { refundToLots } from './grants.js';
import { type BalanceRow, syncBalance, syncBalanceLots, viewBalance } from './service.js';
import { ledgerMonthly, monthlyRemaining } from './terms.js';

/**
 * Refunds of recorded usage (docs/metering.md, Refunds). Only the platform refunds: the route takes the service key and
 * the operator API, never an organization's own key (a tenant must not refund itself). Credits go
 * back to the bucket they came from; the monthly part of a usage from a period that has ended is not
 * given back, since nothing rolls over (docs/metering.md, "Refunds").
 */
export interface RefundInput {
  usageId: string;
  /** Omitted: everything not yet refunded. */
  amount?: number | undefined;
  reason: string;
  idempotencyKey?: string | undefined;
}

export interface RefundResult {
  usage_id: string;
  refund_id: string | null;
  /** Credits of the usage settled by this refund (what was asked for). */
  credits_refunded: number;
  /** Of those, the monthly part of an ended period: settled, but not given back. */
  credits_forfeited: number;
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
  budget_windows: string[] | null;
  /** When it was recorded (charged). */
  timestamp: Date;
}

/** How a refund of `amount` splits: purchased first (the reverse of the deduction order), then monthly. */
export function splitRefund(
  usage: Pick<UsageRow, 'refunded' | 'purchased_taken'>,
  amount: number,
  current: { samePeriod: boolean; monthlyUsed: number },
): { purchasedBack: number; monthlyBack: number; forfeited: number } {
  const purchasedAlreadyBack = Math.min(usage.refunded, usage.purchased_taken);
  const purchasedBack = Math.min(amount, usage.purchased_taken - purchasedAlreadyBack);
  const monthlyPart = amount - purchasedBack;
  // Another period's allocation no longer exists, and an operator's usage reset may have zeroed the
  // counter this usage counted in: what cannot go back to this period's counter is forfeited.
  const monthlyBack = current.samePeriod ? Math.min(monthlyPart, current.monthlyUsed) : 0;
  return { purchasedBack, monthlyBack, forfeited: monthlyPart - monthlyBack };
}

/** Refund a recorded usage, in whole or in part, in one transaction with its ledger row; idempotent by key. */
export async function refundUsage(ctx: Ctx, input: RefundInput): Promise<RefundResult> {
  if (ctx.actor.type !== 'service' && ctx.actor.type !== 'operator' && ctx.actor.type !== 'system') {
    throw new AppError('FORBIDDEN', 'Refunds are made by the platform (service key or operator API), not by an organization');
  }
  const now = ctx.clock.now();
  const actor = actorLabel(ctx.actor);
  // The usage's deployment and budget windows (they never change) name the balance row and the windows
  // the batch locks for the refund, in its order (docs/budgets.md, Lock order).
  const owner = await ctx.db.query<{ deployment_id: string; budget_windows: string[] | null }>(
    'SELECT deployment_id, budget_windows FROM usage_records WHERE id = $1',
    [input.usageId],
  );
  const touched = owner[0]?.deployment_id;
  if (!touched) throw await missingUsage(ctx.db, input.usageId);
  const windows = owner[0]?.budget_windows ?? [];
  // In the next deduction batch's transaction (credits/engine/queue.ts): one commit with the batch's.
  const result = await ctx.deductions.within(touched, async (tx) => {
    // The balance row before the usage row, as a batch that carries a record of this deployment
    // locks them: a refund alone in its batch locked the other way round, and two refunds of one
    // usage on two instances deadlocked (docs/adr/0004-group-commit.md, Consequences).
    await tx.query('SELECT 1 FROM credit_balances WHERE deployment_id = $1 FOR UPDATE', [touched]);
    const usages = await tx.query<UsageRow>(
      `SELECT id, organization_id, deployment_id, quantity, refunded, monthly_taken, purchased_taken, period_start, success, invocation_id,
              budget_windows, "timestamp"
       FROM usage_records WHERE id = $1 FOR UPDATE`,
      [input.usageId],
    );
    const usage = usages[0];
    if (!usage) throw await missingUsage(tx, input.usageId);
    if (input.idempotencyKey) {
      const previous = await tx.query<{ id: string; amount: number; reason: string; forfeited: number }>(
        'SELECT id, amount, reason, forfeited FROM usage_refunds WHERE usage_id = $1 AND idempotency_key = $2',
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
          credits_forfeited: first.forfeited,
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
    const { row: balance, lots } = await syncBalanceLots(tx, usage.deployment_id, now, actor);
    if (amount === 0) {
      return {
        usage_id: usage.id,
        refund_id: null,
        credits_refunded: 0,
        credits_forfeited: 0,
        total_refunded: usage.refunded,
        credits_remaining: viewBalance(balance).available,
      };
    }
    const samePeriod = usage.period_start !== null && usage.period_start.getTime() === balance.period_start.getTime();
    const { purchasedBack, monthlyBack, forfeited } = splitRefund(usage, amount, { samePeriod, monthlyUsed: balance.monthly_used });
    const newUsed = balance.monthly_used - monthlyBack;
    // The purchased part goes back to the open expiring grants first, soonest expiry first, each up to
    // its amount; only the rest comes back as credits that never expire (docs/metering.md, Expiring
    // grants). Else a refund the tenant can provoke (the webhook proxy's own) would move a promotion's
    // credits past its expiry one at a time. No open grants, no statement.
    await refundToLots(tx, lots, balance.purchased_consumed, purchasedBack, usage.timestamp);
    const updated = await tx.query<BalanceRow>(
      `UPDATE credit_balances SET monthly_used = $2, purchased_balance = purchased_balance + $3, updated_at = $4
       WHERE deployment_id = $1 RETURNING *`,
      [usage.deployment_id, newUsed, purchasedBack, now],
    );
    const after = updated[0]!;
    // The row's amount is what the usage is settled by, so usage records less refunds keep equalling
    // the ledger's deductions less refunds; the deltas say what actually came back.
    const monthlyDelta = ledgerMonthly(after.monthly_allocation, newUsed) - ledgerMonthly(balance.monthly_allocation, balance.monthly_used);
    const ledgerId = await appendLedger(tx, {
      organizationId: usage.organization_id,
      deploymentId: usage.deployment_id,
      kind: 'refund',
      amount,
      monthlyDelta,
      purchasedDelta: purchasedBack,
      monthlyAfter: monthlyRemaining(after.monthly_allocation, newUsed),
      purchasedAfter: after.purchased_balance,
      actor,
      usageId: usage.id,
      reason: forfeited > 0 ? `${input.reason} (${forfeited} monthly credits of an ended period not given back)` : input.reason,
      at: now,
    });
    // What came back pays credits_owed first (credits/owed.ts).
    const final = await payOwed(tx, after, { monthly: Math.max(0, monthlyDelta), purchased: purchasedBack }, { actor, now });
    const total = usage.refunded + amount;
    await tx.query('UPDATE usage_records SET refunded = $2 WHERE id = $1', [usage.id, total]);
    // The budget windows the usage was counted in get the room back, while they last (docs/budgets.md).
    await giveBack(tx, usage.budget_windows, amount, now);
    let refundId: string | null = null;
    if (input.idempotencyKey) {
      const rows = await tx.query<{ id: string }>(
        `INSERT INTO usage_refunds (usage_id, organization_id, deployment_id, idempotency_key, amount, forfeited, reason, ledger_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
        [usage.id, usage.organization_id, usage.deployment_id, input.idempotencyKey, amount, forfeited, input.reason, ledgerId, now],
      );
      refundId = rows[0]!.id;
    }
    // A refund moves credits: audited in its organization with who made it (operator, service or
    // system), as every operator call is (docs/operator.md); a replay moves nothing and writes none.
    await writeAudit(tx, ctx, {
      organizationId: usage.organization_id,
      action: 'refund',
      resourceType: 'usage',
      resourceId: usage.id,
      metadata: { deployment_id: usage.deployment_id, amount, forfeited, reason: input.reason, refund_id: refundId },
    });
    if (usage.invocation_id && total === usage.quantity) {
      // Only the call this usage answered: an id used again after its 24 hours answers a newer usage,
      // which this refund does not touch (docs/metering.md, Refunds).
      await tx.query(
        `UPDATE invocations SET status = 'refunded', updated_at = $3
         WHERE deployment_id = $1 AND invocation_id = $2 AND status = 'recorded' AND usage_id = $4`,
        [usage.deployment_id, usage.invocation_id, now, usage.id],
      );
    }
    return {
      usage_id: usage.id,
      refund_id: refundId,
      credits_refunded: amount,
      credits_forfeited: forfeited,
      total_refunded: total,
      credits_remaining: viewBalance(final).available,
    };
  }, windows.length > 0 ? { windows } : undefined);
  forgetBalance(ctx, touched, true);
  return result;
}

/**
 * A usage id that names no record: one the ledger still names was deleted by the retention
 * (docs/usage-analytics.md, Retention) and is 410 USAGE_RECORD_EXPIRED; any other is 404.
 */
async function missingUsage(db: Queryable, usageId: string): Promise<AppError> {
  const known = isUuid(usageId) ? await db.query('SELECT 1 FROM credit_ledger WHERE usage_id = $1 LIMIT 1', [usageId]) : [];
  if (known.length > 0) return new AppError('USAGE_RECORD_EXPIRED', 'This usage record is older than the usage retention and was deleted; its ledger rows remain');
  return new NotFoundError('Usage record');
}
