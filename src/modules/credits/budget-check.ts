import { pgArray } from '../../db/arrays.js';
import type { Queryable } from '../../db/client.js';
import { type BudgetCounter, type ChargeSubject, crossed, type Window } from './budget-rules.js';
import { type BudgetWithPeriod, budgetsStatement, counterKey, countersFor, keyText } from './budgets.js';

/**
 * The advisory check's look at budgets (docs/budgets.md, Enforcement): would a charge of `cost` now
 * cross a block budget? Read without locks, like the rest of a check (docs/adr/0005-cached-checks.md):
 * the record deducts under the locks and has the last word. Only organizations marked `has_budgets`
 * on their balance row are looked at, so a check of everyone else costs nothing more.
 */
export async function budgetThatRefuses(
  db: Queryable,
  charge: ChargeSubject,
  cost: number,
  at: Date,
  period: Window,
): Promise<{ id: string; resetsAt: Date } | null> {
  const statement = budgetsStatement([charge.organizationId], at);
  const budgets = await db.query<BudgetWithPeriod>(statement.text, statement.params, statement.name);
  const keys = countersFor(
    budgets.filter((b) => b.mode === 'block'),
    charge,
    at,
    period,
  );
  if (keys.length === 0) return null;
  const rows = await db.query<{ budget_id: string; subject: string; window_start: Date; spent_credits: number }>(
    `SELECT budget_id, subject, window_start, spent_credits FROM budget_windows
     WHERE (budget_id, subject, window_start) IN (SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]))`,
    [pgArray(keys.map((k) => k.budget.id)), pgArray(keys.map((k) => k.subject)), pgArray(keys.map((k) => k.window.start))],
    'credits_budget_check',
  );
  const spent = new Map(rows.map((r) => [keyText(r.budget_id, r.subject, r.window_start), r.spent_credits]));
  const counters: BudgetCounter[] = keys.map((k) => ({
    id: '',
    budgetId: k.budget.id,
    subject: k.subject,
    window: k.window,
    limitCredits: k.budget.limit_credits,
    block: true,
    spentCredits: spent.get(counterKey(k)) ?? 0,
  }));
  const refusing = crossed(counters, cost);
  return refusing ? { id: refusing.budgetId, resetsAt: refusing.window.end } : null;
}
