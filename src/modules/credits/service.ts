import type { Queryable } from '../../db/client.js';
import { ValidationError } from '../../errors.js';
import { emitEvent } from '../events/outbox.js';
import { expireDueLots, type Lot, refundToLots, takenFromLots } from './grants.js';
import { awaitBudgetChanges } from './budgets.js';
import { appendLedger } from './ledger.js';
import { type Added, payOwed } from './owed.js';
import {
  type DeploymentTerms,
  effectiveTerms,
  ledgerMonthly,
  monthlyRemaining,
  periodFor,
  SUBSCRIPTION_PERIOD_SQL,
  type SubscriptionPeriod,
  syncBeforeFor,
} from './terms.js';

export interface BalanceRow {
  deployment_id: string;
  organization_id: string;
  period_start: Date;
  period_end: Date;
  sync_before: Date;
  monthly_allocation: number | null;
  monthly_used: number;
  purchased_balance: number;
  reserved: number;
  ai_tokens_used: number;
  ai_tokens_over_limit: number;
  ai_tokens_reserved: number;
  ai_credits_reserved: number;
  purchased_consumed: number;
  /** Credits a provider's over-report left unpaid (credits/owed.ts); no AI call starts while above 0. */
  credits_owed: number;
  /** The organization has (or had) budgets: a check reads them (docs/budgets.md). */
  has_budgets: boolean;
}

declare module '../../lib/caches.js' {
  interface CachedRows {
    balance: BalanceRow;
  }
}

export interface BalanceView {
  monthlyAllocation: number | null;
  monthlyUsed: number;
  monthlyRemaining: number | null;
  purchased: number;
  reserved: number;
  /** What a new deduction may spend: monthly remaining + purchased − open reservations; null = unlimited. */
  available: number | null;
  periodStart: Date;
  periodEnd: Date;
  aiTokensUsed: number;
  /** Of aiTokensUsed, tokens past the quota (paid with purchased credits). */
  aiTokensOverLimit: number;
  /** Quota tokens held by AI calls in flight. */
  aiTokensHeld: number;
  /** Credits a provider's over-report left unpaid (docs/ai-proxy.md, "What a provider's over-report costs"). */
  creditsOwed: number;
}

export function viewBalance(b: BalanceRow): BalanceView {
  const remaining = monthlyRemaining(b.monthly_allocation, b.monthly_used);
  return {
    monthlyAllocation: b.monthly_allocation,
    monthlyUsed: b.monthly_used,
    monthlyRemaining: remaining,
    purchased: b.purchased_balance,
    reserved: b.reserved,
    available: remaining === null ? null : Math.max(0, remaining + b.purchased_balance - b.reserved),
    periodStart: b.period_start,
    periodEnd: b.period_end,
    aiTokensUsed: b.ai_tokens_used,
    aiTokensOverLimit: b.ai_tokens_over_limit,
    aiTokensHeld: b.ai_tokens_reserved,
    creditsOwed: b.credits_owed,
  };
}

/** Create the balance row of a new deployment, with its first period's allocation in the ledger. */
export async function openBalance(
  tx: Queryable,
  input: { deploymentId: string; organizationId: string; terms: DeploymentTerms; actor: string; now: Date },
): Promise<void> {
  const terms = effectiveTerms(input.terms, input.now);
  const subscription = await tx.query<SubscriptionPeriod>(SUBSCRIPTION_PERIOD_SQL, [input.organizationId]);
  const period = periodFor(input.terms, input.now, subscription[0] ?? null);
  const allocation = terms.monthlyCredits;
  await awaitBudgetChanges(tx, input.organizationId);
  await tx.query(
    // A deployment of an organization that has budgets starts marked (credits/budgets.ts budgetsChanged);
    // one of an organization with auto top-up on starts with its line, due (credits/auto-top-ups.ts).
    `INSERT INTO credit_balances (deployment_id, organization_id, period_start, period_end, sync_before,
       monthly_allocation, monthly_used, purchased_balance, reserved, ai_tokens_used, updated_at, has_budgets,
       auto_top_up_below, auto_top_up_due_at)
     SELECT $1, $2, $3, $4, $5, $6, 0, 0, 0, 0, $7, EXISTS (SELECT 1 FROM budgets WHERE organization_id = $2),
            s.below_credits, CASE WHEN s.below_credits IS NULL THEN NULL ELSE $7::timestamptz END
     FROM (SELECT 1) one LEFT JOIN auto_top_up_settings s ON s.organization_id = $2 AND s.enabled`,
    [
      input.deploymentId,
      input.organizationId,
      period.start,
      period.end,
      syncBeforeFor(period.end, terms),
      allocation,
      input.now,
    ],
  );
  await appendLedger(tx, {
    organizationId: input.organizationId,
    deploymentId: input.deploymentId,
    kind: 'period_reset',
    amount: allocation ?? 0,
    monthlyDelta: ledgerMonthly(allocation, 0),
    purchasedDelta: 0,
    monthlyAfter: monthlyRemaining(allocation, 0),
    purchasedAfter: 0,
    actor: input.actor,
    reason: 'first period',
    at: input.now,
  });
}

type LockedRow = BalanceRow & DeploymentTerms;

/**
 * Lock the balance row and bring it up to date: roll the period (once, whoever comes first — the row
 * lock serialises instances) and apply the allocation the tier and overrides give now. Every change
 * is a ledger row in this transaction. Returns the current row, still locked.
 */
export async function syncBalance(tx: Queryable, deploymentId: string, now: Date, actor: string): Promise<BalanceRow> {
  return (await syncBalanceLots(tx, deploymentId, now, actor)).row;
}

/**
 * syncBalance, with the deployment's expiring grants still open after it (locked, as stored; settle
 * them at the row's `purchased_consumed`): what it read anyway, so the writes that move purchased
 * credits without spending them (a refund, a take-back) know the lots with no statement more.
 */
export async function syncBalanceLots(
  tx: Queryable,
  deploymentId: string,
  now: Date,
  actor: string,
): Promise<{ row: BalanceRow; lots: Lot[] }> {
  const rows = await tx.query<LockedRow>(
    `SELECT b.*, d.tier, d.billing_anchor, d.override_monthly_credits, d.override_api_rate_limit,
            d.override_ai_tokens_limit, d.override_expires_at
     FROM credit_balances b JOIN deployments d ON d.id = b.deployment_id
     WHERE b.deployment_id = $1 FOR UPDATE OF b`,
    [deploymentId],
  );
  const row = rows[0];
  if (!row) throw new Error(`no balance row for deployment ${deploymentId}`);
  const terms = effectiveTerms(row, now);
  let { period_start, period_end, monthly_allocation: allocation, monthly_used: used, ai_tokens_used: aiUsed, ai_tokens_over_limit: aiOver } = row;
  const ledger = { organizationId: row.organization_id, deploymentId, purchasedDelta: 0, actor, at: now };
  const purchasedAfter = row.purchased_balance;
  // What this sync adds to the monthly bucket pays credits_owed first (credits/owed.ts).
  let added: Added = { monthly: 0, purchased: 0 };

  const ended = now.getTime() >= period_end.getTime();
  const subscription = ended ? (await tx.query<SubscriptionPeriod>(SUBSCRIPTION_PERIOD_SQL, [row.organization_id]))[0] : undefined;
  if (subscription && endsUnpaid(subscription, period_end, now)) {
    // The subscription was set to end with its period, and that period is over: nobody pays for the
    // next one. No roll (no allocation, no AI token quota at the paid tier) until Stripe's deletion
    // sets the tier it falls to, and the roll then follows it (docs/metering.md, Periods).
  } else if (ended) {
    const before = ledgerMonthly(allocation, used);
    const period = periodFor(row, now, subscription ?? null);
    period_start = period.start;
    period_end = period.end;
    allocation = terms.monthlyCredits;
    used = 0;
    aiUsed = 0;
    aiOver = 0;
    added = { monthly: monthlyRemaining(allocation, 0), purchased: 0 };
    await appendLedger(tx, {
      ...ledger,
      kind: 'period_reset',
      amount: allocation ?? 0,
      monthlyDelta: ledgerMonthly(allocation, 0) - before,
      monthlyAfter: monthlyRemaining(allocation, 0),
      purchasedAfter,
      reason: `period ${period.start.toISOString()}`,
    });
  } else if (allocation !== terms.monthlyCredits) {
    const before = ledgerMonthly(allocation, used);
    const previous = allocation;
    allocation = terms.monthlyCredits;
    added = { monthly: allocation === null ? null : Math.max(0, ledgerMonthly(allocation, used) - before), purchased: 0 };
    await appendLedger(tx, {
      ...ledger,
      kind: 'adjust',
      amount: ledgerMonthly(allocation, used) - before,
      monthlyDelta: ledgerMonthly(allocation, used) - before,
      monthlyAfter: monthlyRemaining(allocation, used),
      purchasedAfter,
      reason: `monthly allocation ${previous ?? 'unlimited'} -> ${allocation ?? 'unlimited'}`,
    });
  }
  // Credits open holds will spend do not lapse under them (docs/metering.md, Expiring grants).
  const held = heldFromPurchased({ monthly_allocation: allocation, monthly_used: used, reserved: row.reserved, ai_credits_reserved: row.ai_credits_reserved });
  const lots = await expireDueLots(tx, deploymentId, row.purchased_consumed, now, held);
  const purchased = row.purchased_balance - Math.min(lots.expired, row.purchased_balance);
  if (purchased !== row.purchased_balance) {
    await appendLedger(tx, {
      ...ledger,
      kind: 'expire',
      amount: purchased - row.purchased_balance,
      monthlyDelta: 0,
      purchasedDelta: purchased - row.purchased_balance,
      monthlyAfter: monthlyRemaining(allocation, used),
      purchasedAfter: purchased,
      reason: 'expiring grant lapsed',
    });
  }
  let syncBefore = syncBeforeFor(period_end, terms);
  if (lots.nextExpiry && lots.nextExpiry.getTime() < syncBefore.getTime()) syncBefore = lots.nextExpiry;
  const updated = await tx.query<BalanceRow>(
    `UPDATE credit_balances SET period_start = $2, period_end = $3, sync_before = $4, monthly_allocation = $5,
       monthly_used = $6, ai_tokens_used = $7, ai_tokens_over_limit = $10, purchased_balance = $8, updated_at = $9
     WHERE deployment_id = $1 RETURNING *`,
    [deploymentId, period_start, period_end, syncBefore, allocation, used, aiUsed, purchased, now, aiOver],
  );
  return { row: await payOwed(tx, updated[0]!, added, { actor, now }), lots: lots.open };
}

/**
 * The governing subscription is set to cancel at its period's end, that end has come, and the row's
 * period has reached it: the period after is not paid for.
 */
function endsUnpaid(subscription: SubscriptionPeriod, periodEnd: Date, now: Date): boolean {
  const end = subscription.current_period_end;
  return subscription.cancel_at_period_end === true && end !== null && now.getTime() >= end.getTime() && periodEnd.getTime() >= end.getTime();
}

/** Read a balance that is current at `now`; brings a stale row up to date first. */
export async function readBalance(
  db: Queryable & { transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> },
  deploymentId: string,
  now: Date,
  actor: string,
): Promise<BalanceRow> {
  const rows = await db.query<BalanceRow>('SELECT * FROM credit_balances WHERE deployment_id = $1', [deploymentId], 'balance_read');
  return currentBalance(db, deploymentId, rows[0], now, actor);
}

/** `row` as read, when it is current at `now`; else the row brought up to date (none read: made). */
export async function currentBalance(
  db: { transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> },
  deploymentId: string,
  row: BalanceRow | undefined,
  now: Date,
  actor: string,
): Promise<BalanceRow> {
  if (row && row.sync_before.getTime() > now.getTime()) return row;
  return db.transaction((tx) => syncBalance(tx, deploymentId, now, actor));
}

/**
 * A grant of purchased credits (positive) or an operator adjustment (negative). An adjustment never
 * takes purchased credits below zero nor below what open reservations hold; it takes credits that
 * never expire before expiring grants (docs/metering.md, Expiring grants).
 */
export async function changePurchased(
  tx: Queryable,
  input: {
    deploymentId: string;
    amount: number;
    reason: string;
    actor: string;
    now: Date;
    expiresAt?: Date | null;
    /** More fields for the `credits.purchased` event (the pack and Checkout Session of a sale). */
    eventData?: Record<string, unknown>;
    /**
     * A take-back of credits whose money went back (a refund, a chargeback): it may take what open
     * holds counted on, leaving them without it (credits/purchases.ts, `unspent`).
     */
    takesHeld?: boolean;
    /**
     * Of a positive amount, this much goes back to the open expiring grants first (a dispute won gives
     * back what its take-back took from them), the rest as credits that never expire.
     */
    refillsGrants?: number;
  },
): Promise<BalanceRow & { ledgerId: number; fromGrants: number }> {
  const { row: current, lots } = await syncBalanceLots(tx, input.deploymentId, input.now, input.actor);
  if (input.expiresAt && (input.amount <= 0 || input.expiresAt.getTime() <= input.now.getTime())) {
    throw new ValidationError('Only a grant (positive amount) can expire, and only in the future', [
      { field: 'expires_at', message: 'must be a future time on a positive grant' },
    ]);
  }
  if (input.amount < 0) {
    // Reservations were promised their credits (docs/metering.md, Reservations): an adjustment may not
    // take them away; a take-back of money that went back may, never below zero (the CHECK holds that).
    const floor = input.takesHeld ? current.purchased_balance : purchasedFloor(current);
    if (-input.amount > floor) {
      throw new ValidationError(
        `An adjustment of ${input.amount} would take purchased credits below zero or below what open reservations hold ` +
          `(purchased ${current.purchased_balance}, held ${current.reserved})`,
        [{ field: 'amount', message: `must be at least -${floor}` }],
      );
    }
  }
  // Taking credits away is not spending them: it takes credits that never expire first, and only what
  // they cannot cover comes out of the expiring grants, as spending would take it (docs/metering.md,
  // Expiring grants). Were it spending, a refunded pack would take a promotion's credits and leave its
  // own, which never expire.
  const fromLots = input.amount < 0 ? takenFromLots(-input.amount, current.purchased_balance, lots, current.purchased_consumed) : 0;
  const rows = await tx.query<BalanceRow>(
    `UPDATE credit_balances SET purchased_balance = purchased_balance + $2,
       purchased_consumed = purchased_consumed + $4, updated_at = $3
     WHERE deployment_id = $1 RETURNING *`,
    [input.deploymentId, input.amount, input.now, fromLots],
  );
  const row = rows[0]!;
  if (input.amount > 0 && input.refillsGrants) {
    await refundToLots(tx, lots, current.purchased_consumed, Math.min(input.amount, input.refillsGrants), input.now);
  }
  if (input.expiresAt) {
    await tx.query(
      `INSERT INTO credit_grants (organization_id, deployment_id, amount, remaining, consumed_mark, expires_at, reason, created_at)
       VALUES ($1, $2, $3, $3, $4, $5, $6, $7)`,
      [row.organization_id, input.deploymentId, input.amount, row.purchased_consumed, input.expiresAt, input.reason, input.now],
    );
    if (input.expiresAt.getTime() < row.sync_before.getTime()) {
      await tx.query('UPDATE credit_balances SET sync_before = $2 WHERE deployment_id = $1', [input.deploymentId, input.expiresAt]);
      row.sync_before = input.expiresAt;
    }
  }
  const ledgerId = await appendLedger(tx, {
    organizationId: row.organization_id,
    deploymentId: input.deploymentId,
    kind: input.amount >= 0 ? 'grant' : 'adjust',
    amount: input.amount,
    monthlyDelta: 0,
    purchasedDelta: input.amount,
    monthlyAfter: monthlyRemaining(row.monthly_allocation, row.monthly_used),
    purchasedAfter: row.purchased_balance,
    actor: input.actor,
    reason: input.reason,
    expiresAt: input.expiresAt ?? null,
    at: input.now,
  });
  // A grant pays credits_owed first, after its own ledger row (credits/owed.ts).
  const paid = await payOwed(tx, row, { monthly: 0, purchased: Math.max(0, input.amount) }, { actor: input.actor, now: input.now });
  if (input.amount > 0) {
    await emitEvent(tx, {
      organizationId: row.organization_id,
      deploymentId: input.deploymentId,
      type: 'credits.purchased',
      data: {
        deployment_id: input.deploymentId,
        amount: input.amount,
        purchased_balance: paid.purchased_balance,
        reason: input.reason,
        expires_at: input.expiresAt?.toISOString() ?? null,
        ...input.eventData,
      },
      at: input.now,
    });
  }
  return { ...paid, ledgerId, fromGrants: fromLots };
}

/**
 * Purchased credits an adjustment (or an AI call) may take now: what open holds do not need from them
 * (docs/metering.md, Reservations: a reservation keeps what it was promised). AI holds are purchased credits only; MCP
 * reservations take the monthly bucket first. The row must be current (syncBalance).
 */
export function purchasedFloor(
  b: Pick<BalanceRow, 'monthly_allocation' | 'monthly_used' | 'purchased_balance' | 'reserved' | 'ai_credits_reserved'>,
): number {
  return Math.max(0, b.purchased_balance - heldFromPurchased(b));
}

/**
 * The purchased credits open holds will spend: AI holds' all, and what tool holds need past the
 * monthly bucket (nothing when it is unlimited), as the spending rule will take them (credits/rules.ts).
 */
export function heldFromPurchased(b: Pick<BalanceRow, 'monthly_allocation' | 'monthly_used' | 'reserved' | 'ai_credits_reserved'>): number {
  const monthly = monthlyRemaining(b.monthly_allocation, b.monthly_used);
  const mcpHeld = b.reserved - b.ai_credits_reserved;
  return b.ai_credits_reserved + (monthly === null ? 0 : Math.max(0, mcpHeld - monthly));
}

/** Operator reset of the period's counters (docs/operator.md): the monthly bucket refills, AI tokens start over. */
export async function resetUsage(
  tx: Queryable,
  input: { deploymentId: string; monthlyCredits: boolean; aiTokens: boolean; actor: string; now: Date },
): Promise<BalanceRow> {
  const current = await syncBalance(tx, input.deploymentId, input.now, input.actor);
  const used = input.monthlyCredits ? 0 : current.monthly_used;
  const aiUsed = input.aiTokens ? 0 : current.ai_tokens_used;
  const aiOver = input.aiTokens ? 0 : current.ai_tokens_over_limit;
  const rows = await tx.query<BalanceRow>(
    `UPDATE credit_balances SET monthly_used = $2, ai_tokens_used = $3, ai_tokens_over_limit = $5, updated_at = $4
     WHERE deployment_id = $1 RETURNING *`,
    [input.deploymentId, used, aiUsed, input.now, aiOver],
  );
  const row = rows[0]!;
  const delta =
    ledgerMonthly(row.monthly_allocation, used) - ledgerMonthly(current.monthly_allocation, current.monthly_used);
  if (input.monthlyCredits && current.monthly_used !== 0) {
    await appendLedger(tx, {
      organizationId: row.organization_id,
      deploymentId: input.deploymentId,
      kind: 'adjust',
      amount: delta,
      monthlyDelta: delta,
      purchasedDelta: 0,
      monthlyAfter: monthlyRemaining(row.monthly_allocation, used),
      purchasedAfter: row.purchased_balance,
      actor: input.actor,
      reason: 'monthly usage reset',
      at: input.now,
    });
  }
  // The refilled monthly bucket pays credits_owed first (credits/owed.ts).
  return payOwed(tx, row, { monthly: Math.max(0, delta), purchased: 0 }, { actor: input.actor, now: input.now });
}
