import { sql } from 'drizzle-orm';
import { boolean, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';

/**
 * The outbox of platform events (`quota.threshold` of docs/limits.md, the organization events of docs/webhooks.md): written in the same
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

/**
 * Delivery records, one per proxy send (docs/webhooks.md; webhook_id null,
 * deployment_id set) and one per organization webhook and event. `id` is the `webhookId` of the
 * proxy's answer and the `webhook-id` header, the same across attempts. A proxy send with an
 * idempotency key keeps its answer in `response` for replays (24 h).
 * status: in_progress (a proxy send being made) | pending (the worker will try) | delivered | failed
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    deploymentId: uuid('deployment_id'),
    webhookId: uuid('webhook_id'),
    eventId: uuid('event_id'),
    eventType: text('event_type'),
    url: text('url').notNull(),
    method: text('method').notNull().default('POST'),
    payload: jsonb('payload').notNull(),
    status: text('status').notNull(),
    statusCode: integer('status_code'),
    responseBody: text('response_body'),
    error: text('error'),
    attemptCount: integer('attempt_count').notNull().default(0),
    nextRetryAt: timestamp('next_retry_at', { withTimezone: true }),
    /** Set while a worker holds the row (claimed, attempt in flight); a row is due only when this has passed. */
    leasedUntil: timestamp('leased_until', { withTimezone: true }),
    deliveredAt: timestamp('delivered_at', { withTimezone: true }),
    idempotencyKey: text('idempotency_key'),
    requestHash: text('request_hash'),
    response: jsonb('response'),
    creditsCharged: integer('credits_charged').notNull().default(0),
    usageId: uuid('usage_id'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    uniqueIndex('webhook_deliveries_idempotency')
      .on(t.deploymentId, t.idempotencyKey)
      .where(sql`${t.idempotencyKey} IS NOT NULL`),
    // Only pending rows have a next_retry_at. The predicate must not name `status`: the final UPDATE of
    // a proxy send changes it, and a column in an index predicate rules out HOT updates (bench:webhooks).
    index('webhook_deliveries_due_idx')
      .on(t.nextRetryAt)
      .where(sql`${t.nextRetryAt} IS NOT NULL`),
    index('webhook_deliveries_org_idx').on(t.organizationId, t.createdAt),
    index('webhook_deliveries_webhook_idx').on(t.webhookId, t.createdAt),
    // Each webhook's head (its earliest pending delivery), for the delivery worker's claim.
    index('webhook_deliveries_head_idx')
      .on(t.webhookId, t.nextRetryAt, t.id)
      .where(sql`${t.nextRetryAt} IS NOT NULL`),
    // The leased rows of a webhook: one in flight at a time.
    index('webhook_deliveries_leased_idx')
      .on(t.webhookId)
      .where(sql`${t.leasedUntil} IS NOT NULL`),
  ],
);

/**
 * Organization webhook configurations (docs/webhooks.md, Organization webhooks). The signing secret
 * is stored encrypted (lib/crypto-box.ts) and shown once at creation. `failing_since` is the first
 * failure of the current failing streak; five days of it disable the webhook.
 */
export const webhooks = pgTable(
  'webhooks',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    url: text('url').notNull(),
    secretEncrypted: text('secret_encrypted').notNull(),
    events: text('events').array().notNull(),
    isActive: boolean('is_active').notNull().default(true),
    disabledReason: text('disabled_reason'),
    failingSince: timestamp('failing_since', { withTimezone: true }),
    createdBy: uuid('created_by'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [index('webhooks_org_idx').on(t.organizationId, t.createdAt)],
);
