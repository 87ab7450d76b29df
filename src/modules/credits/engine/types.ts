import type { BudgetCounter, ChargeSubject } from '../budget-rules.js';
import type { Queryable } from '../../../db/client.js';
import type { DeductResult } from '../rules.js';

export interface BatchSettings {
  /** How long the first request of a batch waits for company when no batch is in flight (0: none). */
  windowMs: number;
  /** Requests per batch at most. */
  maxBatch: number;
  /** Batches (connections) in flight at once, per instance. */
  maxInFlight: number;
  /** How long a committed balance row is remembered for a one-round-trip batch (0: every batch reads and locks its rows). */
  rememberMs?: number;
}

/**
 * One money request to the engine: a deduction by default (a usage record and, when it succeeds, its
 * ledger row), or a hold or a release. With `claimInvocation` the request's invocation row is created
 * in the batch.
 */
export interface BatchDeduction {
  deploymentId: string;
  organizationId: string;
  cost: number;
  now: Date;
  /** The usage record's metric. */
  action: string;
  toolName: string;
  mcpUserId: string | null;
  metadata: unknown;
  /** The ledger row's actor. */
  actor: string;
  /** The API key that authenticated the call, for its `api_key` budgets (docs/budgets.md). */
  apiKeyId?: string | null | undefined;
  invocationId: string | null;
  /** Credits this deployment's own reservation held for this call; the deduction frees them. */
  releaseReserved: number;
  /** A fresh idempotent record: claim (deployment, invocationId) and mark it recorded with the answer. */
  claimInvocation?: { requestHash: string } | undefined;
  /**
   * The caller's transaction holds this invocation's row already (inserted or locked; `pending`, or
   * `reserved` for its own hold or for the hold a record spends): the batch neither claims nor looks
   * it up. It deducts (spending `releaseReserved` of the row's hold, which no sweep of the batch then
   * expires) or holds, and a record's answer (`claimInvocation`) is written with it. Only for
   * `applyOne` in the caller's transaction (credits/invocations.ts).
   */
  owned?: true;
  /** An owned spend's: the budget windows its hold was counted in, which its usage record inherits. */
  heldWindows?: string[] | undefined;
  /**
   * A reservation (check with `reserve: true`, docs/metering.md) instead of a deduction: claim the invocation
   * as `reserved` until `expiresAt` and hold `cost` by the same rule and in the same arrival order as
   * the deductions; no ledger or usage row. A refused hold leaves no invocation row. `result.deducted`
   * says whether the credits are held.
   */
  hold?: { expiresAt: Date };
  /**
   * A release of this invocation's reservation (docs/metering.md, Reservations) instead of a deduction: its held credits go
   * back (`reserved` shrinks) in arrival order with the batch. `cost` is ignored; the outcome's `cost` is
   * what was given back, and `result.deducted` false means nothing was held.
   */
  release?: true;
}

/**
 * `claimed: false`: the invocation id exists already in a state the batch does not settle (a replay,
 * a reuse, an overdue reservation…); the credits verb that submitted it takes the invocation path
 * (credits/invocations.ts), which settles it through the same plan as a batch of one.
 * `cost`: what the request deducted or would have (a spent reservation's price was fixed when it was
 * held), or for a release what was given back.
 */
export type BatchOutcome = { claimed: false } | { claimed: true; result: DeductResult; cost: number };

/**
 * The budget windows an op counts in (docs/budgets.md, AI calls), found and locked with the batch's in
 * the one order every writer keeps (balance rows, then windows by budget, subject, window start), so an
 * op never locks a window out of that order.
 */
export interface OpBudgets {
  /** A charge the op makes now: the windows of every budget it falls under (an AI call's). */
  charge?: ChargeSubject & { at: Date };
  /** Windows the op adjusts by id: those a hold was counted in, settled or given back by the op. */
  windows?: readonly string[];
}

/**
 * A money change that is not a deduction (an AI hold or settlement, a refund), run inside a batch's
 * transaction so it shares the batch's commit: its deployment's balance row is locked with the batch's
 * (in deployment order), then `apply` runs after the batch's writes under a savepoint, so an op that
 * fails (a refusal, a bad request) undoes only itself. With `budgets`, `apply` is handed the window
 * rows locked for it: the charge's (in progress at its time), then those named by id.
 */
export interface BatchOp {
  deploymentId: string;
  budgets?: OpBudgets | undefined;
  apply: (tx: Queryable, windows: BudgetCounter[]) => Promise<unknown>;
}
