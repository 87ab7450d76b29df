import { sql } from 'drizzle-orm';
import { boolean, check, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';

/**
 * Templates (docs/templates.md): the operator's catalogue (`templates`) and the organizations' deployments of
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
    /** Lower-case ASCII (punycode), no trailing dot; exclusive only once verified (docs/templates.md, Custom domains). */
    customDomain: text('custom_domain'),
    /** pending_verification | verified while a domain is set; lapsed once a claim ended unverified (domain null). */
    customDomainStatus: text('custom_domain_status'),
    /** The TXT value the claimant must publish (`creditgate-verify=…`): not a secret, it is meant to be public. */
    customDomainChallenge: text('custom_domain_challenge'),
    /** When the current claim was made: unverified seven days later, it lapses. */
    customDomainClaimedAt: timestamp('custom_domain_claimed_at', { withTimezone: true }),
    customDomainVerifiedAt: timestamp('custom_domain_verified_at', { withTimezone: true }),
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
      .where(sql`${t.customDomainStatus} = 'verified'`),
    index('template_deployments_domain_claims_idx')
      .on(t.customDomainClaimedAt)
      .where(sql`${t.customDomainStatus} = 'pending_verification'`),
    index('template_deployments_org_idx').on(t.organizationId, t.createdAt),
    index('template_deployments_template_idx').on(t.templateId),
    index('template_deployments_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.nextAttemptAt} IS NOT NULL`),
    check('template_deployments_status', sql`${t.status} IN ('pending', 'deploying', 'active', 'failed')`),
    check('template_deployments_attempts_nonneg', sql`${t.attempts} >= 0`),
    check('template_deployments_custom_domain_status', sql`${t.customDomainStatus} IN ('pending_verification', 'verified', 'lapsed')`),
    check(
      'template_deployments_custom_domain_claim',
      sql`(${t.customDomain} IS NOT NULL) = (COALESCE(${t.customDomainStatus}, 'none') IN ('pending_verification', 'verified'))`,
    ),
  ],
);
