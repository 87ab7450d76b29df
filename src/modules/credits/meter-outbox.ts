import type { Queryable } from '../../db/client.js';
import { claimJobs } from '../../workers/claim.js';

/**
 * The outbox of usage on its way to a Stripe meter (docs/billing.md, Usage to Stripe meters), owned here because it is written with
 * the deduction and marks the usage record reported. Rows are made only for organizations with a
 * Stripe customer and a subscription in force; the sender is billing/meter-events.ts.
 */

/** Organizations whose usage is reported: a customer and a subscription in force. */
export const SUBSCRIBED = `o.stripe_customer_id IS NOT NULL AND o.subscription_status IN ('active', 'past_due')`;

/** A meter event for a deduction made outside the engine's write (AI tokens past the limit); the engine's own are its `met` part. */
export async function enqueueMeterEvent(
  tx: Queryable,
  input: { usageId: string; organizationId: string; deploymentId: string; value: number; at: Date },
): Promise<void> {
  if (input.value <= 0) return;
  await tx.query(
    `INSERT INTO meter_event_outbox (identifier, organization_id, deployment_id, stripe_customer_id, value, event_at, next_attempt_at)
     SELECT $1, o.id, $3, o.stripe_customer_id, $4, $5, $5 FROM organizations o WHERE o.id = $2 AND ${SUBSCRIBED}
     ON CONFLICT (identifier) DO NOTHING`,
    [input.usageId, input.organizationId, input.deploymentId, input.value, input.at],
  );
}

export interface MeterEventRow {
  identifier: string;
  organization_id: string;
  stripe_customer_id: string;
  value: number;
  event_at: Date;
  attempts: number;
}

/**
 * Claim up to `limit` due events by moving next_attempt_at past the lease: a worker that dies
 * mid-batch leaves them to be claimed again when the lease ends, and the resend carries the same
 * identifiers, which Stripe deduplicates.
 */
export async function claimMeterEvents(db: Queryable, now: Date, limit: number, leaseMs: number): Promise<MeterEventRow[]> {
  // The job runner's claim statement (docs/jobs.md, Claim) over this table, written here because only
  // this module writes it. What was refunded before the report is not reported (the value is the
  // usage's net credits then); the attempt is counted at the claim.
  return claimJobs<MeterEventRow>(
    db,
    {
      name: 'meter-events',
      table: 'meter_event_outbox',
      key: 'identifier',
      pending: "q.status = 'pending'",
      dueAt: 'q.next_attempt_at',
      lease: { kind: 'due', column: 'next_attempt_at' },
      countAttempt: 'attempts',
      join: 'LEFT JOIN usage_records u ON u.id = q.identifier',
      select: ['GREATEST(0, q.value - COALESCE(u.refunded, 0)) AS net'],
      orderBy: 'q.next_attempt_at',
      returning: 'j.identifier, j.organization_id, j.stripe_customer_id, due.net AS value, j.event_at, j.attempts',
    },
    { now, limit, leaseUntil: new Date(now.getTime() + leaseMs) },
  );
}

/** Stripe took it: the outbox row and the usage record (its reported flag and the processor's reference). */
export async function markMeterReported(db: Queryable, identifier: string, reference: string, now: Date): Promise<void> {
  await db.query(
    `WITH out AS (
       UPDATE meter_event_outbox SET status = 'reported', processor_ref = $2, reported_at = $3, last_error = NULL
       WHERE identifier = $1 AND status = 'pending' RETURNING identifier
     )
     UPDATE usage_records SET reported = true, processor_ref = $2 WHERE id = (SELECT identifier FROM out)`,
    [identifier, reference, now],
  );
}

/** Nothing to send (refunded in full before it was reported): settled without a report; the usage record stays unreported. */
export async function markMeterSkipped(db: Queryable, identifier: string, reason: string, now: Date): Promise<void> {
  await db.query(`UPDATE meter_event_outbox SET status = 'reported', reported_at = $2, last_error = $3 WHERE identifier = $1 AND status = 'pending'`, [
    identifier,
    now,
    reason,
  ]);
}

/** A transient failure: try again at `retryAt`. */
export async function markMeterRetry(db: Queryable, identifier: string, retryAt: Date, error: string): Promise<void> {
  await db.query(`UPDATE meter_event_outbox SET next_attempt_at = $2, last_error = $3 WHERE identifier = $1 AND status = 'pending'`, [
    identifier,
    retryAt,
    error.slice(0, 1000),
  ]);
}

/** Stripe refused it for good (too old, unknown customer): kept with the reason, not retried. */
export async function markMeterFailed(db: Queryable, identifier: string, error: string): Promise<void> {
  await db.query(`UPDATE meter_event_outbox SET status = 'failed', last_error = $2 WHERE identifier = $1 AND status = 'pending'`, [
    identifier,
    error.slice(0, 1000),
  ]);
}
