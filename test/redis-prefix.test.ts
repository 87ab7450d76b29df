import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import type { BusChannel } from '../src/lib/bus.js';
import { RedisRateLimiter } from '../src/lib/rate-limiter.js';
import { adminHeaders, createHarness, createTenant, type Harness, type Tenant, testDatabase } from './harness.js';

/**
 * Two installations on one Redis (README, REDIS_PREFIX): every key and every pub/sub channel carries
 * the installation's prefix, so neither hears the other's cache invalidations nor counts in the
 * other's rate-limit windows. Installation A runs two instances (a1, a2: the positive control, they
 * must share), installation B one (b1). All three use the test database, so the same deployment is a
 * subject in both installations' windows: only the prefix keeps them apart.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const run = `cg-test:${process.pid}:${randomBytes(4).toString('hex')}`;
const PREFIX_A = `${run}:a:`;
const PREFIX_B = `${run}:b:`;
const CHANNELS: BusChannel[] = ['resolve-cache', 'cost-cache', 'terms-cache', 'plan-cache', 'principal-cache', 'balance-cache'];

let h: Harness;
let a1: FastifyInstance;
let a2: FastifyInstance;
let b1: FastifyInstance;
/** A raw client on PSUBSCRIBE *: every message published on this Redis while the file runs, by anyone. */
let watcher: Redis;
let raw: Redis;
const heard: Array<{ channel: string; message: string }> = [];
/** The tenants of this file: the keys naming them are this file's. */
const tenants: Tenant[] = [];

async function instance(redisPrefix: string): Promise<FastifyInstance> {
  const app = await buildApp({ config: testConfig({ redisUrl: REDIS_URL, redisPrefix }), db: await testDatabase(), clock: h.clock });
  await app.ready();
  expect(app.deps.limiter).toBeInstanceOf(RedisRateLimiter);
  return app;
}

/** Poll until `probe` holds; bounded, so a lost message fails instead of hanging. */
async function eventually(what: string, probe: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (probe()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

beforeAll(async () => {
  h = await createHarness();
  watcher = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  watcher.on('pmessage', (_pattern: string, channel: string, message: string) => heard.push({ channel, message }));
  await watcher.psubscribe('*');
  raw = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  [a1, a2, b1] = await Promise.all([instance(PREFIX_A), instance(PREFIX_A), instance(PREFIX_B)]);
});

afterAll(async () => {
  await Promise.all([a1?.close(), a2?.close(), b1?.close(), h?.close()]);
  if (raw) {
    // Leave nothing of this file behind in the shared Redis.
    for (const prefix of [PREFIX_A, PREFIX_B]) {
      const keys = await scan(`${prefix}*`);
      if (keys.length > 0) await raw.del(...keys);
    }
    raw.disconnect();
  }
  watcher?.disconnect();
});

/** Every key matching `pattern` (SCAN, not KEYS). */
async function scan(pattern: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await raw.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  return keys;
}

/** What `app`'s bus delivers to its handlers on `channel`, from now on, carrying `marker`. */
function listen(app: FastifyInstance, channel: BusChannel, marker: string): string[] {
  const got: string[] = [];
  app.deps.bus.subscribe(channel, (message) => {
    if (message.includes(marker)) got.push(message);
  });
  return got;
}

async function tenant(tier: 'sandbox' | 'trial' | 'launch'): Promise<Tenant> {
  const t = await createTenant(h, { tier });
  tenants.push(t);
  return t;
}

const quota = (app: FastifyInstance, t: Tenant) =>
  app.inject({ method: 'GET', url: '/api/v1/ai/quota', headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret } });

describe('two installations on one Redis, told apart by REDIS_PREFIX', () => {
  it('cache invalidations: an instance hears its own installation on every channel, never the other one', async () => {
    const marker = `m-${randomBytes(6).toString('hex')}`;
    const onA2 = new Map(CHANNELS.map((c) => [c, listen(a2, c, marker)]));
    const onB1 = new Map(CHANNELS.map((c) => [c, listen(b1, c, marker)]));
    // The subscriptions are made in the background: wait until Redis delivers a message of a1 to a2.
    const probe = `${marker}-probe`;
    await eventually('a2 hears a1', () => {
      a1.deps.bus.publish('cost-cache', probe);
      return onA2.get('cost-cache')!.includes(probe);
    });

    for (const channel of CHANNELS) a1.deps.bus.publish(channel, `${marker}-from-a-${channel}`);
    await eventually('a2 hears every channel of a1', () => CHANNELS.every((c) => onA2.get(c)!.includes(`${marker}-from-a-${c}`)));
    // a1's messages are published: Redis has queued them to every subscriber (b1 and the watcher
    // included) before anything b1 publishes now, and each connection delivers in order.
    for (const channel of CHANNELS) b1.deps.bus.publish(channel, `${marker}-from-b-${channel}`);
    // b1 hears its own message twice: at once in its process, then back through Redis.
    await eventually('b1 hears itself through Redis', () => CHANNELS.every((c) => onB1.get(c)!.filter((m) => m === `${marker}-from-b-${c}`).length === 2));
    await eventually('the watcher hears b1', () => CHANNELS.every((c) => heard.some((m) => m.message === `${marker}-from-b-${c}`)));

    for (const channel of CHANNELS) {
      expect(onA2.get(channel)!.filter((m) => m.includes('-from-b-'))).toEqual([]);
      expect(onB1.get(channel)!.filter((m) => m.includes('-from-a-'))).toEqual([]);
    }
    const mine = heard.filter((m) => m.message.includes(marker));
    expect(mine.length).toBeGreaterThanOrEqual(2 * CHANNELS.length);
    for (const m of mine) {
      const prefix = m.message.includes('-from-b-') ? PREFIX_B : PREFIX_A;
      expect(m.channel, m.message).toMatch(new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}bus:`));
    }
  });

  it('the channels the service publishes on by itself carry the prefix too (a credit grant drops balances)', async () => {
    const t = await tenant('launch');
    const grant = await a1.inject({
      method: 'POST',
      url: `/api/v1/admin/deployments/${t.deploymentId}/credits`,
      headers: adminHeaders(h),
      payload: { amount: 5, reason: 'prefix test' },
    });
    expect(grant.statusCode, grant.body).toBe(200);
    await eventually('the grant is published', () => heard.some((m) => m.message === t.deploymentId));
    const published = heard.filter((m) => m.message === t.deploymentId);
    for (const m of published) expect(m.channel).toBe(`${PREFIX_A}bus:balance-cache`);
  });

  it('rate-limit windows: exhausted in one installation, the same deployment is not limited in the other', async () => {
    const t = await tenant('sandbox');
    // 100 per minute for sandbox, counted across a1 and a2 (one installation, one window).
    for (let i = 0; i < 100; i++) {
      const res = await quota(i % 2 === 0 ? a1 : a2, t);
      expect(res.statusCode, `request ${i + 1}: ${res.body}`).toBe(200);
    }
    expect((await quota(a1, t)).statusCode).toBe(429);
    expect((await quota(a2, t)).statusCode).toBe(429);

    const other = await quota(b1, t);
    expect(other.statusCode, other.body).toBe(200);
    expect(other.headers['x-ratelimit-remaining']).toBe('99');
    expect(b1.deps.limiter instanceof RedisRateLimiter && b1.deps.limiter.shared).toBe(true);

    expect(await raw.hget(`${PREFIX_A}rl:{dep:${t.deploymentId}}:60000`, 'c')).toBe('100');
    expect(await raw.hget(`${PREFIX_B}rl:{dep:${t.deploymentId}}:60000`, 'c')).toBe('1');
  });

  it('every key the service wrote starts with its installation prefix', async () => {
    const t = await tenant('trial');
    for (const app of [a1, b1]) expect((await quota(app, t)).statusCode).toBe(200);
    const ofA = await scan(`${PREFIX_A}*`);
    const ofB = await scan(`${PREFIX_B}*`);
    expect(ofA.length).toBeGreaterThan(0);
    expect(ofB.length).toBeGreaterThan(0);
    expect(ofA.some((k) => k.includes(t.deploymentId))).toBe(true);
    expect(ofB.some((k) => k.includes(t.deploymentId))).toBe(true);
    // Other test files share this Redis: the keys of this file are those naming its tenants.
    const names = (k: string) => tenants.some((x) => k.includes(x.deploymentId) || k.includes(x.organizationId));
    const ours = (await scan('*')).filter(names);
    expect(ours.length).toBeGreaterThanOrEqual(4);
    for (const key of ours) expect(key.startsWith(PREFIX_A) || key.startsWith(PREFIX_B), key).toBe(true);
  });
});
