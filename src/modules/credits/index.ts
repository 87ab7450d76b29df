/**
 * The credits module's one entry point (docs/adr/0003-credits-owns-money.md, docs/adr/0006-one-money-engine.md):
 * every other module imports credits from here and nowhere else (test/money-writers.unit.test.ts).
 * The verbs below are the only ways money moves; they decide nothing about HTTP and never expose the
 * engine's batches.
 */

// Usage and its deduction, holds and releases: through the money engine (credits/engine/).
export { type RecordedUsage, recordDeniedUsage, recordUsage, type UsageRequest } from './record.js';
export {
  IDEMPOTENCY_WINDOW_MS,
  apiKeyOf,
  budgetRefusal,
  type InvocationRow,
  type PaymentRequired,
  releaseInvocationHold,
  reserveInvocation,
  type ReserveOutcome,
  type StoredRecordAnswer,
} from './invocations.js';
export { type DeductResult, remaining, remainingAfter } from './rules.js';
export { budgetThatRefuses } from './budget-check.js';
export { DeductionBatcher } from './engine/queue.js';
export type { BatchSettings } from './engine/types.js';
export { expireReservations, pruneInvocations, RESERVATION_TTL_MS } from './reservations.js';

// AI tokens: holds and settlements of the AI proxy (docs/ai-proxy.md).
export {
  aiQuotaExceeded,
  aiTokensFree,
  type AiCharge,
  type AiHold,
  creditsForTokens,
  type AiUsageResult,
  expireAiHolds,
  holdAiTokens,
  pruneAiHolds,
  releaseAiHold,
  settleAiTokens,
} from './ai-usage.js';

// Purchased credits, grants, refunds and the period's terms.
export { grantPack, recordPackCheckout, reinstateDispute, storedPackSale, takeBackDispute, takeBackRefund } from './purchases.js';
export {
  adoptPaymentIntent,
  askAutoTopUp,
  askDueAutoTopUps,
  AUTO_TOP_UP_RETRY_MS,
  type AutoTopUpRow,
  type AutoTopUpStatus,
  autoTopUpOfPaymentIntent,
  grantAutoTopUp,
  listAutoTopUps,
  lockAutoTopUp,
  fixPaymentMethod,
  markFailed,
  markSkipped,
  markStarted,
  markStarting,
  retryAutoTopUpAt,
  setAutoTopUpLine,
  startedThisMonth,
} from './auto-top-ups.js';
export { refundUsage } from './refunds.js';
export { deleteExpiredUsage } from './retention.js';
export { backfillRollupsStep, rollupBackfillLag } from './rollup-backfill.js';
export { ensureUsagePartitions, monthPartition, monthStart, usagePartitions } from './partitions.js';
export {
  type BalanceRow,
  type BalanceView,
  changePurchased,
  openBalance,
  purchasedFloor,
  readBalance,
  resetUsage,
  syncBalance,
  viewBalance,
} from './service.js';
export { type DeploymentTerms, effectiveTerms } from './terms.js';
export { followSubscriptionPeriod } from './subscription-period.js';

// Budgets (docs/budgets.md): the rule's names, the version bump every budget change makes in its
// transaction, and what a budget has counted in its window in progress.
export { BUDGET_SCOPES, BUDGET_WINDOWS, type BudgetRow, type BudgetScope, type BudgetWindowKind, EACH } from './budget-rules.js';
export {
  budgetEventFate,
  budgetsChanged,
  budgetWindowKindChanged,
  type BudgetStanding,
  budgetStandings,
  forgetOrganizationBalances,
  pruneEachBudgetWindows,
} from './budgets.js';

// Reads: the balance a check may use, and the summary a dashboard shows.
export { cachedBalance, forgetBalance, loadBalance, readBalanceOfRecord, rememberBalance } from './balance-cache.js';
export { BalanceReads } from './balance-reads.js';
export { type BalanceSummary, BalanceSummarySchema, summarizeBalance } from './summary.js';

// The Stripe meter's outbox, which the deduction writes and billing sends.
export {
  claimMeterEvents,
  markMeterFailed,
  markMeterReported,
  markMeterRetry,
  markMeterSkipped,
  type MeterEventRow,
} from './meter-outbox.js';
