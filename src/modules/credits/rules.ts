import { randomUUID } from 'node:crypto';
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
    const { kind, cost, release } = terms[index]!;
    const allocation = row.monthly_allocation;
    const monthlyLeft = allocation === null ? null : Math.max(0, allocation - row.monthly_used);
    const spendable = monthlyLeft === null ? Number.POSITIVE_INFINITY : monthlyLeft + row.purchased_balance - (row.reserved - release);
    let deducted = spendable >= cost;
    let monthlyTaken = 0;
    let purchasedTaken = 0;
    if (kind === 'release') {
      deducted = true;
      row.reserved -= cost;
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
    });
  }
  return { row, changes };
}
