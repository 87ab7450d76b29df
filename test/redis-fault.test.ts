import { type ChildProcess, spawn } from 'node:child_process';
import { createConnection, createServer } from 'node:net';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { type Config, testConfig } from '../src/config.js';
import { RedisRateLimiter } from '../src/lib/rate-limiter.js';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, type Tenant } from './harness.js';

/**
 * Rate limits with Redis going away and coming back (docs/limits.md, Redis outage): a private redis-server for this file, killed and
 * restarted on the same port. While it is down, metering answers as before, /readyz names Redis, the
 * limit still applies per instance (logged once per outage), and the shared window resumes after.
 */

/** A port nothing listens on right now (the OS picks it; we release it for redis-server). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/** One raw PING; true on +PONG, false on anything else within `timeoutMs`. */
function pingOnce(port: number, timeoutMs = 200): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(data.toString().startsWith('+PONG')));
    socket.once('error', () => done(false));
  });
}

/** Poll `probe` every `intervalMs` until it holds; bounded, so a lost recovery fails instead of hanging. */
async function eventually(what: string, probe: () => Promise<boolean>, timeoutMs = 15_000, intervalMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

let redisProcess: ChildProcess | undefined;

/** Start redis-server on `port` (no persistence: a restart comes back empty) and wait until it answers PING. */
async function startRedis(port: number): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  redisProcess = child;
  await eventually(
    `redis-server on port ${port} answers PING`,
    async () => {
      if (exited) throw new Error(`redis-server on port ${port} exited at start (exit code ${child.exitCode})`);
      return pingOnce(port);
    },
    10_000,
  );
  return child;
}

/** Kill redis-server outright (as a crash would) and wait until the process is gone. */
async function stopRedis(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  await exited;
  if (redisProcess === child) redisProcess = undefined;
}

let port: number;
let config: Config;
let h: Harness;
let app: FastifyInstance;
let logOutput = '';

beforeAll(async () => {
  port = await freePort();
  await startRedis(port);
  h = await createHarness();
  // warn: the limiter's outage (error) and recovery (warn) lines, without a line per request.
  config = testConfig({ redisUrl: `redis://127.0.0.1:${port}`, logLevel: 'warn' });
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      logOutput += chunk.toString();
      done();
    },
  });
  app = await buildApp({ config, db: h.deps.db, clock: h.clock, logStream });
  await app.ready();
  // The clients connect in the background: measure once both the bus and the limiter are connected.
  const limiter = app.deps.limiter;
  expect(limiter).toBeInstanceOf(RedisRateLimiter);
  await eventually('the app is connected to Redis', async () => (limiter as RedisRateLimiter).shared && (await readyz()).statusCode === 200, 10_000);
});

afterAll(async () => {
  if (redisProcess) await stopRedis(redisProcess);
  await app?.close();
  await h?.close();
});

const quota = (t: Tenant) =>
  app.inject({
    method: 'GET',
    url: '/api/v1/ai/quota',
    headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
  });

const readyz = () => app.inject({ method: 'GET', url: '/readyz' });

interface Scrape {
  fallback: number;
  decisions: (backend: 'redis' | 'local', outcome?: 'allowed' | 'refused') => number;
  outages: number;
}

/** GET /metrics, parsed just enough for the rate-limit series. */
async function scrape(): Promise<Scrape> {
  const res = await app.inject({ method: 'GET', url: '/metrics', headers: adminHeaders(h) });
  expect(res.statusCode).toBe(200);
  const samples = res.body
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => ({ series: l.slice(0, l.lastIndexOf(' ')), value: Number(l.slice(l.lastIndexOf(' ') + 1)) }));
  const sum = (test: (series: string) => boolean) => samples.filter((s) => test(s.series)).reduce((n, s) => n + s.value, 0);
  return {
    fallback: sum((s) => s === 'creditgate_rate_limit_fallback'),
    outages: sum((s) => s === 'creditgate_rate_limit_redis_outages_total'),
    decisions: (backend, outcome) =>
      sum(
        (s) =>
          s.startsWith('creditgate_rate_limit_decisions_total{') &&
          s.includes(`backend="${backend}"`) &&
          (outcome === undefined || s.includes(`outcome="${outcome}"`)),
      ),
  };
}

/** Log lines (pino JSON) whose message contains `text`. */
const logLines = (text: string) =>
  logOutput
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as { level: number; msg?: string })
    .filter((l) => l.msg?.includes(text) === true);

/** 100 requests per minute pass for a fresh sandbox deployment, the 101st is refused (the clock does not move). */
async function expectSandboxLimit(t: Tenant): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const res = await quota(t);
    expect(res.statusCode, `request ${i + 1}: ${res.body}`).toBe(200);
    expect(res.headers['x-ratelimit-remaining']).toBe(String(99 - i));
  }
  const refused = await quota(t);
  expect(refused.statusCode, refused.body).toBe(429);
  expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  expect(refused.headers['x-ratelimit-remaining']).toBe('0');
  expect(json(refused)).toMatchObject({ error: 'rate_limit_exceeded', code: 'RATE_LIMITED' });
}

describe('the rate limiter across a Redis outage (private redis-server)', () => {
  let redisDecisionsBeforeOutage = 0;

  it('with Redis up: requests are counted in Redis under the configured prefix', async () => {
    expect((await readyz()).json()).toEqual({ status: 'ready', checks: { database: 'ok', redis: 'ok' } });
    const t = await createTenant(h, { tier: 'sandbox' });
    for (let i = 0; i < 5; i++) expect((await quota(t)).statusCode).toBe(200);

    const client = new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await client.connect();
      const key = `${config.redisPrefix}rl:{dep:${t.deploymentId}}:60000`;
      expect(await client.keys(`${config.redisPrefix}rl:*`)).toContain(key);
      expect(await client.hget(key, 'c')).toBe('5');
      expect(await client.pttl(key)).toBeGreaterThan(0);
    } finally {
      client.disconnect();
    }
    const m = await scrape();
    expect(m.decisions('redis', 'allowed')).toBe(5);
    expect(m.decisions('local')).toBe(0);
    expect(m.fallback).toBe(0);
    redisDecisionsBeforeOutage = m.decisions('redis');
    expect(logLines('Redis unreachable')).toHaveLength(0);
  });

  it('with Redis killed: metering answers as before, /readyz is 503 naming Redis, the limit holds per instance, logged once', async () => {
    await stopRedis(redisProcess!);

    // Money paths do not depend on Redis.
    const trial = await createTenant(h, { tier: 'trial' });
    const usage = await app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(trial.apiKey), payload: { tool_name: 'x' } });
    expect(usage.statusCode, usage.body).toBe(200);
    expect(json(usage)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 99 });
    const check = await app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(trial.apiKey), payload: { tool_name: 'x' } });
    expect(check.statusCode, check.body).toBe(200);
    expect(json(check)).toMatchObject({ allowed: true, credit_cost: 1 });
    const q = await quota(trial);
    expect(q.statusCode, q.body).toBe(200);
    expect(json(q)).toMatchObject({ credits_available: 99 });

    const ready = await readyz();
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toEqual({ status: 'not_ready', checks: { database: 'ok', redis: 'unreachable' } });
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);

    // The in-process window still limits: a fresh sandbox deployment gets its 100, not 101.
    await expectSandboxLimit(await createTenant(h, { tier: 'sandbox' }));

    const m = await scrape();
    expect(m.fallback).toBe(1);
    expect(m.outages).toBe(1);
    // Every decision since the kill came from the fallback: 3 trial requests, 100 + 1 sandbox ones.
    expect(m.decisions('redis')).toBe(redisDecisionsBeforeOutage);
    expect(m.decisions('local', 'allowed')).toBe(103);
    expect(m.decisions('local', 'refused')).toBe(1);
    // Logged once for the whole outage, not once per request.
    const outage = logLines('Redis unreachable');
    expect(outage).toHaveLength(1);
    expect(outage[0]!.level).toBe(50);
    expect((await readyz()).statusCode).toBe(503);
  });

  it('with Redis back on the same port: /readyz turns 200, the shared window resumes, the fallback gauge returns to 0', async () => {
    await startRedis(port);
    await eventually('/readyz answers 200 again', async () => (await readyz()).statusCode === 200);
    expect((await readyz()).json()).toEqual({ status: 'ready', checks: { database: 'ok', redis: 'ok' } });

    // A roomy tier, so the polling itself never meets the limit whichever backend decides it.
    const t = await createTenant(h, { tier: 'growth' });
    const redisBefore = (await scrape()).decisions('redis');
    await eventually('a request is decided by Redis again', async () => {
      expect((await quota(t)).statusCode).toBe(200);
      return (await scrape()).decisions('redis') > redisBefore;
    });
    const m = await scrape();
    expect(m.fallback).toBe(0);
    expect(m.outages).toBe(1);
    expect(logLines('shared windows resumed')).toHaveLength(1);
    expect(logLines('Redis unreachable')).toHaveLength(1);

    // From here on Redis decides, and counts in the restarted (empty) server.
    const local = (await scrape()).decisions('local');
    const s = await createTenant(h, { tier: 'sandbox' });
    await expectSandboxLimit(s);
    const after = await scrape();
    expect(after.decisions('local')).toBe(local);
    const client = new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await client.connect();
      expect(await client.hget(`${config.redisPrefix}rl:{dep:${s.deploymentId}}:60000`, 'c')).toBe('100');
    } finally {
      client.disconnect();
    }
  });
});
