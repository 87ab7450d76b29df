import { sql } from 'drizzle-orm';
import { boolean, check, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';

/**
 * SPEC §12 templates: the operator's catalogue (`templates`) and the organizations' deployments of
 * them (`template_deployments`), which the provisioning worker drives from `pending` to `active` or
 * `failed` (docs/templates.md). Both tables are written by src/modules/templates/ only.
 */
export const templates = pgTable(
  'templates',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    name: text('name').notNull(),
    slug: text('slug').notNull(),
    description: text('description'),
    category: text('category'),
    iconUrl: text('icon_url'),
    config: jsonb('config').notNull().default({}),
    isActive: boolean('is_active').notNull().default(true),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [uniqueIndex('templates_slug_key').on(t.slug), index('templates_active_idx').on(t.isActive, t.name)],
);

export const templateDeployments = pgTable(
  'template_deployments',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    templateId: uuid('template_id')
      .notNull()
      .references(() => templates.id),
    name: text('name').notNull(),
    subdomain: text('subdomain').notNull(),
    /** Stored in lower case, so uniqueness is case-insensitive. */
    customDomain: text('custom_domain'),
    config: jsonb('config').notNull().default({}),
    status: text('status').notNull().default('pending'),
    deploymentUrl: text('deployment_url'),
    lastError: text('last_error'),
    /** Provisioning attempts of the current round (since creation or the last retry). */
    attempts: integer('attempts').notNull().default(0),
    /** When the worker should try next; null once the deployment is active or failed. */
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }),
    /** Set while a worker holds the row (an attempt in flight); due again only after it passes. */
    leasedUntil: timestamp('leased_until', { withTimezone: true }),
    createdBy: uuid('created_by'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    uniqueIndex('template_deployments_subdomain_key').on(t.subdomain),
    uniqueIndex('template_deployments_custom_domain_key')
      .on(t.customDomain)
      .where(sql`${t.customDomain} IS NOT NULL`),
    index('template_deployments_org_idx').on(t.organizationId, t.createdAt),
    index('template_deployments_template_idx').on(t.templateId),
    index('template_deployments_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.nextAttemptAt} IS NOT NULL`),
    check('template_deployments_status', sql`${t.status} IN ('pending', 'deploying', 'active', 'failed')`),
    check('template_deployments_attempts_nonneg', sql`${t.attempts} >= 0`),
  ],
);
