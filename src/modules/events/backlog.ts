import type { Deps } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { OUTBOX_DEPTH_LIMIT } from '../../lib/metrics.js';

export type OutboxName = 'events' | 'webhook_deliveries' | 'meter_events';

export interface OutboxBacklog {
  outbox: OutboxName;
  /** Items waiting, counted up to the limit. */
  depth: number;
  /** Events: the oldest one not fanned out; deliveries and meter events: the most overdue one's due time. */
  oldest: Date | null;
}

/**
 * What the workers have not done yet, for the metrics (one statement, read at scrape time). Each part
 * reads the partial index its worker claims from (outbox_events_pending_idx, webhook_deliveries_due_idx,
 * meter_event_outbox_due_idx): the oldest is the index's first entry and the count stops at `limit`,
 * so a scrape costs the same however large the backlog grows.
 */
const BACKLOG_SQL = `
SELECT 'events' AS outbox,
       (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE dispatched_at IS NULL LIMIT $1) x)::int AS depth,
       (SELECT min(created_at) FROM outbox_events WHERE dispatched_at IS NULL) AS oldest
UNION ALL
SELECT 'webhook_deliveries',
       (SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries WHERE next_retry_at IS NOT NULL LIMIT $1) x)::int,
       (SELECT min(next_retry_at) FROM webhook_deliveries WHERE next_retry_at IS NOT NULL)
UNION ALL
SELECT 'meter_events',
       (SELECT count(*) FROM (SELECT 1 FROM meter_event_outbox WHERE status = 'pending' LIMIT $1) x)::int,
       (SELECT min(next_attempt_at) FROM meter_event_outbox WHERE status = 'pending')`;

export async function outboxBacklog(db: Queryable, limit: number): Promise<OutboxBacklog[]> {
  return db.query<OutboxBacklog>(BACKLOG_SQL, [limit]);
}

/** creditgate_outbox_depth and creditgate_outbox_oldest_age_seconds, read when /metrics is scraped. */
export function watchOutboxBacklog(deps: Pick<Deps, 'db' | 'clock' | 'metrics'>): void {
  const { metrics } = deps;
  metrics.atScrape(
    'outbox',
    async () => {
      const rows = await outboxBacklog(deps.db, OUTBOX_DEPTH_LIMIT);
      const now = deps.clock.now().getTime();
      for (const row of rows) {
        metrics.outboxDepth.set({ outbox: row.outbox }, row.depth);
        // Not yet due (a delivery waiting for its retry) is not late: 0.
        metrics.outboxAge.set({ outbox: row.outbox }, row.oldest === null ? 0 : Math.max(0, (now - new Date(row.oldest).getTime()) / 1000));
      }
    },
    () => {
      metrics.outboxDepth.reset();
      metrics.outboxAge.reset();
    },
  );
}
