import type { ArrayElement } from '../../../db/arrays.js';
import type { ThresholdEvent } from '../../quotas/thresholds.js';
import type { BudgetCounter, BudgetEvent } from '../budget-rules.js';
import { type Change, remaining } from '../rules.js';
import type { BalanceRow } from '../service.js';
import type { OptimisticPlan } from './remembered.js';
import type { BatchDeduction } from './types.js';

/**
 * The arrays of the engine's one write statement (engine/write.ts), each made from what a batch writes:
 * a statement names them (`$bal_id`), and only those it names are built and sent.
 */

/** What a batch writes, as writeBatch sorted it: WRITE_COLUMNS makes the statement's arrays of it. */
export interface BatchWrite {
  items: BatchDeduction[];
  rows: Map<string, BalanceRow>;
  remembered: OptimisticPlan | undefined;
  /** Deployments whose balance row the batch writes. */
  touched: string[];
  /** Remembered rows it does not write. */
  untouched: string[];
  refusedHolds: Change[];
  releases: Change[];
  /** Deductions and spent reservations, deducted or refused: each a usage record. */
  changes: Change[];
  metered: Change[];
  alerts: Array<ThresholdEvent | BudgetEvent>;
  /** Per deployment, the time of its last change in the batch. */
  lastChange: Map<string, Date>;
  /** The budget windows the batch locked, with what its changes left in them. */
  counters: BudgetCounter[];
  /** Holds made and counted in budget windows. */
  heldCounted: Change[];
}

/** A claimed invocation's answer is stored; a spent reservation refused (an adjustment took its credits meanwhile) stays held. */
const claimsInvocation = (w: BatchWrite, c: Change) => w.items[c.index]!.claimInvocation !== undefined && (c.kind === 'deduct' || c.deducted);

/** Every array a write statement can name (`$bal_id`), made from what the batch writes. */
export const WRITE_COLUMNS = {
    bal_id: (w: BatchWrite) => w.touched,
    bal_used: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.monthly_used),
    bal_purchased: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.purchased_balance),
    bal_consumed: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.purchased_consumed),
    bal_reserved: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.reserved),
    bal_at: (w: BatchWrite) => w.touched.map((id) => w.lastChange.get(id)!),
    bal_version: (w: BatchWrite) => w.touched.map((id) => w.remembered!.rows.get(id)!.version),
    unchanged_id: (w: BatchWrite) => w.untouched,
    unchanged_version: (w: BatchWrite) => w.untouched.map((id) => w.remembered!.rows.get(id)!.version),
    refused_deployment: (w: BatchWrite) => w.refusedHolds.map((c) => c.deploymentId),
    refused_invocation: (w: BatchWrite) => w.refusedHolds.map((c) => w.items[c.index]!.invocationId),
    released_deployment: (w: BatchWrite) => w.releases.map((c) => c.deploymentId),
    released_invocation: (w: BatchWrite) => w.releases.map((c) => w.items[c.index]!.invocationId),
    released_at: (w: BatchWrite) => w.releases.map((c) => w.items[c.index]!.now),
    // Every change, read by the ledger, usage and answer inserts alike.
    change_usage: (w: BatchWrite) => w.changes.map((c) => c.usageId),
    change_organization: (w: BatchWrite) => w.changes.map((c) => c.organizationId),
    change_deployment: (w: BatchWrite) => w.changes.map((c) => c.deploymentId),
    change_credits: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? c.cost : 0)),
    change_deducted: (w: BatchWrite) => w.changes.map((c) => c.deducted),
    change_monthly: (w: BatchWrite) => w.changes.map((c) => c.monthlyTaken),
    change_purchased: (w: BatchWrite) => w.changes.map((c) => c.purchasedTaken),
    change_at: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.now),
    // The usage record's own.
    usage_metric: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.action),
    usage_tool: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.toolName),
    usage_mcp_user: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.mcpUserId),
    // A refused call keeps no metadata: refusals cost the caller nothing, so their 16 KiB would be
    // storage for free (docs/metering.md, Denials and what is recorded).
    usage_metadata: (w: BatchWrite) =>
      w.changes.map((c) => {
        const m = w.items[c.index]!.metadata;
        return !c.deducted || m === undefined || m === null ? null : JSON.stringify(m);
      }),
    usage_error: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? null : c.budget ? 'budget_exceeded' : 'insufficient_credits')),
    usage_windows: (w: BatchWrite) => w.changes.map((c) => (c.deducted && c.windows.length > 0 ? c.windows.join(',') : null)),
    win_id: (w: BatchWrite) => w.counters.map((c) => c.id),
    win_spent: (w: BatchWrite) => w.counters.map((c) => c.spentCredits),
    win_version: (w: BatchWrite) => w.counters.map((c) => w.remembered!.windowVersions.get(c.id)!),
    heldwin_deployment: (w: BatchWrite) => w.heldCounted.map((c) => c.deploymentId),
    heldwin_invocation: (w: BatchWrite) => w.heldCounted.map((c) => w.items[c.index]!.invocationId),
    heldwin_windows: (w: BatchWrite) => w.heldCounted.map((c) => c.windows.join(',')),
    usage_invocation: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.invocationId),
    usage_period_start: (w: BatchWrite) => w.changes.map((c) => c.periodStart),
    // The claimed ones' request hash (which marks them), and the credits_remaining of the answer stored
    // for a replay (RECORDED_ANSWER builds the rest from the columns above).
    answer_hash: (w: BatchWrite) => w.changes.map((c) => (claimsInvocation(w, c) ? w.items[c.index]!.claimInvocation!.requestHash : null)),
    answer_remaining: (w: BatchWrite) => w.changes.map((c) => (claimsInvocation(w, c) && c.deducted ? remaining(c.after) : null)),
    // The ledger row's own, for deductions.
    ledger_monthly_after: (w: BatchWrite) =>
      w.changes.map((c) => (!c.deducted || c.after.monthly_allocation === null ? null : Math.max(0, c.after.monthly_allocation - c.after.monthly_used))),
    ledger_purchased_after: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? c.after.purchased_balance : null)),
    ledger_actor: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? w.items[c.index]!.actor : null)),
    meter_usage: (w: BatchWrite) => w.metered.map((c) => c.usageId),
    meter_organization: (w: BatchWrite) => w.metered.map((c) => c.organizationId),
    meter_deployment: (w: BatchWrite) => w.metered.map((c) => c.deploymentId),
    meter_value: (w: BatchWrite) => w.metered.map((c) => c.cost),
    meter_at: (w: BatchWrite) => w.metered.map((c) => w.items[c.index]!.now),
    alert_organization: (w: BatchWrite) => w.alerts.map((a) => a.organizationId),
    alert_deployment: (w: BatchWrite) => w.alerts.map((a) => a.deploymentId),
    alert_type: (w: BatchWrite) => w.alerts.map((a) => ('type' in a ? a.type : 'quota.threshold')),
    alert_data: (w: BatchWrite) => w.alerts.map((a) => JSON.stringify(a.data)),
    alert_key: (w: BatchWrite) => w.alerts.map((a) => a.dedupeKey),
    alert_at: (w: BatchWrite) => w.alerts.map((a) => a.at),
} satisfies Record<string, (w: BatchWrite) => ArrayElement[]>;
export type WriteColumn = keyof typeof WRITE_COLUMNS;
/** The arrays a write statement may name (tests hold every statement to them). */
export const WRITE_COLUMN_NAMES: readonly string[] = Object.keys(WRITE_COLUMNS);
