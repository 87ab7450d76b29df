import type { Deps } from '../../context.js';
import type { DeductResult } from './rules.js';
import { type BalanceRow, currentBalance } from './service.js';

/**
 * The balance an advisory check may read without a round trip (docs/adr/0005-cached-checks.md).
 * A cached row is at most `BALANCE_CACHE_MS` old (1 s by default); this instance's deductions write
 * through to it; grants, refunds and adjustments drop it on every instance. Checks never refuse on a
 * cached row (metering/decide.ts reads the database first), so the staleness can only let a check say
 * "allowed" to a call that record-usage then refuses: the advisory check of docs/adr/0005-cached-checks.md, never a lost credit.
 */
export function cachedBalance(deps: Pick<Deps, 'caches'>, deploymentId: string): BalanceRow | null {
  return deps.caches.balances.get(deploymentId) ?? null;
}

/**
 * The row of record for a check, through the gathered reads (balance-reads.ts); a row past its
 * `sync_before` (period or override boundary, an expiring grant) is brought up to date first, as
 * `readBalance` does.
 */
export async function readBalanceOfRecord(deps: Pick<Deps, 'db' | 'balanceReads'>, deploymentId: string, now: Date): Promise<BalanceRow> {
  return currentBalance(deps.db, deploymentId, await deps.balanceReads.read(deploymentId), now, 'system');
}

/**
 * A recent copy of this instance, else the row of record, read once for every check of the deployment
 * that misses while it is read (`TtlCache.load`: a hot deployment's hundred checks in flight when its
 * copy expires make one read, not a hundred) and remembered unless an invalidation came meanwhile.
 */
export function loadBalance(deps: Pick<Deps, 'db' | 'balanceReads' | 'caches'>, deploymentId: string, now: Date): Promise<BalanceRow> {
  return deps.caches.balances.load(deploymentId, () => readBalanceOfRecord(deps, deploymentId, now));
}

export function rememberBalance(deps: Pick<Deps, 'caches'>, row: BalanceRow): void {
  deps.caches.balances.set(row.deployment_id, row);
}

/** After a committed deduction: the cached row takes the amounts the deduction left. */
export function noteDeduction(deps: Pick<Deps, 'caches'>, deploymentId: string, after: DeductResult): void {
  const row = deps.caches.balances.get(deploymentId);
  if (!row || !after.found) return;
  // Batches on other connections may answer out of order, and a period may have turned: a result that
  // does not move forward from the cached row makes it doubtful, and a doubtful row is dropped.
  const older =
    after.monthly_used < row.monthly_used || (after.monthly_used === row.monthly_used && after.purchased_balance > row.purchased_balance);
  if (older) {
    deps.caches.balances.delete(deploymentId);
    return;
  }
  // The row keeps its expiry: its other columns (AI holds, the period) are still only as fresh as its read.
  deps.caches.balances.replace(deploymentId, {
    ...row,
    monthly_allocation: after.monthly_allocation,
    monthly_used: after.monthly_used,
    purchased_balance: after.purchased_balance,
    reserved: after.reserved,
  });
}

/**
 * After a committed change that is not a deduction: this instance forgets the row at once; with
 * `everywhere` (grants, refunds, adjustments: rare, and a buyer expects to see them) every instance does.
 */
export function forgetBalance(deps: Pick<Deps, 'caches' | 'bus'>, deploymentId: string, everywhere = false): void {
  if (everywhere) deps.bus.publish('balance-cache', deploymentId);
  else deps.caches.balances.delete(deploymentId);
}
