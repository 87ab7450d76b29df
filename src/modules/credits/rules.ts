import { randomUUID } from 'node:crypto';
import { type BudgetCounter, crossed } from './budget-rules.js';
import type { BalanceRow } from './service.js';
import { monthlyRemaining } from './terms.js';

/**
 * The spending rule, once, without I/O (docs/adr/0006-one-money-engine.md): how a deduction, a hold, the
 * record that spends a hold, and a release change one balance row. The engine (credits/engine/) locks
 * the rows, applies this rule to each deployment's requests in arrival order and writes what it returns;
 * the money model (credits/engine.model.test.ts) checks the engine against the same arithmetic written
 * independently. The database's CHECK constraints and the append-only ledger stay as the backstop.
 *
 * - Spend order: the monthly bucket first, then purchased credits.
 * - A deduction or a hold needs what is spendable to cover it: monthly remaining + purchased − what
 *   other holders reserved (a spend's own hold counts for it). An unlimited allocation always covers.
 * - A release always succeeds: the row was locked as held, so `reserved` counts it.
 * - A deduction or a hold that fits the balance must also fit every `block` budget it falls under
 *   (credits/budget-rules.ts); it is then counted in all of them, block or alert. A spend was counted
 *   when its hold was made; a release gives its hold's count back (docs/budgets.md).
 */

/**
 * deduct: a deduction (fresh invocation or none); spend: a record that spends its own reservation;
 * hold: a reservation held (deducted: true) or refused; release: a reservation given back.
 */
export type Kind = 'deduct' | 'spend' | 'hold' | 'release';

/** What one request asks of its deployment's row. */
export interface Terms {
  kind: Kind;
  /** Credits deducted, held or given back. */
  cost: number;
  /** Of this deployment's `reserved`, what the change frees (a spend's own hold). */
  release: number;
  /**
   * The budget windows the request falls under, locked: a deduction or hold is checked against and
   * counted in them; a release gives its credits back to them (those of a window still in progress).
   */
  budgets?: BudgetCounter[] | undefined;
  /** A spend's: the windows its hold was counted in, which its usage record inherits. */
  heldWindows?: string[] | undefined;
}

export type BalanceAfter = Pick<BalanceRow, 'monthly_allocation' | 'monthly_used' | 'purchased_balance' | 'reserved'>;

/** One request's effect, as the engine writes it. */
export interface Change extends Terms {
  deploymentId: string;
  organizationId: string;
  /** The request's place in its batch. */
  index: number;
  deducted: boolean;
  /** The usage record (and ledger row) a deduction or spend writes. */
  usageId: string;
  monthlyTaken: number;
  purchasedTaken: number;
  after: BalanceAfter;
  periodStart: Date;
  /** Refused by a block budget (not by the balance): the one that would have been crossed. */
  budget: BudgetCounter | null;
  /** The budget windows the change was counted in (a usage record's or a hold's). */
  windows: string[];
}

/** What a money request left: its balance row after it (or as it found it, when refused). */
export interface DeductResult {
  /** false: no balance row was read (a release of an id that held nothing). */
  found: boolean;
  deducted: boolean;
  usageId: string | null;
  monthly_allocation: number | null;
  monthly_used: number;
  purchased_balance: number;
  reserved: number;
  /** Refused by a block budget: which one, and when its window ends. */
  budget?: { id: string; resetsAt: Date } | undefined;
}

/** A release of an id that holds nothing: no balance row was read. */
export const NOTHING_HELD: DeductResult = {
  found: false,
  deducted: false,
  usageId: null,
  monthly_allocation: null,
  monthly_used: 0,
  purchased_balance: 0,
  reserved: 0,
};

/** What a balance leaves spendable (monthly remaining + purchased − reservations); null = unlimited. */
export function remaining(b: BalanceAfter): number | null {
  const monthly = monthlyRemaining(b.monthly_allocation, b.monthly_used);
  return monthly === null ? null : Math.max(0, monthly + b.purchased_balance - b.reserved);
}

/** What a request's answer says is left (credits_remaining). */
export const remainingAfter = (r: DeductResult): number | null => remaining(r);

/** The rule for one deployment's requests, in order, on a copy of its locked row. */
export function applyInOrder(start: BalanceRow, indexes: number[], terms: Terms[]): { row: BalanceRow; changes: Change[] } {
  const row = { ...start };
  const changes: Change[] = [];
  for (const index of indexes) {
    const { kind, cost, release, budgets } = terms[index]!;
    const allocation = row.monthly_allocation;
    const monthlyLeft = allocation === null ? null : Math.max(0, allocation - row.monthly_used);
    const spendable = monthlyLeft === null ? Number.POSITIVE_INFINITY : monthlyLeft + row.purchased_balance - (row.reserved - release);
    let deducted = spendable >= cost;
    let monthlyTaken = 0;
    let purchasedTaken = 0;
    let budget: BudgetCounter | null = null;
    let windows: string[] = [];
    if (budgets && (kind === 'deduct' || kind === 'hold')) {
      budget = deducted ? crossed(budgets, cost) : null;
      if (budget) {
        deducted = false;
        budget.refused = true;
      }
      if (deducted) {
        for (const c of budgets) c.spentCredits += cost;
        windows = budgets.map((c) => c.id);
      }
    } else if (kind === 'spend') windows = terms[index]!.heldWindows ?? [];
    if (kind === 'release') {
      deducted = true;
      row.reserved -= cost;
      for (const c of budgets ?? []) c.spentCredits = Math.max(0, c.spentCredits - cost);
    } else if (kind === 'hold') {
      if (deducted) row.reserved += cost;
    } else if (deducted) {
      monthlyTaken = monthlyLeft === null ? cost : Math.min(cost, monthlyLeft);
      purchasedTaken = cost - monthlyTaken;
      row.monthly_used += monthlyTaken;
      row.purchased_balance -= purchasedTaken;
      row.purchased_consumed += purchasedTaken;
      row.reserved -= release;
    }
    changes.push({
      kind,
      cost,
      release,
      deploymentId: row.deployment_id,
      organizationId: row.organization_id,
      index,
      deducted,
      usageId: randomUUID(),
      monthlyTaken,
      purchasedTaken,
      after: {
        monthly_allocation: row.monthly_allocation,
        monthly_used: row.monthly_used,
        purchased_balance: row.purchased_balance,
        reserved: row.reserved,
      },
      periodStart: row.period_start,
      budget,
      windows,
    });
  }
  return { row, changes };
}
