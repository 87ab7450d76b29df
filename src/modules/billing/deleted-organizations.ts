import { type Deps, systemCtx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { takeBackRefund } from '../credits/index.js';
import { writeAudit } from '../audit/service.js';
import { isTransientStripeError, Stripe, stripeClient } from './stripe-client.js';
import { lockPayment } from './stripe-handlers.js';
import type { SubscriptionState } from './subscriptions.js';

/**
 * A deleted organization stops paying (docs/billing.md, Subscriptions, "A deleted organization"): its
 * subscriptions not yet canceled are canceled in Stripe at once, so its customer is not charged again
 * for an organization nobody can use, and a pack paid for after the delete is refunded. Deleting is a
 * database commit and Stripe is outside it, so a worker does it after the commit, and again on its
 * next pass while Stripe is unreachable.
 *
 * Stripe's events of such a subscription are ignored (a deleted organization owns no customer), so
 * the worker records the outcome itself: the row canceled, the organization's status, an audit row.
 */
export async function endBillingOfDeletedOrganizations(deps: Deps, batch: number): Promise<number> {
  const stripe = stripeClient(deps);
  if (!stripe) return 0;
  return (await cancelSubscriptions(deps, stripe, batch)) + (await refundPaidAfterDelete(deps, stripe, batch));
}

async function cancelSubscriptions(deps: Deps, stripe: Stripe, batch: number): Promise<number> {
  const due = await deps.db.query<{ organization_id: string; stripe_subscription_id: string }>(
    `SELECT s.organization_id, s.stripe_subscription_id FROM subscriptions s
     JOIN organizations o ON o.id = s.organization_id AND o.deleted_at IS NOT NULL
     WHERE s.status <> 'canceled'
     ORDER BY s.updated_at, s.stripe_subscription_id LIMIT $1`,
    [batch],
    'billing_deleted_organization_subscriptions',
  );
  let canceled = 0;
  for (const row of due) {
    const outcome = await cancelInStripe(stripe, row.stripe_subscription_id);
    if (outcome.kind === 'retry') {
      deps.log.warn({ err: outcome.error, subscription: row.stripe_subscription_id }, 'canceling a deleted organization’s subscription failed; the next pass tries again');
      continue;
    }
    if (outcome.stripeStatus === 'missing') deps.log.warn({ subscription: row.stripe_subscription_id }, 'Stripe does not know a deleted organization’s subscription: recorded as canceled');
    const ctx = systemCtx(deps);
    const recorded = await deps.db.transaction(async (tx) => {
      const rows = await tx.query<{ previous: string }>(
        `WITH before AS (SELECT id, status FROM subscriptions WHERE stripe_subscription_id = $1 AND status <> 'canceled' FOR UPDATE)
         UPDATE subscriptions s SET status = 'canceled', cancel_at_period_end = false, updated_at = $2
         FROM before WHERE s.id = before.id RETURNING before.status AS previous`,
        [row.stripe_subscription_id, deps.clock.now()],
      );
      const previous = rows[0]?.previous;
      if (previous === undefined) return false;
      await tx.query(
        `UPDATE organizations SET subscription_status = 'canceled', updated_at = $3
         WHERE id = $1 AND stripe_subscription_id = $2`,
        [row.organization_id, row.stripe_subscription_id, deps.clock.now()],
      );
      await writeAudit(tx, ctx, {
        organizationId: row.organization_id,
        action: 'cancel',
        resourceType: 'subscription',
        resourceId: row.stripe_subscription_id,
        metadata: { reason: 'organization_deleted', previous_status: previous, stripe_status: outcome.stripeStatus },
      });
      return true;
    });
    if (recorded) canceled++;
  }
  return canceled;
}

/**
 * A pack (or auto top-up) paid for after its organization was deleted (a Checkout opened before the
 * delete, paid after it) bought credits nobody can spend: its payment is refunded in full, and the
 * credits taken back at once as that refund's event would (docs/billing.md, "A deleted organization").
 * A purchase granted before the delete is not refunded. One idempotency key per payment; a refusal is
 * logged and tried again on the next pass. A disputed payment is left to its dispute.
 */
async function refundPaidAfterDelete(deps: Deps, stripe: Stripe, batch: number): Promise<number> {
  const due = await deps.db.query<{ deployment_id: string; organization_id: string; stripe_payment_intent_id: string; amount_total: number | null }>(
    `SELECT p.deployment_id, p.organization_id, p.stripe_payment_intent_id, p.amount_total FROM credit_purchases p
     JOIN organizations o ON o.id = p.organization_id AND o.deleted_at IS NOT NULL
     WHERE p.granted_at > o.deleted_at AND p.stripe_payment_intent_id IS NOT NULL AND p.dispute_id IS NULL
       AND p.refund_share < p.credits AND p.amount_total > 0
     ORDER BY p.granted_at, p.id LIMIT $1`,
    [batch],
    'billing_deleted_organization_purchases',
  );
  let refunded = 0;
  for (const row of due) {
    const paymentIntentId = row.stripe_payment_intent_id;
    try {
      await stripe.refunds.create(
        { payment_intent: paymentIntentId, reason: 'requested_by_customer', metadata: { creditgate_reason: 'organization_deleted' } },
        { idempotencyKey: `creditgate-deleted-organization-refund-${paymentIntentId}` },
      );
    } catch (error) {
      deps.log.warn({ err: error, paymentIntent: paymentIntentId }, 'refunding a payment made after its organization was deleted failed; the next pass tries again');
      continue;
    }
    const amount = row.amount_total ?? 0;
    const ctx = systemCtx(deps);
    await deps.deductions.within(row.deployment_id, async (tx) => {
      await lockPayment(tx, paymentIntentId);
      const result = await takeBackRefund(tx, { paymentIntentId, amount, amountRefunded: amount, now: deps.clock.now() });
      await writeAudit(tx, ctx, {
        organizationId: row.organization_id,
        action: 'refund',
        resourceType: 'credit_purchase',
        resourceId: paymentIntentId,
        metadata: { reason: 'organization_deleted', amount, credits_taken_back: result.takenBack },
      });
    });
    refunded++;
  }
  return refunded;
}

type CancelOutcome = { kind: 'canceled'; stripeStatus: string } | { kind: 'retry'; error: unknown };

/**
 * Cancel now (no proration: Stripe's default for a cancellation). One idempotency key per
 * subscription, so a retry after an answer that was lost does not cancel twice. A subscription
 * Stripe no longer knows, or one it already ended, counts as canceled; any other refusal is logged
 * and tried again on the next pass.
 */
async function cancelInStripe(stripe: Stripe, id: string): Promise<CancelOutcome> {
  try {
    const answer = await stripe.subscriptions.cancel(id, {}, { idempotencyKey: `creditgate-deleted-organization-${id}` });
    return { kind: 'canceled', stripeStatus: answer.status };
  } catch (error) {
    if (isTransientStripeError(error)) return { kind: 'retry', error };
    try {
      const current = await stripe.subscriptions.retrieve(id);
      if (current.status === 'canceled' || current.status === 'incomplete_expired') return { kind: 'canceled', stripeStatus: current.status };
      return { kind: 'retry', error };
    } catch (readError) {
      if (readError instanceof Stripe.errors.StripeError && readError.code === 'resource_missing') return { kind: 'canceled', stripeStatus: 'missing' };
      return { kind: 'retry', error: readError };
    }
  }
}

/**
 * A subscription event of a customer whose organization is deleted (a Checkout paid after the delete,
 * say) is not applied, but the subscription is kept (its row, as Stripe reported it), so that the
 * worker above cancels it. True when such an organization owns the customer.
 */
export async function keepSubscriptionOfDeletedOrganization(tx: Queryable, state: SubscriptionState, eventAt: Date, now: Date): Promise<boolean> {
  const rows = await tx.query<{ id: string }>(
    `INSERT INTO subscriptions (organization_id, stripe_subscription_id, stripe_customer_id, stripe_price_id, status,
       current_period_start, current_period_end, cancel_at_period_end, last_event_at, created_at, updated_at)
     SELECT o.id, $2, $1, $3, $4, $5, $6, $7, $8, $9, $9 FROM organizations o
     WHERE o.stripe_customer_id = $1 AND o.deleted_at IS NOT NULL
     ON CONFLICT (stripe_subscription_id) DO UPDATE SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
       WHERE subscriptions.status <> 'canceled' AND subscriptions.organization_id = EXCLUDED.organization_id
     RETURNING id`,
    [state.customer, state.id, state.priceId, state.status, state.periodStart, state.periodEnd, state.cancelAtPeriodEnd, eventAt, now],
  );
  if (rows.length > 0) return true;
  const owner = await tx.query('SELECT 1 FROM organizations WHERE stripe_customer_id = $1 AND deleted_at IS NOT NULL', [state.customer]);
  return owner.length > 0;
}
