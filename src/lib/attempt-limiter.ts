import type { Clock } from '../clock.js';

/**
 * A sliding-window log of attempts per key, in process: at most `limit` attempts in any `windowMs`.
 * Refused attempts are not logged, so a caller who waits as told gets in on time.
 */
export class AttemptLimiter {
  private readonly log = new Map<string, number[]>();

  constructor(
    private readonly clock: Clock,
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly maxKeys = 100_000,
  ) {}

  /** Count an attempt; returns how long to wait (seconds, ≥ 1) when over the limit. */
  hit(key: string): { allowed: true } | { allowed: false; retryAfterSeconds: number } {
    const now = this.clock.now().getTime();
    const since = now - this.windowMs;
    const entries = (this.log.get(key) ?? []).filter((t) => t > since);
    if (entries.length >= this.limit) {
      this.log.set(key, entries);
      const retry = Math.max(1, Math.ceil((entries[0]! + this.windowMs - now) / 1000));
      return { allowed: false, retryAfterSeconds: retry };
    }
    entries.push(now);
    if (!this.log.has(key) && this.log.size >= this.maxKeys) this.prune(since);
    this.log.set(key, entries);
    return { allowed: true };
  }

  private prune(since: number): void {
    for (const [key, entries] of this.log) {
      if (entries.every((t) => t <= since)) this.log.delete(key);
    }
    if (this.log.size >= this.maxKeys) this.log.clear();
  }
}
