import { hash, randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';
import {
  admits,
  logCountsOf,
  type Observed,
  roll,
  type WindowSpec,
  windowStateOf,
  type WindowState,
} from './rate-windows.js';
import { observedFromReply, SLIDING_WINDOW_SCRIPT } from './rate-limit-script.js';

/**
 * Rate limits (docs/limits.md), on two backends that decide identically: Redis (one Lua script per request,
 * shared by every instance) and in-process (alone without REDIS_URL, and as the fallback while Redis is
 * unreachable). A request is admitted when every window it is checked against has room; then (and only
 * then) each window counts it, so refused requests never consume the window. The window arithmetic
 * (sliding-window counter, and the exact sliding log for small limits) is src/lib/rate-windows.ts.
 */
export type { WindowCounts, WindowSpec, WindowState } from './rate-windows.js';
export { admits, retryMs, stateOf } from './rate-windows.js';

export interface Decision {
  allowed: boolean;
  windows: WindowState[];
  /** ms from now until every refusing window admits a request (0 when allowed). */
  retryMs: number;
  nowMs: number;
  backend: 'redis' | 'local';
}

export interface HitOptions {
  /** Decide without counting, even when admitted: "would one more fit?" (the failed-authentication throttle asks before checking credentials). */
  peek?: boolean;
}

export interface RateLimiter {
  hit(windows: WindowSpec[], options?: HitOptions): Promise<Decision>;
  /** Resolves once the backend can decide (Redis connected), or after `timeoutMs`; never rejects. */
  ready(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

/** Whole seconds to wait after a refusal (≥ 1), as Retry-After says it. */
export function retryAfterSeconds(decision: Decision): number {
  return Math.max(1, Math.ceil(decision.retryMs / 1000));
}

/** A subject built from personal data (an email address) goes into Redis keys only as a hash. */
export function hashedSubject(kind: string, ...parts: string[]): string {
  return `${kind}:${hash('sha256', parts.join('|'), 'base64url').slice(0, 22)}`;
}

/**
 * Count one attempt against every window (all or none), or throw 429 RATE_LIMITED with Retry-After:
 * the per-purpose limits beyond the request limits (login per IP and email, test mails),
 * shared by every instance like the request windows.
 */
export async function limitAttempt(limiter: RateLimiter, windows: WindowSpec[], what: string): Promise<void> {
  const decision = await limiter.hit(windows);
  if (decision.allowed) return;
  const seconds = retryAfterSeconds(decision);
  throw new AppError('RATE_LIMITED', `Too many ${what}; retry in ${seconds} seconds`, {}, { 'retry-after': String(seconds) });
}

function decide(specs: WindowSpec[], nowMs: number, observed: Observed[], allowed: boolean, backend: Decision['backend']): Decision {
  const windows = specs.map((s, i) => windowStateOf(s, nowMs, observed[i]!));
  return { allowed, windows, retryMs: allowed ? 0 : Math.max(...windows.map((w) => w.retryMs)), nowMs, backend };
}

type Counter = { bucket: number; curr: number; prev: number };
/** A sliding log: times of the admitted hits, ascending. */
type Log = { times: number[] };

/** The key of one window of one subject; a log never shares a key with a counter. */
const keyOf = (s: WindowSpec) => `${s.subject}:${s.windowMs}${s.exact ? ':log' : ''}`;

/** The per-instance limiter: used alone without REDIS_URL, and as the fallback while Redis is unreachable. */
export class LocalRateLimiter implements RateLimiter {
  private readonly buckets = new Map<string, Counter | Log>();
  private hits = 0;

  constructor(
    private readonly clock: Clock,
    private readonly maxKeys = 200_000,
  ) {}

  async hit(specs: WindowSpec[], options: HitOptions = {}, nowMs = this.clock.now().getTime()): Promise<Decision> {
    const keys = specs.map(keyOf);
    const logs = specs.map((s, i) => (s.exact ? this.liveLog(keys[i]!, nowMs - s.windowMs) : []));
    const counters = specs.map((s, i) => (s.exact ? { prev: 0, curr: 0 } : roll(this.buckets.get(keys[i]!) as Counter | undefined, Math.floor(nowMs / s.windowMs))));
    const allowed = specs.every((s, i) =>
      s.exact ? logs[i]!.length + 1 <= s.limit : admits(s.limit, s.windowMs, nowMs % s.windowMs, counters[i]!),
    );
    if (allowed && !options.peek) {
      specs.forEach((s, i) => {
        const key = keys[i]!;
        // Delete then set: the map's order is the order of last use, so eviction drops the least recently used.
        this.buckets.delete(key);
        if (s.exact) {
          const times = logs[i]!;
          let at = times.length;
          while (at > 0 && times[at - 1]! > nowMs) at -= 1;
          times.splice(at, 0, nowMs);
          this.buckets.set(key, { times });
        } else {
          const c = counters[i]!;
          c.curr += 1;
          this.buckets.set(key, { bucket: Math.floor(nowMs / s.windowMs), curr: c.curr, prev: c.prev });
        }
      });
      if (++this.hits % 10_000 === 0) this.prune(nowMs);
      if (this.buckets.size > this.maxKeys) this.evict();
    }
    const observed = specs.map((s, i): Observed =>
      s.exact ? { kind: 'log', counts: logCountsOf(logs[i]!, s.limit) } : { kind: 'counter', counts: counters[i]! },
    );
    return decide(specs, nowMs, observed, allowed, 'local');
  }

  /** The entries of a log still in the window (> `after`); expired ones are dropped for good, as ZREMRANGEBYSCORE does. */
  private liveLog(key: string, after: number): number[] {
    const stored = this.buckets.get(key) as Log | undefined;
    if (!stored) return [];
    const first = stored.times.findIndex((t) => t > after);
    if (first !== 0) stored.times.splice(0, first === -1 ? stored.times.length : first);
    return stored.times;
  }

  /** Drop windows that no longer count (counters: both buckets past; logs: every entry past): one sweep every 10,000 admitted requests. */
  private prune(nowMs: number): void {
    for (const [key, value] of this.buckets) {
      const windowMs = Number(key.split(':').at(key.endsWith(':log') ? -2 : -1));
      const stale = 'times' in value ? value.times.every((t) => t <= nowMs - windowMs) : value.bucket < Math.floor(nowMs / windowMs) - 1;
      if (stale) this.buckets.delete(key);
    }
  }

  /**
   * Over the bound with live windows (many distinct subjects, e.g. client IPs): drop the least recently
   * used tenth at once, so the cost is paid once per 10 % of the bound, not on every new subject.
   */
  private evict(): void {
    let drop = this.buckets.size - Math.floor(this.maxKeys * 0.9);
    for (const key of this.buckets.keys()) {
      if (drop-- <= 0) break;
      this.buckets.delete(key);
    }
  }

  async ready(): Promise<void> {}

  async close(): Promise<void> {
    this.buckets.clear();
  }
}

type SlidingRedis = Redis & { slidingWindow(...args: Array<string | number>): Promise<number[]> };

export interface RedisLimiterEvents {
  /** Redis stopped answering: the limiter counts per instance until it answers again (logged once per outage). */
  onOutage(err: Error): void;
  onRecovered(): void;
  /** Every request decided by the in-process fallback. */
  onFallback?(): void;
}

/**
 * The shared limiter (docs/limits.md, Redis outage). While Redis is unreachable every request is decided by the in-process
 * window instead (availability of metering beats strictness of throttling); the shared window resumes
 * with the first answer Redis gives again.
 */
export class RedisRateLimiter implements RateLimiter {
  private readonly redis: SlidingRedis;
  private readonly fallback: LocalRateLimiter;
  private down = false;

  constructor(
    url: string,
    private readonly clock: Clock,
    private readonly events: RedisLimiterEvents,
    /** 'redis' takes time from Redis TIME (production, several instances); 'clock' from the app's clock (tests). */
    private readonly timeFrom: 'redis' | 'clock' = 'redis',
    /** Key prefix (REDIS_PREFIX + 'rl:'): instances that share limits share it. */
    private readonly prefix = 'cg:rl:',
    /** How long a command may take before the request is counted per instance (REDIS_COMMAND_TIMEOUT_MS). */
    commandTimeout = 250,
  ) {
    this.redis = new Redis(url, {
      // Fail fast instead of queueing while disconnected: a request must not wait for Redis.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout,
      connectTimeout: 2_000,
      retryStrategy: (times) => Math.min(times * 100, 2_000),
      lazyConnect: false,
    }) as SlidingRedis;
    this.redis.on('error', () => {});
    this.redis.defineCommand('slidingWindow', { lua: SLIDING_WINDOW_SCRIPT });
    this.fallback = new LocalRateLimiter(clock);
  }

  async hit(specs: WindowSpec[], options: HitOptions = {}): Promise<Decision> {
    const keys = specs.map((s) => `${this.prefix}{${s.subject}}:${s.windowMs}${s.exact ? ':log' : ''}`);
    const args: Array<string | number> = [
      ...keys,
      this.timeFrom === 'clock' ? this.clock.now().getTime() : 'TIME',
      options.peek ? 1 : 0,
      randomBytes(9).toString('base64url'),
    ];
    for (const s of specs) args.push(s.limit, s.windowMs, s.exact ? 'l' : 'c');
    let reply: number[];
    try {
      if (this.redis.status !== 'ready') throw new Error(`redis ${this.redis.status}`);
      reply = await this.redis.slidingWindow(keys.length, ...args);
    } catch (err) {
      if (!this.down) {
        this.down = true;
        this.events.onOutage(err as Error);
      }
      this.events.onFallback?.();
      return this.fallback.hit(specs, options);
    }
    if (this.down) {
      this.down = false;
      this.events.onRecovered();
    }
    const nowMs = Number(reply[0]);
    const observed = observedFromReply(specs, reply);
    return decide(specs, nowMs, observed, Number(reply[1]) === 1, 'redis');
  }

  /**
   * The app waits for this at start (onReady), so the first requests are not counted per instance
   * merely because the connection was still being made. If Redis is down at start, the fallback decides.
   */
  async ready(timeoutMs: number): Promise<void> {
    if (this.redis.status === 'ready') return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.redis.off('ready', done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.redis.once('ready', done);
    });
  }

  /** Is the shared window in use (false while the in-process fallback decides)? */
  get shared(): boolean {
    return !this.down && this.redis.status === 'ready';
  }

  async close(): Promise<void> {
    this.redis.disconnect();
    await this.fallback.close();
  }
}
