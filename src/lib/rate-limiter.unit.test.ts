import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { HOUR, MINUTE, ManualClock, SECOND } from '../clock.js';
import { LocalRateLimiter, type RateLimiter, RedisRateLimiter, retryMs, type WindowSpec } from './rate-limiter.js';

/**
 * The sliding-window counter (docs/limits.md, The window), on both backends with the same expectations: the Redis script
 * and the in-process limiter must decide identically. Time is the test's clock (the Redis limiter is
 * told to take it instead of TIME), so windows slide without sleeping.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const START = '2026-03-02T10:00:00.000Z'; // a whole minute and hour: bucket boundaries are known
const prefix = `cg-test:unit:${randomBytes(4).toString('hex')}:rl:`;
const opened: RateLimiter[] = [];

function backends(): Array<[string, (clock: ManualClock) => RateLimiter]> {
  return [
    ['in-process', (clock) => new LocalRateLimiter(clock)],
    [
      'redis',
      (clock) => {
        // Decisions are compared here, not the fallback: a loaded machine may take longer than the default 250 ms.
        const l = new RedisRateLimiter(REDIS_URL, clock, { onOutage: () => {}, onRecovered: () => {} }, 'clock', prefix, 5_000);
        opened.push(l);
        return l;
      },
    ],
  ];
}

afterAll(async () => {
  await Promise.all(opened.map((l) => l.close()));
});

async function ready(limiter: RateLimiter): Promise<void> {
  // The Redis client connects asynchronously; until then the limiter would (correctly) fall back.
  if (!(limiter instanceof RedisRateLimiter)) return;
  const deadline = Date.now() + 5_000;
  while (!limiter.shared && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  expect(limiter.shared).toBe(true);
}

const minute = (subject: string, limit = 100): WindowSpec => ({ subject, name: 'minute', limit, windowMs: MINUTE });

describe.each(backends())('sliding window (%s)', (_name, make) => {
  it('admits 100 in a minute, refuses the 101st, and counts down X-RateLimit-Remaining', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const w = minute(`a:${randomBytes(4).toString('hex')}`);
    const remaining: number[] = [];
    for (let i = 0; i < 100; i++) {
      const d = await limiter.hit([w]);
      expect(d.allowed).toBe(true);
      remaining.push(d.windows[0]!.remaining);
      clock.advance(100);
    }
    expect(remaining[0]).toBe(99);
    expect(remaining[99]).toBe(0);
    const refused = await limiter.hit([w]);
    expect(refused.allowed).toBe(false);
    expect(refused.retryMs).toBeGreaterThan(0);
    // No silent fallback: the Redis variant really decided in Redis.
    expect(refused.backend).toBe(limiter instanceof RedisRateLimiter ? 'redis' : 'local');
  });

  it('slides: a burst at :00 leaves room 61 s later, and a refusal does not extend the lock-out', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const w = minute(`b:${randomBytes(4).toString('hex')}`);
    for (let i = 0; i < 100; i++) expect((await limiter.hit([w])).allowed).toBe(true);
    clock.advance(30 * SECOND);
    const first = await limiter.hit([w]);
    expect(first.allowed).toBe(false);
    // Hammering while refused changes nothing: the wait only shrinks as time passes.
    for (let i = 0; i < 20; i++) {
      clock.advance(SECOND);
      const again = await limiter.hit([w]);
      expect(again.allowed).toBe(false);
      expect(again.retryMs).toBe(first.retryMs - (i + 1) * SECOND);
    }
    clock.set(new Date(START).getTime() + 61 * SECOND);
    expect((await limiter.hit([w])).allowed).toBe(true);
  });

  it('admits exactly when the announced wait has passed, not a millisecond earlier', async () => {
    const clock = new ManualClock(new Date(START).getTime() + 20 * SECOND);
    const limiter = make(clock);
    await ready(limiter);
    const w = minute(`c:${randomBytes(4).toString('hex')}`, 10);
    for (let i = 0; i < 10; i++) expect((await limiter.hit([w])).allowed).toBe(true);
    const refused = await limiter.hit([w]);
    expect(refused.allowed).toBe(false);
    clock.advance(refused.retryMs - 1);
    expect((await limiter.hit([w])).allowed).toBe(false);
    clock.advance(1);
    expect((await limiter.hit([w])).allowed).toBe(true);
  });

  it('checks the minute and the hour window together and counts in neither when one refuses', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const subject = `d:${randomBytes(4).toString('hex')}`;
    const windows: WindowSpec[] = [minute(subject, 5), { subject, name: 'hour', limit: 8, windowMs: HOUR }];
    for (let i = 0; i < 5; i++) expect((await limiter.hit(windows)).allowed).toBe(true);
    const byMinute = await limiter.hit(windows);
    expect(byMinute.allowed).toBe(false);
    expect(byMinute.windows.map((x) => x.remaining)).toEqual([0, 3]);
    clock.advance(2 * MINUTE);
    for (let i = 0; i < 3; i++) expect((await limiter.hit(windows)).allowed).toBe(true);
    const byHour = await limiter.hit(windows);
    expect(byHour.allowed).toBe(false);
    // The minute window had room (2 left) and was not charged for the refused request.
    expect(byHour.windows.map((x) => x.remaining)).toEqual([2, 0]);
    expect(byHour.retryMs).toBe(byHour.windows[1]!.retryMs);
  });

  it('keeps subjects apart', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const a = minute(`e1:${randomBytes(4).toString('hex')}`, 1);
    const b = minute(`e2:${randomBytes(4).toString('hex')}`, 1);
    expect((await limiter.hit([a])).allowed).toBe(true);
    expect((await limiter.hit([a])).allowed).toBe(false);
    expect((await limiter.hit([b])).allowed).toBe(true);
  });
});

describe('both backends decide alike', () => {
  it('a random walk of requests and clock moves gives identical decisions and counts', async () => {
    const clock = new ManualClock(START);
    const local = new LocalRateLimiter(clock);
    const [, makeRedis] = backends()[1]!;
    const redis = makeRedis(clock);
    await ready(redis);
    const subject = `f:${randomBytes(4).toString('hex')}`;
    const windows: WindowSpec[] = [minute(subject, 7), { subject, name: 'hour', limit: 40, windowMs: HOUR }];
    let seed = 42;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let i = 0; i < 300; i++) {
      clock.advance(Math.floor(rand() * 9 * SECOND));
      const [l, r] = [await local.hit(windows), await redis.hit(windows)];
      expect(r.backend).toBe('redis');
      expect({ allowed: r.allowed, windows: r.windows, retryMs: r.retryMs }).toEqual({
        allowed: l.allowed,
        windows: l.windows,
        retryMs: l.retryMs,
      });
    }
  });

  it('takes Redis TIME when not told otherwise: a burst of 101 within a moment refuses the last', async () => {
    const events = { onOutage: () => {}, onRecovered: () => {} };
    const limiter = new RedisRateLimiter(REDIS_URL, new ManualClock(0), events, 'redis', prefix);
    opened.push(limiter);
    await ready(limiter);
    const w = minute(`g:${randomBytes(4).toString('hex')}`);
    const decisions = await Promise.all(Array.from({ length: 101 }, () => limiter.hit([w])));
    expect(new Set(decisions.map((d) => d.backend))).toEqual(new Set(['redis']));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(100);
    // The time came from Redis, not from the (epoch 0) clock given.
    expect(Math.abs(decisions[0]!.nowMs - Date.now())).toBeLessThan(60_000);
  });
});

describe('Redis unreachable', () => {
  it('decides in process, reports the outage once, and still limits', async () => {
    const outages: string[] = [];
    const clock = new ManualClock(START);
    const limiter = new RedisRateLimiter(
      'redis://127.0.0.1:1', // nothing listens on port 1
      clock,
      { onOutage: (err) => outages.push(err.message), onRecovered: () => outages.push('recovered') },
      'clock',
      prefix,
    );
    opened.push(limiter);
    const w = minute(`h:${randomBytes(4).toString('hex')}`, 3);
    const decisions = [];
    for (let i = 0; i < 4; i++) decisions.push(await limiter.hit([w]));
    expect(decisions.map((d) => d.backend)).toEqual(['local', 'local', 'local', 'local']);
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, false]);
    expect(outages).toHaveLength(1);
    expect(limiter.shared).toBe(false);
  });
});

describe('in-process memory bound', () => {
  it('stays within its bound under many subjects by dropping the least recently used', async () => {
    const clock = new ManualClock(START);
    const limiter = new LocalRateLimiter(clock, 1_000);
    const busy = minute('busy', 1_000_000);
    for (let i = 0; i < 20_000; i++) {
      await limiter.hit([minute(`ip-${i}`, 5)]);
      if (i % 100 === 0) await limiter.hit([busy]); // a subject in steady use is kept
    }
    const size = (limiter as unknown as { buckets: Map<string, unknown> }).buckets.size;
    expect(size).toBeLessThanOrEqual(1_000);
    expect((await limiter.hit([busy])).windows[0]!.remaining).toBe(1_000_000 - 201);
  });
});

describe('retryMs', () => {
  it('is 0 with room, waits for the previous bucket to decay, or into the next bucket when the current one is full', () => {
    expect(retryMs(10, 60_000, 0, { prev: 0, curr: 5 })).toBe(0);
    // prev 10 at 30 s into the bucket weighs 5; with curr 5 the estimate is 10: one more needs prev's weight ≤ 4 → 6 s.
    expect(retryMs(10, 60_000, 30_000, { prev: 10, curr: 5 })).toBe(6_000);
    // curr alone is full (10 of 10) at 45 s: wait 15 s to the next bucket, then until 10 × (1 − t/60) ≤ 9 → 6 s more.
    expect(retryMs(10, 60_000, 45_000, { prev: 0, curr: 10 })).toBe(21_000);
  });
});
