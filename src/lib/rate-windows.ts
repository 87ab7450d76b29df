/**
 * The arithmetic of the two window kinds both limiter backends share (src/lib/rate-limiter.ts), so the
 * Redis script and the in-process limiter decide identically.
 *
 * Sliding-window counter (the default, the request limits of docs/limits.md, The window): a window of W ms is split into fixed
 * buckets of W; the estimate at time t is `prev × (W − elapsed) / W + curr`, where `elapsed` is how far
 * t is into the current bucket. Comparisons are done multiplied by W, in integers. Cheap (two numbers
 * per subject) but approximate: a burst at the end of one bucket weighs less and less in the next.
 *
 * Sliding log (`exact: true`, the login limit of docs/accounts.md: exact, not approximated): the time of every
 * admitted hit is kept for W; a hit is admitted while fewer than `limit` hits lie in (now − W, now].
 * Costs one entry per admitted hit, so it is for small limits only.
 */
export interface WindowSpec {
  /** Identifies the subject (deployment, organization, user, IP); windows of one subject share a Redis slot. */
  subject: string;
  /** A short name for the policy, used in RateLimit-Policy ("minute", "hour"). */
  name: string;
  limit: number;
  windowMs: number;
  /** A sliding log instead of the sliding-window counter: exact, one stored entry per admitted hit. */
  exact?: boolean;
}

export interface WindowCounts {
  prev: number;
  curr: number;
}

/** What a sliding log holds after a decision: its size, its oldest entry and the entry whose expiry admits one more. */
export interface LogCounts {
  count: number;
  /** Time (ms) of the oldest entry still in the window, null when empty. */
  oldest: number | null;
  /** Time (ms) of the entry at rank `count − limit` (oldest first): when it leaves, one more hit fits. Null while one fits. */
  needed: number | null;
}

export type Observed = { kind: 'counter'; counts: WindowCounts } | { kind: 'log'; counts: LogCounts };

export interface WindowState {
  name: string;
  limit: number;
  windowMs: number;
  /** Requests still admitted right now. */
  remaining: number;
  /** ms from now until this window admits a request again (0 when it does now). */
  retryMs: number;
  /** ms from now until the current bucket ends (a log: until its oldest entry leaves). */
  bucketEndsMs: number;
}

/** Is there room for one more request in this window at `elapsed` ms into the current bucket? */
export function admits(limit: number, windowMs: number, elapsed: number, c: WindowCounts): boolean {
  return c.prev * (windowMs - elapsed) + (c.curr + 1) * windowMs <= limit * windowMs;
}

/**
 * How long until one more request fits. Within the current bucket the previous bucket's weight decays
 * linearly; if the current bucket alone is full, the wait runs into the next bucket, where the current
 * count becomes the decaying one.
 */
export function retryMs(limit: number, W: number, elapsed: number, c: WindowCounts): number {
  if (admits(limit, W, elapsed, c)) return 0;
  if (limit < 1) return W - elapsed + W;
  if (c.curr + 1 <= limit && c.prev > 0) {
    // prev × (W − e − t) + (curr + 1) × W ≤ limit × W  ⇔  t ≥ W − e − (limit − curr − 1) × W / prev
    return Math.max(1, Math.ceil(W - elapsed - ((limit - c.curr - 1) * W) / c.prev));
  }
  // Wait for the next bucket: curr × (W − t') + W ≤ limit × W  ⇔  t' ≥ W − (limit − 1) × W / curr
  const into = Math.max(0, Math.ceil(W - ((limit - 1) * W) / c.curr));
  return W - elapsed + into;
}

/** The state reported for one counter window, given its counts after the decision. */
export function stateOf(spec: WindowSpec, nowMs: number, c: WindowCounts): WindowState {
  const W = spec.windowMs;
  const elapsed = nowMs % W;
  const weighted = c.prev * (W - elapsed) + c.curr * W;
  const remaining = Math.max(0, Math.floor((spec.limit * W - weighted) / W));
  return { name: spec.name, limit: spec.limit, windowMs: W, remaining, retryMs: retryMs(spec.limit, W, elapsed, c), bucketEndsMs: W - elapsed };
}

/** The state reported for one sliding log, given what it holds after the decision. */
export function logStateOf(spec: WindowSpec, nowMs: number, c: LogCounts): WindowState {
  const W = spec.windowMs;
  const fits = c.count + 1 <= spec.limit;
  // An entry at time s counts while now < s + W; `needed` is in the window, so the wait is in (0, W].
  const retry = fits ? 0 : c.needed === null ? W : Math.max(1, c.needed + W - nowMs);
  return {
    name: spec.name,
    limit: spec.limit,
    windowMs: W,
    remaining: Math.max(0, spec.limit - c.count),
    retryMs: retry,
    bucketEndsMs: c.oldest === null ? W : Math.max(1, c.oldest + W - nowMs),
  };
}

export function windowStateOf(spec: WindowSpec, nowMs: number, observed: Observed): WindowState {
  return observed.kind === 'log' ? logStateOf(spec, nowMs, observed.counts) : stateOf(spec, nowMs, observed.counts);
}

/** Bucket bookkeeping of a counter: the counts for `bucket`, given what was stored for `stored`. */
export function roll(stored: { bucket: number; curr: number; prev: number } | undefined, bucket: number): WindowCounts {
  if (!stored) return { prev: 0, curr: 0 };
  if (stored.bucket === bucket) return { prev: stored.prev, curr: stored.curr };
  if (stored.bucket === bucket - 1) return { prev: stored.curr, curr: 0 };
  return { prev: 0, curr: 0 };
}

/** A sorted log's summary after the decision (`times` ascending, expired entries already dropped). */
export function logCountsOf(times: readonly number[], limit: number): LogCounts {
  const count = times.length;
  return { count, oldest: times[0] ?? null, needed: limit >= 1 && count >= limit ? times[count - limit]! : null };
}
