import { TtlCache } from './cache.js';
import type { RecordResult, ServiceCheckResult, StdioCheckResult } from './types.js';

type CheckResult = StdioCheckResult | ServiceCheckResult;

/**
 * Refusals for money: a top-up, a budget's window reset or a raised limit can lift them at any moment,
 * and then no answer of the scope may stand (a cached "allowed" would hide them, too).
 */
const MONEY_REFUSALS: ReadonlySet<string | null> = new Set(['insufficient_credits', 'budget_exceeded']);

/**
 * The client's memory of check-entitlement answers per scope (a deployment id, or 'stdio'), and of
 * the spendable balance the service last reported for it. A denial for credits or by a budget is
 * never kept, and drops the scope's kept answers; an "allowed" is reused only while that balance
 * still covers its cost.
 */
export class CheckCache {
  private readonly checks: TtlCache<CheckResult>;
  /** Spendable credits last reported per scope; null = unlimited. */
  private readonly balances = new Map<string, number | null>();

  constructor(
    now: () => number,
    private readonly ttlMs: number,
  ) {
    this.checks = new TtlCache(now);
  }

  private key(scope: string, tool: string): string {
    return `${scope}\u0000${tool}`;
  }

  get<R extends CheckResult>(scope: string, tool: string): R | undefined {
    const hit = this.checks.get(this.key(scope, tool)) as R | undefined;
    if (!hit?.allowed) return hit;
    const balance = this.balances.get(scope);
    return balance === undefined || balance === null || balance >= hit.credit_cost ? hit : undefined;
  }

  /** Learns from a check answer (plain or reservation); keeps a plain one unless it is a denial for credits. */
  noteCheck(scope: string, tool: string, result: CheckResult, cacheable: boolean): void {
    if (MONEY_REFUSALS.has(result.reason)) this.checks.deletePrefix(`${scope}\u0000`);
    else if (cacheable) this.checks.set(this.key(scope, tool), result, this.ttlMs);
    if (!result.allowed) return;
    // An allowed answer says the balance covers the cost now; stdio answers do not say how much is left.
    if ('credits_available' in result) this.balances.set(scope, result.credits_available);
    else this.balances.delete(scope);
  }

  noteRecord(scope: string, result: RecordResult, replayed: boolean): void {
    // A replay repeats the first answer, whose balance may be old.
    if (!replayed) this.balances.set(scope, result.credits_remaining);
    if (!result.success && MONEY_REFUSALS.has(result.error)) this.checks.deletePrefix(`${scope}\u0000`);
  }

  clear(): void {
    this.checks.clear();
    this.balances.clear();
  }
}
