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

/** A usage increase of one quota of one deployment, as a threshold event needs it. */
export interface UsageIncrease {
  organizationId: string;
  deploymentId: string;
  quota: QuotaName;
  before: number;
  after: number;
  limit: number | null;
  periodStart: Date;
  periodEnd: Date;
  now: Date;
}

/** A `quota.threshold` event to append (its dedupe key makes it once per period). */
export interface ThresholdEvent {
  organizationId: string;
  deploymentId: string;
  threshold: number;
  data: Record<string, unknown>;
  dedupeKey: string;
  at: Date;
}

/**
 * The `quota.threshold` events a usage increase reached: the one rule and payload every writer uses
 * (the money engine's batch write, and emitThresholds below for AI tokens and owed credits).
 */
export function thresholdEvents(input: UsageIncrease): ThresholdEvent[] {
  if (input.after <= input.before) return [];
  return reachedThresholds(input.after, input.limit).map((threshold) => ({
    organizationId: input.organizationId,
    deploymentId: input.deploymentId,
    threshold,
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
  }));
}

/** Write the `quota.threshold` events a usage increase reached (once each per period), in the caller's transaction. */
export async function emitThresholds(tx: Queryable, input: UsageIncrease): Promise<number[]> {
  const written: number[] = [];
  for (const event of thresholdEvents(input)) {
    const id = await appendEvent(tx, { ...event, type: 'quota.threshold' });
    if (id) written.push(event.threshold);
  }
  return written;
}
