import type { BudgetCounter, Window } from '../budget-rules.js';
import type { BudgetWithPeriod } from '../budgets.js';
import type { BalanceRow } from '../service.js';
import type { BatchDeduction } from './types.js';

/**
 * What one instance remembers of the balance rows its batches committed, so that the next batch of
 * plain deductions on them can skip reading and locking them: it is computed from the remembered rows
 * and written in ONE round trip, guarded by each row's version (PostgreSQL's `xmin`, which every other
 * writer of the row changes). If any row changed since, or any invocation id was claimed meanwhile, the
 * statement is refused as a whole, nothing of it stays, and the batch runs the locking path
 * (docs/adr/0004-group-commit.md, "One round trip on remembered rows"). The memory is a hint: a wrong
 * one costs a round trip, never a credit.
 *
 * Budgets (docs/budgets.md) go with the rows: each remembered row keeps the budgets of its organization
 * that the batch which wrote that version counted with. A budget's creation, change or deletion gives
 * every balance row of its organization a new version first (credits/budgets.ts budgetsChanged), so
 * while a row's version is the one remembered, so are its organization's budgets. The budget window
 * rows the batches counted in are remembered too, each with its own version, and guarded the same way.
 */

/** Rows remembered at most (the oldest are dropped first). */
const REMEMBER_MAX = 10_000;
/** After a refused attempt, the batch's deployments take the locking path this long (another instance writes them too). */
const CONTENDED_MS = 1_000;

/** The budgets of a row's organization as its remembered version counted with (none: an empty list). */
export type RememberedBudgets = readonly BudgetWithPeriod[];

/** A budget window row as a batch left it: its count and version. */
export interface RememberedWindow {
  readonly id: string;
  readonly window: Window;
  readonly spentCredits: number;
  readonly version: string;
}

/** A remembered window as this memory keeps it: changed in place by the next batch that counts in it. */
interface KeptWindow {
  id: string;
  window: Window;
  spentCredits: number;
  version: string;
  at: number;
}

/** The rows of a batch that may go in one round trip, with the versions they were committed at. */
export interface OptimisticPlan {
  now: Date;
  rows: Map<string, { row: BalanceRow; version: string; budgets: RememberedBudgets }>;
  /** The window row of a budget and subject starting at `start`, as this instance last committed it, if it is remembered. */
  window(budgetId: string, subject: string, start: Date): RememberedWindow | undefined;
  /** The versions of the window rows the batch counts in, by row id, as the plan (engine/plan.ts) found them here. */
  windowVersions: Map<string, string>;
}

/** The rows a committed batch wrote, with their new versions. */
export interface Written {
  versions: Array<{ id: string; version: string; row: BalanceRow; budgets: RememberedBudgets }>;
  /** The budget window rows it wrote, as it left them, with the version they were written at. */
  windows: { counters: BudgetCounter[]; version: string } | null;
  now: Date;
}

/** Thrown before anything is sent: the batch needs what only the locking path does (a period sync, a sweep of overdue holds). */
export class NotOptimistic extends Error {
  constructor() {
    super('the batch needs the locking path');
  }
}

export class RowMemory {
  /** @param rememberMs how long a remembered row may be used (DEDUCT_BATCH_REMEMBER_MS; 0: never), then it is read again. */
  constructor(private readonly rememberMs: number) {}

  private readonly rows = new Map<string, { row: BalanceRow; version: string; budgets: RememberedBudgets; at: number }>();
  /**
   * Window rows by budget id, then subject: the latest window counted of each (a batch looks up the
   * window in progress; an older one only means a miss). Kept as two maps of ids the engine already
   * holds, so a batch builds no key text per window.
   */
  private readonly windows = new Map<string, Map<string, KeptWindow>>();
  private windowCount = 0;
  private readonly contendedUntil = new Map<string, number>();

  /**
   * The remembered rows for a batch, or undefined when it must take the locking path: only plain
   * deductions (no reservation held, spent or released), each invocation id once, every row
   * remembered, younger than `rememberMs`, not due for its period sync and holding no reservation.
   */
  plan(items: BatchDeduction[]): OptimisticPlan | undefined {
    if (items.length === 0 || this.rememberMs === 0) return undefined;
    const ids = new Set<string>();
    let now = 0;
    for (const it of items) {
      if (it.hold || it.release || it.releaseReserved > 0 || (it.claimInvocation && it.invocationId === null)) return undefined;
      if (it.claimInvocation) {
        const key = `${it.deploymentId}\u0000${it.invocationId}`;
        if (ids.has(key)) return undefined;
        ids.add(key);
      }
      now = Math.max(now, it.now.getTime());
    }
    const rows = new Map<string, { row: BalanceRow; version: string; budgets: RememberedBudgets }>();
    for (const it of items) {
      if (rows.has(it.deploymentId)) continue;
      const known = this.rows.get(it.deploymentId);
      if (!known || now - known.at > this.rememberMs || known.at > now || known.row.sync_before.getTime() <= now) return undefined;
      // Credits held: a record may be spending its reservation, which only the locking path settles.
      if (known.row.reserved !== 0) return undefined;
      // An organization budget's `period` window follows the primary deployment's balance row, whose
      // version this batch may not check: such a batch is computed on the locked rows.
      if (known.budgets.some(followsPrimary)) return undefined;
      rows.set(it.deploymentId, { row: known.row, version: known.version, budgets: known.budgets });
    }
    const windows = this.windows;
    const rememberMs = this.rememberMs;
    return {
      now: new Date(now),
      rows,
      windowVersions: new Map(),
      window(budgetId, subject, start) {
        const known = windows.get(budgetId)?.get(subject);
        if (!known || known.window.start.getTime() !== start.getTime() || now - known.at > rememberMs || known.at > now) return undefined;
        return known;
      },
    };
  }

  /** After a commit: the rows the batch wrote, except those something else in its transaction changed afterwards. */
  remember(written: Written, except: string[]): void {
    if (this.rememberMs === 0) return;
    const now = written.now.getTime();
    for (const id of except) this.rows.delete(id);
    for (const { id, version, row, budgets } of written.versions) {
      this.rows.delete(id);
      if (except.includes(id)) continue;
      const until = this.contendedUntil.get(id);
      if (until !== undefined) {
        if (until > now) continue;
        this.contendedUntil.delete(id);
      }
      this.rows.set(id, { row, version, budgets, at: now });
    }
    for (const id of this.rows.keys()) {
      if (this.rows.size <= REMEMBER_MAX) break;
      this.rows.delete(id);
    }
    // A count the batch's ops may have changed afterwards (a refund) would only be refused: not kept.
    const windows = written.windows;
    if (windows && except.length === 0) {
      for (const c of windows.counters) {
        let bySubject = this.windows.get(c.budgetId);
        if (!bySubject) {
          bySubject = new Map();
          this.windows.set(c.budgetId, bySubject);
        }
        const known = bySubject.get(c.subject);
        if (!known) {
          bySubject.set(c.subject, { id: c.id, window: c.window, spentCredits: c.spentCredits, version: windows.version, at: now });
          this.windowCount++;
        } else if (known.window.start.getTime() <= c.window.start.getTime()) {
          // Updated in place: a plan copies what it reads from here before its batch is sent.
          known.id = c.id;
          known.window = c.window;
          known.spentCredits = c.spentCredits;
          known.version = windows.version;
          known.at = now;
        }
      }
    } else if (windows) {
      for (const c of windows.counters) {
        const bySubject = this.windows.get(c.budgetId);
        if (bySubject?.delete(c.subject)) this.windowCount--;
        if (bySubject?.size === 0) this.windows.delete(c.budgetId);
      }
    }
    for (const [budgetId, bySubject] of this.windows) {
      if (this.windowCount <= REMEMBER_MAX * 4) break;
      this.windows.delete(budgetId);
      this.windowCount -= bySubject.size;
    }
  }

  /** Rows whose state is unknown after a failure. */
  forget(ids: string[]): void {
    for (const id of ids) this.rows.delete(id);
  }

  /** A one-round-trip attempt was refused: these rows are written elsewhere too, so read them for a while. */
  contended(ids: string[], now: Date): void {
    for (const id of ids) {
      this.rows.delete(id);
      this.contendedUntil.set(id, now.getTime() + CONTENDED_MS);
    }
    for (const id of this.contendedUntil.keys()) {
      if (this.contendedUntil.size <= REMEMBER_MAX) break;
      this.contendedUntil.delete(id);
    }
  }
}

/** An organization-wide budget whose `period` window is the primary deployment's credit period (credits/budgets.ts countersFor). */
const followsPrimary = (b: BudgetWithPeriod) => b.window_kind === 'period' && b.deployment_id === null && b.scope !== 'deployment';
