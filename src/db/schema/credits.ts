import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';
import { deployments } from './deployments.js';

/**
 * One row per deployment: the two buckets (docs/metering.md) for the current period.
 * monthly available = GREATEST(0, monthly_allocation - monthly_used); NULL allocation = unlimited.
 * `reserved` holds credits promised to open reservations (docs/metering.md, Reservations) and is not spendable by others.
 * `sync_before` is the earliest moment the row must be brought up to date (period end, override expiry):
 * the hot path only touches rows with sync_before > now, so a stale row always takes the slow path first.
 */
export const creditBalances = pgTable(
  'credit_balances',
  {
    deploymentId: uuid('deployment_id')
      .primaryKey()
      .references(() => deployments.id),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    periodStart: timestamp('period_start', { withTimezone: true }).notNull(),
    periodEnd: timestamp('period_end', { withTimezone: true }).notNull(),
    syncBefore: timestamp('sync_before', { withTimezone: true }).notNull(),
    monthlyAllocation: bigint('monthly_allocation', { mode: 'number' }),
    monthlyUsed: bigint('monthly_used', { mode: 'number' }).notNull().default(0),
    purchasedBalance: bigint('purchased_balance', { mode: 'number' }).notNull().default(0),
    reserved: bigint('reserved', { mode: 'number' }).notNull().default(0),
    aiTokensUsed: bigint('ai_tokens_used', { mode: 'number' }).notNull().default(0),
    /** Of ai_tokens_used, the tokens past the quota (paid with purchased credits, or short): quota used = the difference. */
    aiTokensOverLimit: bigint('ai_tokens_over_limit', { mode: 'number' }).notNull().default(0),
    /** Quota tokens held by AI calls in flight (ai_reservations); not available to another call. */
    aiTokensReserved: bigint('ai_tokens_reserved', { mode: 'number' }).notNull().default(0),
    /** The part of `reserved` held by AI calls in flight: purchased credits only (AI never spends the monthly bucket). */
    aiCreditsReserved: bigint('ai_credits_reserved', { mode: 'number' }).notNull().default(0),
    /** Running total of purchased credits ever spent; positions expiring grants in the spending order (credit_grants). */
    purchasedConsumed: bigint('purchased_consumed', { mode: 'number' }).notNull().default(0),
    /**
     * Credits a provider's over-report left unpaid (docs/ai-proxy.md, "What a provider's over-report
     * costs"): no AI call starts while it is above 0, and credits added later pay it first.
     */
    creditsOwed: bigint('credits_owed', { mode: 'number' }).notNull().default(0),
    /** The organization has (or had) budgets (docs/budgets.md): a check reads them; set by every budget change. */
    hasBudgets: boolean('has_budgets').notNull().default(false),
    /**
     * Auto top-up (docs/billing.md, "Auto top-up"): the organization's line while it is enabled, else NULL.
     * A deduction that takes the row's available credits from at or above it to below asks for one top-up
     * (the trigger of migration 0024 inserts an `auto_top_ups` row, one open per deployment).
     */
    autoTopUpBelow: bigint('auto_top_up_below', { mode: 'number' }),
    /** When a deduction that leaves the row below the line asks for a top-up even without crossing it (enabled below the line, or an hour after a failure). */
    autoTopUpDueAt: timestamp('auto_top_up_due_at', { withTimezone: true }),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check('credit_balances_purchased_nonneg', sql`${t.purchasedBalance} >= 0`),
    check('credit_balances_used_nonneg', sql`${t.monthlyUsed} >= 0`),
    check('credit_balances_reserved_nonneg', sql`${t.reserved} >= 0`),
    check('credit_balances_allocation_nonneg', sql`${t.monthlyAllocation} IS NULL OR ${t.monthlyAllocation} >= 0`),
    check('credit_balances_ai_reserved_nonneg', sql`${t.aiTokensReserved} >= 0 AND ${t.aiCreditsReserved} >= 0`),
    check('credit_balances_ai_credits_within_reserved', sql`${t.aiCreditsReserved} <= ${t.reserved}`),
    check('credit_balances_ai_over_bound', sql`${t.aiTokensOverLimit} >= 0 AND ${t.aiTokensOverLimit} <= ${t.aiTokensUsed}`),
    check('credit_balances_owed_nonneg', sql`${t.creditsOwed} >= 0`),
  ],
);

/**
 * Append-only (a trigger refuses UPDATE and DELETE). Per bucket deltas of the *available* balance:
 * SUM(monthly_delta) = monthly available (0 while unlimited), SUM(purchased_delta) = purchased_balance.
 */
export const creditLedger = pgTable(
  'credit_ledger',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    kind: text('kind').notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    monthlyDelta: bigint('monthly_delta', { mode: 'number' }).notNull(),
    purchasedDelta: bigint('purchased_delta', { mode: 'number' }).notNull(),
    monthlyAfter: bigint('monthly_after', { mode: 'number' }),
    purchasedAfter: bigint('purchased_after', { mode: 'number' }).notNull(),
    actor: text('actor').notNull(),
    usageId: uuid('usage_id'),
    reason: text('reason'),
    expiresAt: timestamp('expires_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('credit_ledger_deployment_idx').on(t.deploymentId, t.id),
    // The few rows that are not a call's deduction (grants, refunds, resets, expiries, adjustments, owed
    // repayments), by time: the balance history walks back over them (docs/usage-analytics.md).
    index('credit_ledger_changes_idx')
      .on(t.deploymentId, t.createdAt)
      .where(sql`${t.kind} <> 'deduct' OR ${t.reason} = 'owed'`),
    check(
      'credit_ledger_kind',
      sql`${t.kind} IN ('grant', 'deduct', 'refund', 'period_reset', 'expire', 'adjust')`,
    ),
  ],
);

export const creditCosts = pgTable('credit_costs', {
  action: text('action').primaryKey(),
  credits: integer('credits').notNull(),
  description: text('description'),
  updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
});

export const toolActions = pgTable('tool_actions', {
  toolName: text('tool_name').primaryKey(),
  action: text('action')
    .notNull()
    .references(() => creditCosts.action),
  updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
});

/** Every metered call (docs/metering.md): metric = action, quantity = credits deducted. */
export const usageRecords = pgTable(
  'usage_records',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    metric: text('metric').notNull(),
    quantity: bigint('quantity', { mode: 'number' }).notNull(),
    toolName: text('tool_name').notNull(),
    mcpUserId: text('mcp_user_id'),
    metadata: jsonb('metadata'),
    success: boolean('success').notNull(),
    error: text('error'),
    ledgerId: bigint('ledger_id', { mode: 'number' }),
    invocationId: text('invocation_id'),
    monthlyTaken: bigint('monthly_taken', { mode: 'number' }).notNull().default(0),
    purchasedTaken: bigint('purchased_taken', { mode: 'number' }).notNull().default(0),
    refunded: bigint('refunded', { mode: 'number' }).notNull().default(0),
    /** An AI call's credits that could not be charged (its provider reported more than was held); added to credits_owed. */
    creditsShort: bigint('credits_short', { mode: 'number' }).notNull().default(0),
    periodStart: timestamp('period_start', { withTimezone: true }),
    /** The budget windows this usage was counted in (docs/budgets.md): a refund gives back to them. */
    budgetWindows: uuid('budget_windows').array(),
    reported: boolean('reported').notNull().default(false),
    processorRef: text('processor_ref'),
    /**
     * The record is counted in the rollups (docs/usage-analytics.md, "Rollups"). New records are (the
     * insert trigger counts them); records older than the rollups were not, until the
     * `usage-rollup-backfill` worker sets the flag, which makes the update trigger count them whole.
     */
    rolledUp: boolean('rolled_up').notNull().default(true),
    timestamp: timestamp('timestamp', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('usage_records_deployment_ts_idx').on(t.deploymentId, t.timestamp),
    index('usage_records_org_ts_idx').on(t.organizationId, t.timestamp),
    check('usage_records_refund_bound', sql`${t.refunded} >= 0 AND ${t.refunded} <= ${t.quantity}`),
    check('usage_records_short_nonneg', sql`${t.creditsShort} >= 0`),
    // The records that owe, oldest first: an owed payment names the oldest unpaid one (credits/owed.ts).
    index('usage_records_owing_idx')
      .on(t.deploymentId, t.timestamp, t.id)
      .where(sql`${t.creditsShort} > 0`),
  ],
);

/**
 * AI token accounting is idempotent per (deployment, request id) (credits/ai-usage.ts): the request id
 * names the usage record it made. Its own table, unpartitioned, because usage_records is partitioned by
 * month (docs/usage-analytics.md, "Partitions"), where a unique index must include the month.
 */
export const aiUsageRequests = pgTable(
  'ai_usage_requests',
  {
    deploymentId: uuid('deployment_id').notNull(),
    requestId: text('request_id').notNull(),
    usageId: uuid('usage_id').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.deploymentId, t.requestId] })],
);

/**
 * The rollups' backfill of the records older than them (docs/usage-analytics.md, "Rollups"): one row.
 * `relation` and `next_page` are where the `usage-rollup-backfill` worker goes on; `done_at` is set
 * once no record is left uncounted. While it is NULL the summary reports the lag.
 */
export const usageRollupBackfill = pgTable('usage_rollup_backfill', {
  id: integer('id').primaryKey(),
  startedAt: timestamp('started_at', { withTimezone: true }).notNull(),
  relation: text('relation'),
  nextPage: bigint('next_page', { mode: 'number' }).notNull().default(0),
  doneAt: timestamp('done_at', { withTimezone: true }),
});

/** The counts both rollups keep (fresh column builders per table). */
const rollupCounts = () => ({
  calls: bigint('calls', { mode: 'number' }).notNull(),
  successful: bigint('successful', { mode: 'number' }).notNull(),
  credits: bigint('credits', { mode: 'number' }).notNull(),
  refunded: bigint('refunded', { mode: 'number' }).notNull(),
  inputTokens: bigint('input_tokens', { mode: 'number' }).notNull(),
  outputTokens: bigint('output_tokens', { mode: 'number' }).notNull(),
});

/**
 * Rollups of usage_records (docs/usage-analytics.md, "Rollups"): what the usage summary reads, so its
 * cost follows the range, not the history. Kept exact by statement triggers on usage_records
 * (migration 0025): every insert adds its records' counts, every change of `refunded` its difference,
 * in the writing statement's own transaction. `credits` is the successful records' quantity before
 * refunds, `refunded` their refunded credits; tokens are AI calls' (metric `ai_tokens`).
 * A: per deployment, UTC hour, tool, action and model ('' for anything but AI calls).
 */
export const usageRollupHours = pgTable(
  'usage_rollup_hours',
  {
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    hour: timestamp('hour', { withTimezone: true }).notNull(),
    toolName: text('tool_name').notNull(),
    action: text('action').notNull(),
    model: text('model').notNull(),
    ...rollupCounts(),
  },
  (t) => [
    primaryKey({ columns: [t.deploymentId, t.hour, t.toolName, t.action, t.model] }),
    index('usage_rollup_hours_org_idx').on(t.organizationId, t.hour),
  ],
);

/** B: per deployment, UTC day and end user ('' for calls without one). The same counts as A. */
export const usageRollupDays = pgTable(
  'usage_rollup_days',
  {
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    day: timestamp('day', { withTimezone: true }).notNull(),
    endUser: text('end_user').notNull(),
    ...rollupCounts(),
  },
  (t) => [primaryKey({ columns: [t.deploymentId, t.day, t.endUser] }), index('usage_rollup_days_org_idx').on(t.organizationId, t.day)],
);

/**
 * Idempotency and reservations (docs/metering.md), one row per (deployment, invocation id), kept 24 h.
 * status: reserved | recorded | released | expired | refunded | denied
 */
export const invocations = pgTable(
  'invocations',
  {
    deploymentId: uuid('deployment_id').notNull(),
    invocationId: text('invocation_id').notNull(),
    organizationId: uuid('organization_id').notNull(),
    toolName: text('tool_name').notNull(),
    requestHash: text('request_hash'),
    status: text('status').notNull(),
    reservedAmount: bigint('reserved_amount', { mode: 'number' }).notNull().default(0),
    reservationExpiresAt: timestamp('reservation_expires_at', { withTimezone: true }),
    usageId: uuid('usage_id'),
    /** The budget windows a reservation's hold was counted in (docs/budgets.md): its record inherits them, its release gives back. */
    budgetWindows: uuid('budget_windows').array(),
    response: jsonb('response'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.deploymentId, t.invocationId] }),
    index('invocations_reservation_expiry_idx')
      .on(t.reservationExpiresAt)
      .where(sql`${t.status} = 'reserved'`),
    index('invocations_created_idx').on(t.createdAt),
  ],
);

/** Partial refunds of a usage record, idempotent per (usage, key). */
export const usageRefunds = pgTable(
  'usage_refunds',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    usageId: uuid('usage_id').notNull(),
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    idempotencyKey: text('idempotency_key').notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    reason: text('reason').notNull(),
    /** The monthly part of an ended period: settled against the usage but not given back (docs/metering.md, Refunds). */
    forfeited: bigint('forfeited', { mode: 'number' }).notNull().default(0),
    ledgerId: bigint('ledger_id', { mode: 'number' }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
  },
  (t) => [uniqueIndex('usage_refunds_key').on(t.usageId, t.idempotencyKey)],
);

/**
 * Purchased-credit grants that expire (docs/metering.md, Expiring grants). Spending takes
 * the soonest-expiring grant first; `consumed_mark` is credit_balances.purchased_consumed when
 * `remaining` was last settled, so the spending since then can be attributed without touching these
 * rows on the hot path. Grants without expiry are not tracked here: they are simply purchased credits.
 */
export const creditGrants = pgTable(
  'credit_grants',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    remaining: bigint('remaining', { mode: 'number' }).notNull(),
    consumedMark: bigint('consumed_mark', { mode: 'number' }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    expiredAt: timestamp('expired_at', { withTimezone: true }),
    reason: text('reason'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    index('credit_grants_active_idx')
      .on(t.deploymentId, t.expiresAt)
      .where(sql`${t.expiredAt} IS NULL`),
    check('credit_grants_remaining_bound', sql`${t.remaining} >= 0 AND ${t.remaining} <= ${t.amount}`),
  ],
);

/**
 * An AI call in flight (docs/ai-proxy.md): what it holds from the period's AI tokens and from purchased
 * credits until it settles to the provider's usage. A hold left by a process that died is released by
 * the `ai-holds` worker once `expires_at` passes. status: held | settled | released | expired
 */
export const aiReservations = pgTable(
  'ai_reservations',
  {
    id: uuid('id').primaryKey(),
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id')
      .notNull()
      .references(() => deployments.id),
    model: text('model').notNull(),
    modelClass: text('model_class').notNull(),
    promptTokens: bigint('prompt_tokens', { mode: 'number' }).notNull(),
    /** Output tokens the call may produce (all choices together); sent upstream as its max tokens per choice. */
    outputAllowance: bigint('output_allowance', { mode: 'number' }).notNull(),
    tokensHeld: bigint('tokens_held', { mode: 'number' }).notNull(),
    creditsHeld: bigint('credits_held', { mode: 'number' }).notNull(),
    /**
     * The budget windows the hold was counted in (docs/budgets.md, AI calls): credits_held credits and
     * prompt_tokens + output_allowance tokens, given back or settled to the call's usage there.
     */
    budgetWindows: uuid('budget_windows').array(),
    status: text('status').notNull(),
    usageId: uuid('usage_id'),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    index('ai_reservations_held_expiry_idx')
      .on(t.expiresAt)
      .where(sql`${t.status} = 'held'`),
    index('ai_reservations_created_idx').on(t.createdAt),
    check('ai_reservations_status', sql`${t.status} IN ('held', 'settled', 'released', 'expired')`),
    check('ai_reservations_nonneg', sql`${t.tokensHeld} >= 0 AND ${t.creditsHeld} >= 0`),
  ],
);
