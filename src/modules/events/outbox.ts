import type { Queryable } from '../../db/client.js';
import { budgetEventFate } from '../credits/index.js';
import { type JobDeps, type JobQueue, runJobs } from '../../workers/jobs.js';

export interface OutboxEvent {
  organizationId: string;
  deploymentId: string | null;
  type: string;
  data: Record<string, unknown>;
  /** Events that must happen once (per threshold per period…) carry a key; a second insert is a no-op. */
  dedupeKey: string | null;
  at: Date;
}

/**
 * Append a platform event to the outbox, inside the caller's transaction so the event exists exactly
 * when the change does. Returns the event id, or null when an event with the same dedupe key exists.
 */
export async function appendEvent(tx: Queryable, event: OutboxEvent): Promise<string | null> {
  const rows = await tx.query<{ id: string }>(
    `INSERT INTO outbox_events (organization_id, deployment_id, type, data, dedupe_key, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (dedupe_key) DO NOTHING RETURNING id`,
    [event.organizationId, event.deploymentId, event.type, JSON.stringify(event.data), event.dedupeKey, event.at],
    'outbox_append',
  );
  const id = rows[0]?.id ?? null;
  if (id) await fanOut(tx, id, event.at, event.type);
  return id;
}

/** An organization event (docs/webhooks.md, Organization webhooks) in the caller's transaction: `{id, type, created_at, data}` on the wire. */
export function emitEvent(
  tx: Queryable,
  input: { organizationId: string; deploymentId?: string | null; type: string; data: Record<string, unknown>; at: Date },
): Promise<string | null> {
  return appendEvent(tx, { deploymentId: null, dedupeKey: null, ...input });
}

/**
 * One delivery row per active webhook of the organization subscribed to the event's type, written in
 * the caller's transaction, and the event marked dispatched (the outbox, docs/webhooks.md). Events written inside
 * the one-statement deduction (quota.threshold for credits) are fanned out by the dispatcher worker.
 */
export async function fanOut(tx: Queryable, eventId: string, now: Date, type?: string): Promise<number> {
  // A "*" budget's events are capped per window (docs/budgets.md, Events): one past the cap is not sent.
  if ((type === undefined || type.startsWith('budget.')) && (await budgetEventFate(tx, eventId)) === 'dropped') {
    await tx.query('UPDATE outbox_events SET dispatched_at = $2 WHERE id = $1', [eventId, now], 'outbox_dispatched');
    return 0;
  }
  const rows = await tx.query<{ id: string }>(
    `INSERT INTO webhook_deliveries (organization_id, webhook_id, event_id, event_type, url, method, payload, status,
       next_retry_at, created_at, updated_at)
     SELECT e.organization_id, w.id, e.id, e.type, w.url, 'POST',
            jsonb_build_object('id', e.id, 'type', e.type,
              'created_at', to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), 'data', e.data),
            'pending', $2, $2, $2
     FROM outbox_events e JOIN webhooks w ON w.organization_id = e.organization_id AND w.is_active AND e.type = ANY(w.events)
     WHERE e.id = $1
     RETURNING id`,
    [eventId, now],
    'outbox_fan_out',
  );
  await tx.query('UPDATE outbox_events SET dispatched_at = $2 WHERE id = $1', [eventId, now], 'outbox_dispatched');
  return rows.length;
}

/**
 * The `event-dispatch` queue (docs/jobs.md): events written without their deliveries are fanned out
 * in the claim's transaction, whose row locks are the lease (SKIP LOCKED: any number of instances).
 * A failure rolls the batch back; its events are due again at the next pass.
 */
export const EVENTS_QUEUE: JobQueue<{ id: string; type: string }> = {
  name: 'event-dispatch',
  table: 'outbox_events',
  policy: { batchSize: 100, leaseMs: null, maxAttempts: null, backoff: null, concurrency: 1 },
  claim: {
    name: 'event-dispatch',
    table: 'outbox_events',
    key: 'id',
    pending: 'q.dispatched_at IS NULL',
    dueAt: null,
    lease: { kind: 'transaction' },
    orderBy: 'q.created_at',
    returning: 'j.id, j.type',
  },
  keyOf: (row) => row.id,
  async handle({ row, db, claimedAt }) {
    await fanOut(db, row.id, claimedAt, row.type);
    return 'done';
  },
};

/** The dispatcher worker's pass (EVENTS_QUEUE through the job runner) at `now`. */
export function dispatchPending(db: JobDeps['db'], now: Date, batch: number): Promise<number> {
  return runJobs({ db, clock: { now: () => now } }, EVENTS_QUEUE, { batch });
}
