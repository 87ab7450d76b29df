import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';

/**
 * SPEC §6 rate limits: sliding-window counters. A window of W ms is split into fixed buckets of W;
 * the estimate at time t is `prev × (W − elapsed) / W + curr`, where `elapsed` is how far t is into the
 * current bucket. A request is admitted when `estimate + 1 ≤ limit` in every window it is checked
 * against; then (and only then) every window's current bucket is incremented, so refused requests
 * never consume the window. All comparisons are done multiplied by W, in integers, so the Redis
 * script and the in-process limiter decide identically.
 */
export interface WindowSpec {
  /** Identifies the subject (deployment, organization, user, IP); windows of one subject share a Redis slot. */
  subject: string;
  /** A short name for the policy, used in RateLimit-Policy ("minute", "hour"). */
  name: string;
  limit: number;
  windowMs: number;
}

export interface WindowCounts {
  prev: number;
  curr: number;
}

export interface WindowState {
  name: string;
  limit: number;
  windowMs: number;
  /** Requests still admitted right now. */
  remaining: number;
  /** ms from now until this window admits a request again (0 when it does now). */
  retryMs: number;
  /** ms from now until the current bucket ends. */
  bucketEndsMs: number;
}

export interface Decision {
  allowed: boolean;
  windows: WindowState[];
  /** ms from now until every refusing window admits a request (0 when allowed). */
  retryMs: number;
  nowMs: number;
  backend: 'redis' | 'local';
}

export interface RateLimiter {
  hit(windows: WindowSpec[]): Promise<Decision>;
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
  return `${kind}:${createHash('sha256').update(parts.join('|')).digest('base64url').slice(0, 22)}`;
}

/**
 * Count one attempt against every window (all or none), or throw 429 RATE_LIMITED with Retry-After:
 * the per-purpose limits of SPEC §6 beyond the request limits (login per IP and email, test mails),
 * shared by every instance like the request windows.
 */
export async function limitAttempt(limiter: RateLimiter, windows: WindowSpec[], what: string): Promise<void> {
  const decision = await limiter.hit(windows);
  if (decision.allowed) return;
  const seconds = retryAfterSeconds(decision);
  throw new AppError('RATE_LIMITED', `Too many ${what}; retry in ${seconds} seconds`, {}, { 'retry-after': String(seconds) });
}

/** Is there room for one more request in this window at `elapsed` ms into the current bucket? */
export function admits(limit: number, windowMs: number, elapsed: number, c: WindowCounts): boolean {
  return c.prev * (windowMs - elapsed) + (c.curr + 1) * windowMs <= limit * windowMs;
}

/** The state reported for one window, given its counts after the decision. */
export function stateOf(spec: WindowSpec, nowMs: number, c: WindowCounts): WindowState {
  const W = spec.windowMs;
  const elapsed = nowMs % W;
  const weighted = c.prev * (W - elapsed) + c.curr * W;
  const remaining = Math.max(0, Math.floor((spec.limit * W - weighted) / W));
  return { name: spec.name, limit: spec.limit, windowMs: W, remaining, retryMs: retryMs(spec.limit, W, elapsed, c), bucketEndsMs: W - elapsed };
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

/** Bucket bookkeeping shared by both backends: the counts for `bucket`, given what was stored for `stored`. */
function roll(stored: { bucket: number; curr: number; prev: number } | undefined, bucket: number): WindowCounts {
  if (!stored) return { prev: 0, curr: 0 };
  if (stored.bucket === bucket) return { prev: stored.prev, curr: stored.curr };
  if (stored.bucket === bucket - 1) return { prev: stored.curr, curr: 0 };
  return { prev: 0, curr: 0 };
}

function decide(specs: WindowSpec[], nowMs: number, counts: WindowCounts[], allowed: boolean, backend: Decision['backend']): Decision {
  const windows = specs.map((s, i) => stateOf(s, nowMs, counts[i]!));
  return { allowed, windows, retryMs: allowed ? 0 : Math.max(...windows.map((w) => w.retryMs)), nowMs, backend };
}

/** The per-instance limiter: used alone without REDIS_URL, and as the fallback while Redis is unreachable. */
export class LocalRateLimiter implements RateLimiter {
  private readonly buckets = new Map<string, { bucket: number; curr: number; prev: number }>();
  private hits = 0;

  constructor(
    private readonly clock: Clock,
    private readonly maxKeys = 200_000,
  ) {}

  async hit(specs: WindowSpec[], nowMs = this.clock.now().getTime()): Promise<Decision> {
    const keys = specs.map((s) => `${s.subject}:${s.windowMs}`);
    const bucketOf = specs.map((s) => Math.floor(nowMs / s.windowMs));
    const counts = specs.map((_, i) => roll(this.buckets.get(keys[i]!), bucketOf[i]!));
    const allowed = specs.every((s, i) => admits(s.limit, s.windowMs, nowMs % s.windowMs, counts[i]!));
    if (allowed) {
      specs.forEach((_, i) => {
        const c = counts[i]!;
        c.curr += 1;
        // Delete then set: the map's order is the order of last use, so eviction drops the least recently used.
        this.buckets.delete(keys[i]!);
        this.buckets.set(keys[i]!, { bucket: bucketOf[i]!, curr: c.curr, prev: c.prev });
      });
      if (++this.hits % 10_000 === 0) this.prune(nowMs);
      if (this.buckets.size > this.maxKeys) this.evict();
    }
    return decide(specs, nowMs, counts, allowed, 'local');
  }

  /** Drop windows that no longer count (both buckets in the past): one sweep every 10,000 admitted requests. */
  private prune(nowMs: number): void {
    for (const [key, value] of this.buckets) {
      const windowMs = Number(key.slice(key.lastIndexOf(':') + 1));
      if (value.bucket < Math.floor(nowMs / windowMs) - 1) this.buckets.delete(key);
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

/**
 * One script per request: every window is read, rolled to the current bucket and checked; only when all
 * admit is each incremented. Time comes from Redis TIME unless the caller passes it (tests with a moved
 * clock). One hash per window: b = bucket index, c = current count, p = previous count.
 * Returns {now, allowed, prev1, curr1, prev2, curr2, …} with counts after the decision.
 */
const SCRIPT = `
local now = tonumber(ARGV[1]) -- 'TIME': take Redis's own clock
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local n = #KEYS
local prev, curr, bucket = {}, {}, {}
local allowed = 1
for i = 1, n do
  local limit = tonumber(ARGV[2 * i])
  local w = tonumber(ARGV[2 * i + 1])
  local b = math.floor(now / w)
  local stored = redis.call('HMGET', KEYS[i], 'b', 'c', 'p')
  local sb, sc, sp = tonumber(stored[1]), tonumber(stored[2]) or 0, tonumber(stored[3]) or 0
  local p, c = 0, 0
  if sb == b then p, c = sp, sc elseif sb == b - 1 then p, c = sc, 0 end
  prev[i], curr[i], bucket[i] = p, c, b
  local elapsed = now - b * w
  if p * (w - elapsed) + (c + 1) * w > limit * w then allowed = 0 end
end
local out = {now, allowed}
for i = 1, n do
  if allowed == 1 then
    curr[i] = curr[i] + 1
    redis.call('HSET', KEYS[i], 'b', bucket[i], 'c', curr[i], 'p', prev[i])
    redis.call('PEXPIRE', KEYS[i], 2 * tonumber(ARGV[2 * i + 1]))
  end
  out[#out + 1] = prev[i]
  out[#out + 1] = curr[i]
end
return out`;

type SlidingRedis = Redis & { slidingWindow(...args: Array<string | number>): Promise<number[]> };

export interface RedisLimiterEvents {
  /** Redis stopped answering: the limiter counts per instance until it answers again (logged once per outage). */
  onOutage(err: Error): void;
  onRecovered(): void;
  /** Every request decided by the in-process fallback. */
  onFallback?(): void;
}

/**
 * The shared limiter (SPEC §6). While Redis is unreachable every request is decided by the in-process
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
  ) {
    this.redis = new Redis(url, {
      // Fail fast instead of queueing while disconnected: a request must not wait for Redis.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: 250,
      connectTimeout: 2_000,
      retryStrategy: (times) => Math.min(times * 100, 2_000),
      lazyConnect: false,
    }) as SlidingRedis;
    this.redis.on('error', () => {});
    this.redis.defineCommand('slidingWindow', { lua: SCRIPT });
    this.fallback = new LocalRateLimiter(clock);
  }

  async hit(specs: WindowSpec[]): Promise<Decision> {
    const keys = specs.map((s) => `${this.prefix}{${s.subject}}:${s.windowMs}`);
    const args: Array<string | number> = [...keys, this.timeFrom === 'clock' ? this.clock.now().getTime() : 'TIME'];
    for (const s of specs) args.push(s.limit, s.windowMs);
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
      return this.fallback.hit(specs);
    }
    if (this.down) {
      this.down = false;
      this.events.onRecovered();
    }
    const nowMs = Number(reply[0]);
    const counts = specs.map((_, i) => ({ prev: Number(reply[2 + 2 * i]), curr: Number(reply[3 + 2 * i]) }));
    return decide(specs, nowMs, counts, Number(reply[1]) === 1, 'redis');
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
