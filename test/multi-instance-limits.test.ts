import { Writable } from 'node:stream';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { HOUR } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { type Ctx, systemCtx } from '../src/context.js';
import { RedisRateLimiter } from '../src/lib/rate-limiter.js';
import { accountAiTokens } from '../src/modules/quotas/ai-tokens.js';
import { adminHeaders, createHarness, createTenant, type Harness, json, type Tenant, testDatabase } from './harness.js';

/**
 * Rate limits (docs/limits.md, The window) with two instances on one database, one Redis and one clock: the per-minute tier window is
 * shared (one script per request in Redis), and a period reset raced from both instances happens once.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
let h: Harness;
let a: FastifyInstance;
let b: FastifyInstance;
/** Both instances' warnings and errors (the limiter logs when it falls back from Redis): shown when an assertion fails. */
let logOutput = '';

beforeAll(async () => {
  h = await createHarness();
  const db = await testDatabase();
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      logOutput += chunk.toString();
      done();
    },
  });
  // Same module-level redisPrefix for both: they count in the same keys, as instances of one service do.
  // The shared window is what is shown here, not the fallback (test/redis-fault.test.ts): on a loaded
  // machine a command can take longer than the default 250 ms, and the instance would count alone.
  const config = () => testConfig({ redisUrl: REDIS_URL, logLevel: 'warn', redisCommandTimeoutMs: 5_000 });
  a = await buildApp({ config: config(), db, clock: h.clock, logStream });
  b = await buildApp({ config: config(), db, clock: h.clock, logStream });
  await Promise.all([a.ready(), b.ready()]);
  // ready() waits (bounded) for the limiter's Redis connection: the first request already counts in the shared window.
  const connected = (app: FastifyInstance) => app.deps.limiter instanceof RedisRateLimiter && app.deps.limiter.shared;
  expect(connected(a) && connected(b)).toBe(true);
});
afterAll(async () => {
  await Promise.all([a?.close(), b?.close(), h?.close()]);
});

const quota = (app: FastifyInstance, t: Tenant) =>
  app.inject({
    method: 'GET',
    url: '/api/v1/ai/quota',
    headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
  });

/** Sum of creditgate_rate_limit_decisions_total samples of one backend and outcome on one instance. */
async function decisions(app: FastifyInstance, backend: 'redis' | 'local', outcome: 'allowed' | 'refused'): Promise<number> {
  const res = await app.inject({ method: 'GET', url: '/metrics', headers: adminHeaders(h) });
  expect(res.statusCode).toBe(200);
  const line = res.body
    .split('\n')
    .find((l) => l.startsWith('creditgate_rate_limit_decisions_total{') && l.includes(`backend="${backend}"`) && l.includes(`outcome="${outcome}"`));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

function expectRefused(res: LightMyRequestResponse): number {
  expect(res.statusCode, res.body).toBe(429);
  const retryAfter = Number(res.headers['retry-after']);
  expect(Number.isInteger(retryAfter)).toBe(true);
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(res.headers['x-ratelimit-limit']).toBe('100');
  expect(res.headers['x-ratelimit-remaining']).toBe('0');
  const body = json<{ error: string; code: string; message: string }>(res);
  expect(body).toMatchObject({ error: 'rate_limit_exceeded', code: 'RATE_LIMITED' });
  expect(body.message).toContain(`${retryAfter} seconds`);
  return retryAfter;
}

describe('the per-minute tier window is shared by both instances', () => {
  it('a sandbox deployment gets 100 requests per minute in all, split 60/40 across the instances; the 101st is refused on either', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const before = {
      a: await decisions(a, 'redis', 'allowed'),
      b: await decisions(b, 'redis', 'allowed'),
      refusedA: await decisions(a, 'redis', 'refused'),
    };
    const remaining: number[] = [];
    for (let i = 0; i < 100; i++) {
      const res = await quota(i < 60 ? a : b, t);
      expect(res.statusCode, `request ${i + 1}: ${res.body}\n${logOutput}`).toBe(200);
      expect(res.headers['x-ratelimit-limit']).toBe('100');
      expect(res.headers['ratelimit-policy']).toBe('"minute";q=100;w=60');
      expect(res.headers.ratelimit).toMatch(/^"minute";r=\d+;t=\d+$/);
      expect(Number(res.headers['x-ratelimit-reset'])).toBeGreaterThan(h.clock.now().getTime() / 1000);
      remaining.push(Number(res.headers['x-ratelimit-remaining']));
    }
    // One window: B goes on counting down where A stopped (99 … 40 on A, 39 … 0 on B).
    expect(remaining, logOutput).toEqual(Array.from({ length: 100 }, (_, i) => 99 - i));
    // Every one of them was decided by the shared window in Redis.
    expect((await decisions(a, 'redis', 'allowed')) - before.a, logOutput).toBe(60);
    expect((await decisions(b, 'redis', 'allowed')) - before.b, logOutput).toBe(40);

    const onA = await quota(a, t);
    const retryAfter = expectRefused(onA);
    // Refusals do not consume the window: B refuses with the same wait, and so does A again.
    expect(expectRefused(await quota(b, t))).toBe(retryAfter);
    expect(expectRefused(await quota(a, t))).toBe(retryAfter);
    expect((await decisions(a, 'redis', 'refused')) - before.refusedA).toBe(2);

    // A client that waits as told gets in, on the other instance: the shared window has room again.
    h.clock.advance(retryAfter * 1000);
    const after = await quota(b, t);
    expect(after.statusCode, after.body).toBe(200);
    // …exactly one request's room: the previous minute's 100 still weigh on the sliding window, on both instances.
    expect(after.headers['x-ratelimit-remaining']).toBe('0');
    expectRefused(await quota(a, t));
    expectRefused(await quota(b, t));
  });
});

describe('an AI token period reset raced by both instances', () => {
  it('happens once: one period_reset row, and the 10 concurrent accountings all land in the new period', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const deployment = { id: t.deploymentId, organization_id: t.organizationId };
    const ctxOf = (app: FastifyInstance): Ctx => ({ ...systemCtx(app.deps), actor: { type: 'system' } });

    const first = await accountAiTokens(ctxOf(a), deployment, { inputTokens: 600, outputTokens: 300, model: 'gpt-4o-mini' });
    expect(first).toMatchObject({ tokens: 900, used: 900, limit: 1000, remaining: 100, creditsCharged: 0 });
    const q1 = await quota(b, t);
    expect(q1.statusCode, q1.body).toBe(200);
    const before = json<{ used: number; limit: number; resets_at: string }>(q1);
    expect(before).toMatchObject({ used: 900, limit: 1000 });
    const boundary = new Date(before.resets_at);
    expect(boundary.getTime()).toBeGreaterThan(h.clock.now().getTime());

    h.clock.set(boundary.getTime() + HOUR);
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        accountAiTokens(ctxOf(i % 2 === 0 ? a : b), deployment, { inputTokens: 6, outputTokens: 4, model: 'gpt-4o-mini' }),
      ),
    );
    // Serialised on the balance row: each saw the one before it, and none saw the old period's 900.
    expect(results.map((r) => r.used).sort((x, y) => x - y)).toEqual([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
    // All within the new period's 1,000 tokens: nothing paid with credits.
    expect(results.every((r) => r.creditsDue === 0 && r.creditsCharged === 0)).toBe(true);
    expect(new Set(results.map((r) => r.resetsAt))).toEqual(new Set([results[0]!.resetsAt]));
    expect(new Date(results[0]!.resetsAt).getTime()).toBeGreaterThan(boundary.getTime());

    for (const app of [a, b]) {
      const res = await quota(app, t);
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res)).toMatchObject({ used: 100, limit: 1000, remaining: 900, resets_at: results[0]!.resetsAt });
    }
    const resets = await h.deps.db.query<{ reason: string | null }>(
      `SELECT reason FROM credit_ledger WHERE deployment_id = $1 AND kind = 'period_reset' AND created_at >= $2 ORDER BY id`,
      [t.deploymentId, boundary],
    );
    expect(resets).toHaveLength(1);
    expect(resets[0]!.reason).toContain(boundary.toISOString());
  });
});
