import type { Queryable } from '../../db/client.js';

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
  return rows[0]?.id ?? null;
}
