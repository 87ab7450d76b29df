import { sql } from 'drizzle-orm';
import { bigint, boolean, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';

export const deployments = pgTable(
  'deployments',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    name: text('name').notNull(),
    tier: text('tier').notNull(),
    status: text('status').notNull().default('active'),
    isPrimary: boolean('is_primary').notNull().default(false),
    secretHash: text('secret_hash').notNull(),
    secretPrefix: text('secret_prefix').notNull(),
    billingAnchor: timestamp('billing_anchor', { withTimezone: true }).notNull(),
    /** Operator per-flag overrides (docs/entitlements.md, Flags and gates): {flag: boolean}; a flag absent here follows the tier. */
    flagOverrides: jsonb('flag_overrides').notNull().default(sql`'{}'::jsonb`),
    /** Operator overrides (docs/metering.md, docs/operator.md); null = the tier's value. One expiry for the set. */
    overrideMonthlyCredits: bigint('override_monthly_credits', { mode: 'number' }),
    overrideApiRateLimit: integer('override_api_rate_limit'),
    overrideAiTokensLimit: bigint('override_ai_tokens_limit', { mode: 'number' }),
    overrideExpiresAt: timestamp('override_expires_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('deployments_primary_key').on(t.organizationId).where(sql`${t.isPrimary}`),
    uniqueIndex('deployments_secret_hash_key').on(t.secretHash),
    index('deployments_org_idx').on(t.organizationId),
  ],
);
