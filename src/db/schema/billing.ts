import { sql } from 'drizzle-orm';
import { bigint, boolean, check, index, integer, jsonb, pgTable, text, timestamp, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { organizations } from './accounts.js';
import { deployments } from './deployments.js';

/** Subscription fields (docs/billing.md, Subscriptions); written by the Stripe event handler (billing/stripe-events.ts), read by /billing/subscription. */
export const subscriptions = pgTable(
  'subscriptions',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    stripeSubscriptionId: text('stripe_subscription_id').notNull(),
    stripeCustomerId: text('stripe_customer_id').notNull(),
    stripePriceId: text('stripe_price_id'),
    status: text('status').notNull(),
    currentPeriodStart: timestamp('current_period_start', { withTimezone: true }),
    currentPeriodEnd: timestamp('current_period_end', { withTimezone: true }),
    cancelAtPeriodEnd: boolean('cancel_at_period_end').notNull().default(false),
    /**
     * `created` of the newest Stripe event applied to this row: without a secret key to read the
     * subscription back, an event older than this is acknowledged and ignored (docs/billing.md, Inbound events).
     */
    lastEventAt: timestamp('last_event_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('subscriptions_stripe_key').on(t.stripeSubscriptionId), index('subscriptions_org_idx').on(t.organizationId)],
);

export const invoices = pgTable(
  'invoices',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    stripeInvoiceId: text('stripe_invoice_id').notNull(),
    status: text('status'),
    amountDue: bigint('amount_due', { mode: 'number' }),
    amountPaid: bigint('amount_paid', { mode: 'number' }),
    currency: text('currency'),
    hostedInvoiceUrl: text('hosted_invoice_url'),
    periodStart: timestamp('period_start', { withTimezone: true }),
    periodEnd: timestamp('period_end', { withTimezone: true }),
    raw: jsonb('raw'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('invoices_stripe_key').on(t.stripeInvoiceId), index('invoices_org_created_idx').on(t.organizationId, t.createdAt)],
);

/**
 * Every Stripe event received (docs/billing.md, Inbound events), stored by its id before anything acts on it: a duplicate id
 * is acknowledged and not acted on again. status: pending (to act on; the worker retries it from
 * next_attempt_at) | processed | ignored (nothing to act on, `last_error` says why).
 * A platform table: the organization is known only once the event has been read.
 */
export const stripeEvents = pgTable(
  'stripe_events',
  {
    id: text('id').primaryKey(),
    type: text('type').notNull(),
    /** The event's own `created`. */
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    payload: jsonb('payload').notNull(),
    status: text('status').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }),
    lastError: text('last_error'),
    organizationId: uuid('organization_id'),
    receivedAt: timestamp('received_at', { withTimezone: true }).notNull(),
    processedAt: timestamp('processed_at', { withTimezone: true }),
  },
  (t) => [
    index('stripe_events_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.status} = 'pending'`),
    // Dispute events that came before their purchase's grant, by payment intent: the grant hands them
    // back to the worker (billing/stripe-handlers.ts, docs/billing.md "Disputes").
    index('stripe_events_early_disputes_idx')
      .using('btree', sql`(${t.payload} -> 'data' -> 'object' ->> 'payment_intent')`)
      .where(sql`${t.type} IN ('charge.dispute.funds_withdrawn', 'charge.dispute.funds_reinstated') AND ${t.status} = 'ignored'`),
    check('stripe_events_status', sql`${t.status} IN ('pending', 'processed', 'ignored')`),
  ],
);

/**
 * Credit packs sold through Checkout (docs/billing.md, Credit packs), one row per Checkout Session. `granted_at` is claimed
 * by a guarded UPDATE in the grant's transaction, so a session grants once however often its events
 * arrive. `credits_taken_back` is what refunds removed; `refund_share` the refunded share of the pack
 * already settled (what could not be taken back because it was spent is the difference).
 */
export const creditPurchases = pgTable(
  'credit_purchases',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    deploymentId: uuid('deployment_id')
      .notNull()
      .references(() => deployments.id),
    pack: text('pack').notNull(),
    credits: bigint('credits', { mode: 'number' }).notNull(),
    /** The Checkout Session that sold the pack; NULL for an auto top-up's (its PaymentIntent, `auto_top_up_id`). */
    stripeCheckoutSessionId: text('stripe_checkout_session_id'),
    autoTopUpId: uuid('auto_top_up_id'),
    stripePriceId: text('stripe_price_id').notNull(),
    stripePaymentIntentId: text('stripe_payment_intent_id'),
    amountTotal: bigint('amount_total', { mode: 'number' }),
    currency: text('currency'),
    grantedAt: timestamp('granted_at', { withTimezone: true }),
    ledgerId: bigint('ledger_id', { mode: 'number' }),
    refundShare: bigint('refund_share', { mode: 'number' }).notNull().default(0),
    creditsTakenBack: bigint('credits_taken_back', { mode: 'number' }).notNull().default(0),
    /**
     * A dispute (chargeback) of the payment, one at most per charge (docs/billing.md, "Disputes"): its id,
     * the credits its amount covers, those taken back when its funds were withdrawn, and whether the
     * funds came back (the dispute won: what was taken back is given back).
     */
    disputeId: text('dispute_id'),
    disputeShare: bigint('dispute_share', { mode: 'number' }).notNull().default(0),
    disputeTakenBack: bigint('dispute_taken_back', { mode: 'number' }).notNull().default(0),
    // Of it, what came out of open expiring grants: a dispute won gives that back to them.
    disputeTakenFromGrants: bigint('dispute_taken_from_grants', { mode: 'number' }).notNull().default(0),
    disputeReinstated: boolean('dispute_reinstated').notNull().default(false),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    uniqueIndex('credit_purchases_session_key').on(t.stripeCheckoutSessionId),
    uniqueIndex('credit_purchases_payment_intent_key').on(t.stripePaymentIntentId),
    index('credit_purchases_org_idx').on(t.organizationId, t.createdAt),
    check('credit_purchases_credits_positive', sql`${t.credits} > 0`),
    check('credit_purchases_one_source', sql`(${t.stripeCheckoutSessionId} IS NULL) <> (${t.autoTopUpId} IS NULL)`),
    uniqueIndex('credit_purchases_auto_top_up_key').on(t.autoTopUpId),
    check('credit_purchases_refund_bound', sql`${t.creditsTakenBack} >= 0 AND ${t.creditsTakenBack} <= ${t.refundShare} AND ${t.refundShare} <= ${t.credits}`),
    check(
      'credit_purchases_dispute_bound',
      sql`${t.disputeTakenBack} >= 0 AND ${t.disputeTakenBack} <= ${t.disputeShare}
        AND ${t.refundShare} + CASE WHEN ${t.disputeReinstated} THEN 0 ELSE ${t.disputeShare} END <= ${t.credits}`,
    ),
  ],
);

/**
 * Usage on its way to a Stripe meter (docs/billing.md, Usage to Stripe meters): one row per successful deduction of a subscribed
 * organization, written in the deduction's statement. `identifier` is the usage record id, sent as
 * the meter event's identifier, so a resend after a crash is deduplicated by Stripe. A worker claims
 * due rows by pushing next_attempt_at forward (a lease), sends them, and marks them reported.
 * status: pending | reported | failed (Stripe refused it for good; `last_error` says why).
 */
export const meterEventOutbox = pgTable(
  'meter_event_outbox',
  {
    identifier: uuid('identifier').primaryKey(),
    organizationId: uuid('organization_id').notNull(),
    deploymentId: uuid('deployment_id').notNull(),
    stripeCustomerId: text('stripe_customer_id').notNull(),
    value: bigint('value', { mode: 'number' }).notNull(),
    eventAt: timestamp('event_at', { withTimezone: true }).notNull(),
    status: text('status').notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }).notNull(),
    processorRef: text('processor_ref'),
    reportedAt: timestamp('reported_at', { withTimezone: true }),
    lastError: text('last_error'),
  },
  (t) => [
    index('meter_event_outbox_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.status} = 'pending'`),
    check('meter_event_outbox_status', sql`${t.status} IN ('pending', 'reported', 'failed')`),
  ],
);

/**
 * An organization's auto top-up setting (docs/billing.md, "Auto top-up"). `consecutive_failures` counts
 * failed top-ups since the last success; the third sets `enabled` false (`disabled_reason`).
 */
export const autoTopUpSettings = pgTable(
  'auto_top_up_settings',
  {
    organizationId: uuid('organization_id')
      .primaryKey()
      .references(() => organizations.id),
    enabled: boolean('enabled').notNull().default(false),
    belowCredits: bigint('below_credits', { mode: 'number' }).notNull(),
    pack: text('pack').notNull(),
    maxPerMonth: integer('max_per_month').notNull(),
    consecutiveFailures: integer('consecutive_failures').notNull().default(0),
    disabledReason: text('disabled_reason'),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull(),
  },
  (t) => [
    check('auto_top_up_settings_below_positive', sql`${t.belowCredits} >= 1`),
    check('auto_top_up_settings_max_positive', sql`${t.maxPerMonth} >= 1`),
  ],
);

/**
 * One auto top-up of a deployment (docs/billing.md, "Auto top-up"). `requested` rows are written by the
 * deduction that crossed the line (the trigger on credit_balances); the `auto-top-ups` worker decides
 * (`starting`, with the pack's price fixed, or `skipped`), creates the off-session PaymentIntent under an
 * idempotency key of the row's id, and stores it (`started`); the PaymentIntent's events settle it
 * (`succeeded`, with the grant; `failed`). At most one open (requested, starting, started) per deployment.
 */
export const autoTopUps = pgTable(
  'auto_top_ups',
  {
    id: uuid('id').primaryKey().defaultRandom(),
    organizationId: uuid('organization_id')
      .notNull()
      .references(() => organizations.id),
    deploymentId: uuid('deployment_id')
      .notNull()
      .references(() => deployments.id),
    status: text('status').notNull(),
    pack: text('pack'),
    credits: bigint('credits', { mode: 'number' }),
    stripePriceId: text('stripe_price_id'),
    amount: bigint('amount', { mode: 'number' }),
    currency: text('currency'),
    stripePaymentIntentId: text('stripe_payment_intent_id'),
    /** The saved card chosen for the PaymentIntent, fixed at the first try: a retry under the same idempotency key sends the same request. */
    paymentMethod: text('payment_method'),
    failureCode: text('failure_code'),
    attempts: integer('attempts').notNull().default(0),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }),
    lastError: text('last_error'),
    requestedAt: timestamp('requested_at', { withTimezone: true }).notNull(),
    startedAt: timestamp('started_at', { withTimezone: true }),
    settledAt: timestamp('settled_at', { withTimezone: true }),
  },
  (t) => [
    uniqueIndex('auto_top_ups_open_key')
      .on(t.deploymentId)
      .where(sql`${t.status} IN ('requested', 'starting', 'started')`),
    uniqueIndex('auto_top_ups_payment_intent_key').on(t.stripePaymentIntentId),
    index('auto_top_ups_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.status} IN ('requested', 'starting')`),
    index('auto_top_ups_org_idx').on(t.organizationId, t.requestedAt),
    check('auto_top_ups_status', sql`${t.status} IN ('requested', 'starting', 'started', 'succeeded', 'failed', 'skipped')`),
  ],
);
