import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { MINUTE, ManualClock, SECOND } from '../clock.js';
import { LocalRateLimiter, type RateLimiter, RedisRateLimiter, type WindowSpec } from './rate-limiter.js';

/**
 * The exact sliding log (docs/accounts.md: login's 10 attempts per 15 minutes are counted exactly)
 * and peeks, on both backends with the same expectations, on the test's clock.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
// 12:14:00: one minute before a 15-minute bucket boundary, where the counter's approximation shows.
const START = '2026-03-02T12:14:00.000Z';
const prefix = `cg-test:unit-log:${randomBytes(4).toString('hex')}:rl:`;
const opened: RateLimiter[] = [];

function redisLimiter(clock: ManualClock): RedisRateLimiter {
  // Decisions are compared here, not the fallback: a loaded machine may take longer than the default 250 ms.
  const l = new RedisRateLimiter(REDIS_URL, clock, { onOutage: () => {}, onRecovered: () => {} }, 'clock', prefix, 5_000);
  opened.push(l);
  return l;
}

const backends: Array<[string, (clock: ManualClock) => RateLimiter]> = [
  ['in-process', (clock) => new LocalRateLimiter(clock)],
  ['redis', redisLimiter],
];

afterAll(async () => {
  await Promise.all(opened.map((l) => l.close()));
});

async function ready(limiter: RateLimiter): Promise<void> {
  if (!(limiter instanceof RedisRateLimiter)) return;
  const deadline = Date.now() + 5_000;
  while (!limiter.shared && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  expect(limiter.shared).toBe(true);
}

const login = (subject: string): WindowSpec => ({ subject, name: 'login', limit: 10, windowMs: 15 * MINUTE, exact: true });
const fresh = (tag: string) => `${tag}:${randomBytes(4).toString('hex')}`;

describe.each(backends)('sliding log (%s)', (name, make) => {
  it('10 hits spread over 11¼ minutes: the 11th at 12½ minutes is refused, and the slot frees exactly 15 minutes after the first', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const w = login(fresh('spread'));
    const first = clock.now().getTime();
    for (let i = 0; i < 10; i++) {
      if (i > 0) clock.advance(75 * SECOND);
      const d = await limiter.hit([w]);
      expect(d.allowed, `hit ${i + 1}`).toBe(true);
      expect(d.windows[0]!.remaining).toBe(9 - i);
      expect(d.backend).toBe(name === 'redis' ? 'redis' : 'local');
    }
    clock.set(first + 12.5 * MINUTE);
    const refused = await limiter.hit([w]);
    expect(refused.allowed).toBe(false);
    expect(refused.retryMs).toBe(2.5 * MINUTE);
    clock.set(first + 15 * MINUTE - 1);
    expect((await limiter.hit([w])).allowed).toBe(false);
    clock.set(first + 15 * MINUTE);
    const again = await limiter.hit([w]);
    expect(again.allowed).toBe(true);
    // Only the first hit left: the second frees its slot 75 s later.
    expect(again.windows[0]!.remaining).toBe(0);
    expect((await limiter.hit([w])).retryMs).toBe(75 * SECOND);
  });

  it('a burst just before a bucket boundary does not fade after it (the counter would admit again 90 s in)', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const w = login(fresh('boundary'));
    for (let i = 0; i < 10; i++) {
      expect((await limiter.hit([w])).allowed).toBe(true);
      clock.advance(5 * SECOND);
    }
    // 12:16:30, 2½ minutes after the first hit and 90 s into the next 15-minute bucket.
    clock.set(new Date(START).getTime() + 2.5 * MINUTE);
    const refused = await limiter.hit([w]);
    expect(refused.allowed).toBe(false);
    expect(refused.retryMs).toBe(12.5 * MINUTE);
  });

  it('refused hits are not recorded, and a peek never counts', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const w: WindowSpec = { subject: fresh('peek'), name: 'p', limit: 2, windowMs: MINUTE, exact: true };
    for (let i = 0; i < 5; i++) expect((await limiter.hit([w], { peek: true })).allowed).toBe(true);
    expect((await limiter.hit([w])).allowed).toBe(true);
    expect((await limiter.hit([w])).allowed).toBe(true);
    for (let i = 0; i < 5; i++) expect((await limiter.hit([w])).allowed).toBe(false);
    expect((await limiter.hit([w], { peek: true })).allowed).toBe(false);
    clock.advance(MINUTE);
    expect((await limiter.hit([w])).allowed).toBe(true);
  });

  it('a peek of a counter window decides without counting', async () => {
    const clock = new ManualClock(START);
    const limiter = make(clock);
    await ready(limiter);
    const w: WindowSpec = { subject: fresh('peek-counter'), name: 'minute', limit: 3, windowMs: MINUTE };
    for (let i = 0; i < 3; i++) expect((await limiter.hit([w], { peek: true })).windows[0]!.remaining).toBe(3);
    for (let i = 0; i < 3; i++) expect((await limiter.hit([w])).allowed).toBe(true);
    expect((await limiter.hit([w], { peek: true })).allowed).toBe(false);
  });
});

describe('both backends decide alike with logs and counters mixed', () => {
  it('a random walk of hits, peeks and clock moves gives identical decisions, states and waits', async () => {
    const clock = new ManualClock(START);
    const local = new LocalRateLimiter(clock);
    const redis = redisLimiter(clock);
    await ready(redis);
    const subject = fresh('walk');
    const windows: WindowSpec[] = [
      { subject, name: 'log', limit: 6, windowMs: MINUTE, exact: true },
      { subject, name: 'minute', limit: 9, windowMs: MINUTE },
      { subject, name: 'log5', limit: 15, windowMs: 5 * MINUTE, exact: true },
    ];
    let seed = 7;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    let refusals = 0;
    for (let i = 0; i < 400; i++) {
      // Several hits in the same millisecond now and then: members of one sorted set stay distinct.
      if (rand() > 0.2) clock.advance(Math.floor(rand() * 12 * SECOND));
      const peek = rand() < 0.15;
      const [l, r] = [await local.hit(windows, { peek }), await redis.hit(windows, { peek })];
      expect(r.backend).toBe('redis');
      expect({ allowed: r.allowed, windows: r.windows, retryMs: r.retryMs, nowMs: r.nowMs }, `step ${i}`).toEqual({
        allowed: l.allowed,
        windows: l.windows,
        retryMs: l.retryMs,
        nowMs: l.nowMs,
      });
      if (!l.allowed) refusals += 1;
    }
    // The walk exercised both outcomes.
    expect(refusals).toBeGreaterThan(20);
    expect(refusals).toBeLessThan(380);
  });
});

describe('in-process logs stay bounded', () => {
  it('drops logs whose entries all left the window, and evicts the least recently used past the bound', async () => {
    const clock = new ManualClock(START);
    const limiter = new LocalRateLimiter(clock, 1_000);
    const size = () => (limiter as unknown as { buckets: Map<string, unknown> }).buckets.size;
    const busy: WindowSpec = { subject: 'busy', name: 'log', limit: 1_000_000, windowMs: 15 * MINUTE, exact: true };
    for (let i = 0; i < 20_000; i++) {
      await limiter.hit([{ subject: `ip-${i}`, name: 'log', limit: 3, windowMs: MINUTE, exact: true }]);
      if (i % 100 === 0) await limiter.hit([busy]);
    }
    expect(size()).toBeLessThanOrEqual(1_000);
    expect((await limiter.hit([busy])).windows[0]!.remaining).toBe(1_000_000 - 201);
    // A minute on, the next sweep (every 10,000 admitted hits) drops every one-minute log.
    clock.advance(MINUTE);
    for (let i = 0; i < 10_000; i++) await limiter.hit([{ subject: 'steady', name: 'm', limit: 1_000_000, windowMs: MINUTE }]);
    expect(size()).toBe(2);
  });
});
