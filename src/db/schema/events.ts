import { sql } from 'drizzle-orm';
import { index, jsonb, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';

/**
 * The outbox of platform events (SPEC §6 `quota.threshold`, §7 organization events): written in the same
 * transaction (or statement) as the change that causes it, delivered later by the webhook worker.
 * `dedupe_key` makes "once per …" events idempotent across instances (ON CONFLICT DO NOTHING).
 * The wire body is `{id, type, created_at, data}`.
 */
export const outboxEvents = pgTable(
  'outbox_events',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    deploymentId: uuid('deployment_id'),
    type: text('type').notNull(),
    data: jsonb('data').notNull(),
    dedupeKey: text('dedupe_key'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    /** Set when the event has been fanned out to the organization's webhook deliveries. */
    dispatchedAt: timestamp('dispatched_at', { withTimezone: true }),
  },
  (t) => [
    uniqueIndex('outbox_events_dedupe_key').on(t.dedupeKey),
    index('outbox_events_pending_idx')
      .on(t.createdAt)
      .where(sql`${t.dispatchedAt} IS NULL`),
    index('outbox_events_org_idx').on(t.organizationId, t.createdAt),
  ],
);
