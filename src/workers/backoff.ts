/**
 * The one backoff of the job queues (docs/jobs.md, Backoff): how long a job waits after its n-th
 * failed attempt. A queue gives either a schedule (the wait after the 1st, 2nd … failure, the last one
 * repeating) or an exponential (base × factor^(n−1), at most the cap); either way a jitter spreads the
 * retries of jobs that failed together, and a wait the other side asked for (Retry-After) is honoured
 * within that spread, so it can neither hammer nor stall the queue.
 */
export type Backoff =
  | { kind: 'schedule'; stepsMs: readonly number[]; jitter: number }
  | { kind: 'exponential'; baseMs: number; factor: number; capMs: number; jitter: number };

export interface BackoffOptions {
  /** The wait the other side asked for, if any (an HTTP Retry-After). */
  retryAfterMs?: number | null;
  /** In [0, 1); tests pass a fixed one. */
  random?: () => number;
}

/** The wait after `failures` failed attempts (1 = the first failure), in whole milliseconds. */
export function backoffMs(backoff: Backoff, failures: number, options: BackoffOptions = {}): number {
  const n = Math.max(1, Math.floor(failures));
  // The exponent stops growing long before a double overflows; the cap has taken over by then anyway.
  const base =
    backoff.kind === 'schedule'
      ? backoff.stepsMs[Math.min(n, backoff.stepsMs.length) - 1]!
      : Math.min(backoff.capMs, backoff.baseMs * backoff.factor ** Math.min(n - 1, 64));
  const low = base * (1 - backoff.jitter);
  const high = base * (1 + backoff.jitter);
  const asked = options.retryAfterMs ?? null;
  if (asked !== null) return Math.round(Math.min(high, Math.max(low, asked)));
  return Math.round(low + (options.random ?? Math.random)() * (high - low));
}
