import { sql } from 'drizzle-orm';
import { bigint, check, index, integer, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { apiKeys, organizations } from './accounts.js';
import { deployments } from './deployments.js';

/**
 * Budgets (docs/budgets.md): a cap on what one organization, deployment, API key, end user or tool may
 * spend in a window. A `block` budget is checked and charged by the money engine in the transaction of
 * the charge; an `alert` budget only counts. `end_user_id` / `tool_name` '*' mean each one separately.
 */
export const budgets = pgTable(
  'budgets',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id, { onDelete: 'cascade' }),
    scope: text('scope').notNull(),
    /** The scope's deployment, or the deployment an api_key / end_user / tool budget is narrowed to. */
    deploymentId: uuid('deployment_id').references(() => deployments.id, { onDelete: 'cascade' }),
    apiKeyId: uuid('api_key_id').references(() => apiKeys.id, { onDelete: 'cascade' }),
    endUserId: text('end_user_id'),
    toolName: text('tool_name'),
    limitCredits: bigint('limit_credits', { mode: 'number' }),
    limitAiTokens: bigint('limit_ai_tokens', { mode: 'number' }),
    /** hour | day | week | month | period (the API's `window`; a reserved word in SQL). */
    windowKind: text('window_kind').notNull(),
    mode: text('mode').notNull(),
    alertThresholds: integer('alert_thresholds').array().notNull().default(sql`'{80,100}'`),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    index('budgets_organization_idx').on(t.organizationId),
    check('budgets_scope', sql`${t.scope} IN ('organization', 'deployment', 'api_key', 'end_user', 'tool')`),
    check('budgets_window', sql`${t.windowKind} IN ('hour', 'day', 'week', 'month', 'period')`),
    check('budgets_mode', sql`${t.mode} IN ('block', 'alert')`),
    check('budgets_limits', sql`(${t.limitCredits} IS NULL OR ${t.limitCredits} > 0) AND (${t.limitAiTokens} IS NULL OR ${t.limitAiTokens} > 0)
      AND (${t.limitCredits} IS NOT NULL OR ${t.limitAiTokens} IS NOT NULL)`),
    check(
      'budgets_scope_ids',
      sql`(${t.scope} <> 'deployment' OR ${t.deploymentId} IS NOT NULL) AND ((${t.scope} = 'api_key') = (${t.apiKeyId} IS NOT NULL))
      AND ((${t.scope} = 'end_user') = (${t.endUserId} IS NOT NULL)) AND ((${t.scope} = 'tool') = (${t.toolName} IS NOT NULL))`,
    ),
  ],
);

/**
 * What a budget's window holds: one row per (budget, subject, window start), `subject` the end user or
 * tool of a '*' budget ('' otherwise). Charges name the rows they were counted in (`budget_windows` on
 * usage records, invocations and AI holds), so a release, expiry or refund gives back to exactly those.
 */
export const budgetWindows = pgTable(
  'budget_windows',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    budgetId: uuid('budget_id')
      .notNull()
      .references(() => budgets.id, { onDelete: 'cascade' }),
    subject: text('subject').notNull().default(''),
    windowStart: timestamp('window_start', { withTimezone: true }).notNull(),
    windowEnd: timestamp('window_end', { withTimezone: true }).notNull(),
    spentCredits: bigint('spent_credits', { mode: 'number' }).notNull().default(0),
    spentAiTokens: bigint('spent_ai_tokens', { mode: 'number' }).notNull().default(0),
    /**
     * On the '' row of a '*' budget (no charge is counted there): the budget events written for the
     * window, capped at 100 (docs/budgets.md, Events).
     */
    eventsSent: integer('events_sent').notNull().default(0),
  },
  (t) => [
    uniqueIndex('budget_windows_key').on(t.budgetId, t.subject, t.windowStart),
    index('budget_windows_end_idx').on(t.windowEnd),
    check('budget_windows_spent', sql`${t.spentCredits} >= 0 AND ${t.spentAiTokens} >= 0`),
  ],
);
