import type { Deps } from '../../context.js';
import { budgetThatRefuses, expireReservations, loadBalance, readBalanceOfRecord, rememberBalance, viewBalance } from '../credits/index.js';
import { effectiveFlags } from '../entitlements/flags.js';
import type { DeploymentState } from './state.js';

export type DenialReason =
  | 'sandbox_tier'
  | 'insufficient_credits'
  | 'no_deployment_found'
  | 'deployment_not_found'
  | 'mcp_disabled'
  | 'budget_exceeded';

export interface Decision {
  allowed: boolean;
  reason: DenialReason | null;
  tier: string | null;
  /** Spendable credits now (null = unlimited, or unknown for a missing deployment). */
  available: number | null;
  state: DeploymentState | null;
  /** A block budget the call would cross (reason budget_exceeded): which one, and when its window ends. */
  budget?: { id: string; resetsAt: Date };
}

/** Who a check is for, as a charge would be counted in budgets (docs/budgets.md). */
export interface CheckSubject {
  apiKeyId: string | null;
  endUserId: string | null;
  toolName: string;
}

/**
 * The reason order of a denial (docs/metering.md, Denials and what is recorded): deployment missing, suspended (or its organization deleted), sandbox
 * tier, MCP disabled. The balance is judged by the caller (check compares, record deducts).
 * `missing` names the reason for a deployment that is not there (stdio: no_deployment_found).
 */
export function gate(state: DeploymentState | null, missing: DenialReason): Decision | null {
  if (!state) return { allowed: false, reason: missing, tier: null, available: null, state };
  if (state.status !== 'active' || state.org_deleted) {
    return { allowed: false, reason: 'deployment_not_found', tier: null, available: null, state };
  }
  if (state.tier === 'sandbox') {
    return { allowed: false, reason: 'sandbox_tier', tier: state.tier, available: null, state };
  }
  if (!effectiveFlags(state.tier, state.flag_overrides).mcp_enabled) {
    return { allowed: false, reason: 'mcp_disabled', tier: state.tier, available: null, state };
  }
  return null;
}

/** The full check: gates, then the spendable balance against the cost, then the block budgets the call falls under. */
export async function decide(
  deps: Deps,
  state: DeploymentState | null,
  missing: DenialReason,
  cost: number,
  subject?: CheckSubject,
): Promise<Decision> {
  const denied = gate(state, missing);
  if (denied) return denied;
  const s = state!;
  const now = deps.clock.now();
  const read = async () => {
    const row = await readBalanceOfRecord(deps, s.deployment_id, now);
    rememberBalance(deps, row);
    return row;
  };
  // A recent copy of this instance may answer "allowed" (the check is advisory, docs/adr/0005-cached-checks.md; record-usage
  // deducts under the row lock); a refusal is always judged on the row of record read for this check.
  // Without a copy, the checks of one deployment that miss together share one read, and the reads of
  // many deployments share one statement (credits/balance-reads.ts).
  const cached = s.balance !== null && s.balance.sync_before.getTime() > now.getTime();
  let balance = cached ? s.balance! : await loadBalance(deps, s.deployment_id, now);
  // A shared read was judged current at its first caller's clock; a boundary since then reads again.
  if (balance.sync_before.getTime() <= now.getTime()) balance = await read();
  let available = viewBalance(balance).available;
  if (available !== null && available < cost) {
    // The copy, or a read another check began, may predate a grant: a refusal reads again for itself.
    balance = await read();
    available = viewBalance(balance).available;
  }
  if (available !== null && available < cost && balance.reserved > 0 && (await expireReservations(deps.db, now, s.deployment_id)) > 0) {
    // Holds past their 5 minutes are not the deployment's to lose: release them before refusing.
    available = viewBalance(await read()).available;
  }
  if (available !== null && available < cost) {
    return { allowed: false, reason: 'insufficient_credits', tier: s.tier, available, state: s };
  }
  // Budgets are read only for an organization that has them (the balance row's mark, docs/budgets.md).
  if (subject && balance.has_budgets) {
    const budget = await budgetThatRefuses(
      deps.db,
      { organizationId: s.organization_id, deploymentId: s.deployment_id, ...subject },
      cost,
      now,
      { start: balance.period_start, end: balance.period_end },
    );
    if (budget) return { allowed: false, reason: 'budget_exceeded', tier: s.tier, available, state: s, budget };
  }
  return { allowed: true, reason: null, tier: s.tier, available, state: s };
}
