import { DAY, HOUR } from '../../clock.js';
import { ValidationError } from '../../errors.js';
import { instantBoundFault } from '../../lib/instants.js';

/** How a usage summary groups its records (docs/usage-analytics.md). */
export const GROUP_BYS = ['day', 'hour', 'tool', 'action', 'mcp_user', 'model', 'deployment'] as const;
export type GroupBy = (typeof GROUP_BYS)[number];
/** What a time grouping's buckets may be split by (a stacked chart's series). */
export const SPLIT_BYS = ['tool', 'action', 'mcp_user'] as const;
export type SplitBy = (typeof SPLIT_BYS)[number];
/** A split names at most this many keys (the largest over the range); the rest are one "other" part. */
export const MAX_SPLIT_KEYS = 10;

/** A summary's default range: the last 30 days ending now. */
export const DEFAULT_RANGE_DAYS = 30;

/**
 * The longest range a summary answers, by grouping: hour buckets up to 31 days (at most 745 buckets,
 * the two edge ones partial), everything else up to 366 days (at most 367 day buckets).
 */
export const MAX_RANGE_DAYS: Record<GroupBy, number> = { hour: 31, day: 366, tool: 366, action: 366, mcp_user: 366, model: 366, deployment: 366 };

/** Bucket width of the time groupings. */
export const BUCKET_MS = { day: DAY, hour: HOUR } as const;

/**
 * An RFC 3339 date-time as the schema let it through (`format: date-time`: an offset or `Z` is
 * required), as an instant. The format also admits what `Date` cannot read — a leap second
 * (`23:59:60Z`), a lower-case `t`/`z`, a space for `T` — so those are normalised or refused here,
 * always as 400 naming the parameter, never a 500 from the database. Only 1970-01-01 up to, not
 * including, 9999-01-01 (docs/input.md, Dates): a range rounded up to its day or hour, or read in
 * a zone, then stays inside what both databases and drivers take.
 */
export function parseInstant(value: string | undefined, field: string): Date | undefined {
  if (value === undefined) return undefined;
  const at = new Date(value.trim().replace(' ', 'T').toUpperCase());
  if (Number.isNaN(at.getTime())) throw ValidationError.forField(field, 'must be an RFC 3339 date-time such as 2026-01-15T00:00:00Z');
  const fault = instantBoundFault(at);
  if (fault) throw ValidationError.forField(field, fault);
  return at;
}

/** `from` must come before `to` (from inclusive, to exclusive). */
function ordered(from: Date, to: Date): void {
  if (from.getTime() >= to.getTime()) throw ValidationError.forField('from', 'must be before to');
}

/**
 * A summary's range: defaults to the 30 days before `to` (itself defaulting to now), refused with 400
 * when empty or longer than the grouping allows.
 */
export function summaryRange(input: { from?: string | undefined; to?: string | undefined }, groupBy: GroupBy, now: Date): { from: Date; to: Date } {
  const to = parseInstant(input.to, 'to') ?? now;
  const from = parseInstant(input.from, 'from') ?? new Date(to.getTime() - DEFAULT_RANGE_DAYS * DAY);
  ordered(from, to);
  const max = MAX_RANGE_DAYS[groupBy];
  if (to.getTime() - from.getTime() > max * DAY) {
    throw ValidationError.forField('from', `must be at most ${max} days before to with group_by=${groupBy}`, [
      { field: 'from', message: `must be at most ${max} days before to with group_by=${groupBy}` },
      { field: 'to', message: `must be at most ${max} days after from with group_by=${groupBy}` },
    ]);
  }
  return { from, to };
}

/** A record list's optional bounds: either may be left out; when both are given, from < to. */
export function recordRange(input: { from?: string | undefined; to?: string | undefined }): { from: Date | null; to: Date | null } {
  const from = parseInstant(input.from, 'from') ?? null;
  const to = parseInstant(input.to, 'to') ?? null;
  if (from && to) ordered(from, to);
  return { from, to };
}

/**
 * Every UTC bucket start that overlaps [from, to): the first is `from` rounded down to the bucket
 * (so it may start before `from`), the last starts before `to`. Buckets are UTC days and hours: a
 * client in another zone shifts its labels, not the buckets.
 */
export function bucketStarts(from: Date, to: Date, width: number): Date[] {
  const starts: Date[] = [];
  for (let t = Math.floor(from.getTime() / width) * width; t < to.getTime(); t += width) starts.push(new Date(t));
  return starts;
}
