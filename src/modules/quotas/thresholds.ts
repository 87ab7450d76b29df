import type { Queryable } from '../../db/client.js';
import { appendEvent } from '../events/outbox.js';

/** docs/limits.md, Quota alerts: `quota.threshold` fires at these percentages of a limit, once per threshold per period. */
export const THRESHOLDS = [80, 100] as const;
export type QuotaName = 'ai_tokens' | 'monthly_credits';

/**
 * The thresholds usage stands at or past after a change (none where the limit is 0 or unlimited). Each
 * is written once per period through its dedupe key, so "reached" rather than "crossed in this step" is
 * enough, and usage already past a threshold when the limit was lowered fires on the next use.
 */
export function reachedThresholds(used: number, limit: number | null): number[] {
  if (limit === null || limit <= 0) return [];
  return THRESHOLDS.filter((t) => used * 100 >= t * limit);
}

/** The key that makes a threshold event happen once per deployment, quota, threshold and period. */
export function thresholdKey(deploymentId: string, quota: QuotaName, threshold: number, periodStart: Date): string {
  return `quota.threshold:${deploymentId}:${quota}:${threshold}:${periodStart.toISOString()}`;
}

/** Write the `quota.threshold` events a usage increase reached (once each per period), in the caller's transaction. */
export async function emitThresholds(
  tx: Queryable,
  input: {
    organizationId: string;
    deploymentId: string;
    quota: QuotaName;
    before: number;
    after: number;
    limit: number | null;
    periodStart: Date;
    periodEnd: Date;
    now: Date;
  },
): Promise<number[]> {
  if (input.after <= input.before) return [];
  const reached = reachedThresholds(input.after, input.limit);
  const written: number[] = [];
  for (const threshold of reached) {
    const id = await appendEvent(tx, {
      organizationId: input.organizationId,
      deploymentId: input.deploymentId,
      type: 'quota.threshold',
      data: {
        deployment_id: input.deploymentId,
        quota: input.quota,
        threshold,
        used: input.after,
        limit: input.limit,
        period_end: input.periodEnd.toISOString(),
      },
      dedupeKey: thresholdKey(input.deploymentId, input.quota, threshold, input.periodStart),
      at: input.now,
    });
    if (id) written.push(threshold);
  }
  return written;
}

/**
 * The same rule inside the deduction statement (credits/deduct.ts), so the hot path stays one statement:
 * `cur` is the row before, `upd` after. Keys and data match emitThresholds exactly.
 */
export const MONTHLY_THRESHOLD_CTE = `
alert AS (
  INSERT INTO outbox_events (organization_id, deployment_id, type, data, dedupe_key, created_at)
  SELECT upd.organization_id, upd.deployment_id, 'quota.threshold',
         jsonb_build_object('deployment_id', upd.deployment_id, 'quota', 'monthly_credits', 'threshold', t.threshold,
                            'used', upd.monthly_used, 'limit', upd.monthly_allocation,
                            'period_end', to_char(cur.period_end AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
         'quota.threshold:' || upd.deployment_id || ':monthly_credits:' || t.threshold || ':' ||
           to_char(cur.period_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
         $3::timestamptz
  FROM upd JOIN cur ON true CROSS JOIN (VALUES (${THRESHOLDS.join('), (')})) AS t(threshold)
  WHERE upd.monthly_allocation > 0 AND upd.monthly_used > cur.monthly_used
    AND upd.monthly_used * 100 >= t.threshold * upd.monthly_allocation
  ON CONFLICT (dedupe_key) DO NOTHING
)`;
