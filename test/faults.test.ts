import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { testPgOptions } from './pg-options.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { createHarness, createTenant, dbKind, type Harness, json } from './harness.js';

describe('database unreachable', () => {
  it('answers 503 SERVICE_UNAVAILABLE with Retry-After on every metered path, /readyz 503, /healthz 200', async () => {
    // Nothing listens on port 1: every connection attempt is refused.
    const db = await openDatabase({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none', dataDir: '', ...testPgOptions });
    const config = testConfig();
    const app = await buildApp({ config, db, clock: new ManualClock() });
    try {
      const usage = await app.inject({
        method: 'POST',
        url: '/api/v1/mcp/usage',
        headers: { 'x-mcp-service-key': config.mcpServiceKey },
        payload: { deployment_id: '6f1c3d2e-0000-4000-8000-000000000000', tool_name: 'x' },
      });
      expect(usage.statusCode).toBe(503);
      expect(usage.json()).toMatchObject({ error: 'service_unavailable', code: 'SERVICE_UNAVAILABLE' });
      expect(usage.headers['retry-after']).toBe('1');
      expect(usage.body).not.toMatch(/ECONNREFUSED|127\.0\.0\.1/);
      expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
      expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    } finally {
      await app.close();
      await db.close();
    }
  });
});

describe('Redis unreachable', () => {
  // The harness starts the worker's database (PGlite: seconds, longer on a loaded machine): in the
  // hook, whose budget is for starts, not in the test.
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  it('/readyz answers 503 naming Redis while metering keeps answering (nothing in a money path needs Redis)', async () => {
    const t = await createTenant(h);
    const config = testConfig({ redisUrl: 'redis://127.0.0.1:1' });
    const app = await buildApp({ config, db: h.deps.db, clock: h.clock });
    try {
      const ready = await app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toEqual({ status: 'not_ready', checks: { database: 'ok', redis: 'unreachable' } });
      const usage = await app.inject({
        method: 'POST',
        url: '/api/v1/mcp/usage',
        headers: { 'x-mcp-service-key': config.mcpServiceKey },
        payload: { deployment_id: t.deploymentId, tool_name: 'x' },
      });
      expect(usage.statusCode).toBe(200);
      expect(usage.json()).toMatchObject({ success: true, credits_used: 1 });
      const admin = await app.inject({
        method: 'PUT',
        url: `/api/v1/admin/deployments/${t.deploymentId}`,
        headers: { 'x-admin-key': config.adminApiKey },
        payload: { tier: 'growth' },
      });
      expect(admin.statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });
});

/**
 * Connections killed while 60 calls are in flight: a call either answers (200) or gets a 503, and a
 * client that retries its 503s with the same invocation_id ends with exactly one deduction per call.
 * PostgreSQL only: PGlite runs in this process and has no connection to kill.
 */
// Not through a pooler (scripts/test-pgbouncer.ts sets CG_TEST_POOLER): its server connections keep the
// application_name of the last client they served, so killing the backends of that name would also
// kill other test files' transactions that share them.
describe.runIf(dbKind === 'postgres' && !process.env.CG_TEST_POOLER)('connections killed mid-flight (PostgreSQL)', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  it('loses and double-counts nothing', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const url = new URL(inject('postgresUrl'));
    url.searchParams.set('application_name', 'creditgate-fault-test');
    const db = await openDatabase({ databaseUrl: url.toString(), dataDir: '', poolSize: 8, ...testPgOptions });
    const config = testConfig();
    const app = await buildApp({ config, db, clock: h.clock });
    const killer = new pg.Client({ connectionString: inject('postgresUrl') });
    await killer.connect();
    const send = (i: number) =>
      app.inject({
        method: 'POST',
        url: '/api/v1/mcp/usage',
        headers: { 'x-mcp-service-key': config.mcpServiceKey },
        payload: { deployment_id: t.deploymentId, tool_name: 'x', invocation_id: `fault-${i}` },
      });
    try {
      // Warm the pool so there are connections to kill from the first round on.
      await Promise.all(Array.from({ length: 8 }, () => app.inject({ method: 'GET', url: '/readyz' })));
      let killed = 0;
      const kills = (async () => {
        for (let round = 0; round < 15; round++) {
          const rows = await killer.query(
            `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
             WHERE application_name = 'creditgate-fault-test' AND pid <> pg_backend_pid()`,
          );
          killed += rows.rowCount ?? 0;
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const first = await Promise.all(Array.from({ length: 60 }, (_, i) => send(i)));
      await kills;
      expect(first.every((r) => r.statusCode === 200 || r.statusCode === 503)).toBe(true);
      for (const r of first.filter((x) => x.statusCode === 503)) expect(json(r).code).toBe('SERVICE_UNAVAILABLE');
      // Retry every 503 with its invocation id (bounded), as a well-behaved client does.
      const pending = new Set(first.map((r, i) => (r.statusCode === 503 ? i : -1)).filter((i) => i >= 0));
      for (let attempt = 0; attempt < 10 && pending.size > 0; attempt++) {
        for (const i of [...pending]) if ((await send(i)).statusCode === 200) pending.delete(i);
      }
      expect(pending.size).toBe(0);
      const deducts = await h.deps.db.query<{ n: number; calls: number }>(
        `SELECT count(*)::int AS n, count(DISTINCT u.invocation_id)::int AS calls
         FROM credit_ledger l JOIN usage_records u ON u.id = l.usage_id
         WHERE l.deployment_id = $1 AND l.kind = 'deduct'`,
        [t.deploymentId],
      );
      expect(deducts[0]).toEqual({ n: 60, calls: 60 });
      expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
      expect(killed).toBeGreaterThan(0);
    } finally {
      await killer.end();
      await app.close();
      await db.close();
    }
  });
});

/**
 * The database unreachable while deductions wait in a batch (a failover, a server down;
 * docs/operations.md, "PostgreSQL failover with Patroni"): the batch fails, one request of it is tried
 * alone (the batch may have met one dead pooled connection), and when that fails too, the others are
 * answered 503 at once, not each after a connection attempt of its own while the batch holds its place.
 * The database is reached through a TCP relay that counts the connections it is asked for.
 */
describe.runIf(dbKind === 'postgres')('a failed batch with the database unreachable (PostgreSQL)', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(async () => {
    await h.close();
  });

  it('refuses the requests not tried yet at once: one connection attempt per batch and one for its first request', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const upstream = new URL(inject('postgresUrl'));
    let reachable = true;
    let attemptsWhileDown = 0;
    const sockets = new Set<Socket>();
    const relay = createServer((client) => {
      sockets.add(client);
      client.on('close', () => sockets.delete(client));
      if (!reachable) {
        attemptsWhileDown++;
        client.destroy();
        return;
      }
      const server = connect(Number(upstream.port || 5432), upstream.hostname);
      sockets.add(server);
      server.on('close', () => sockets.delete(server));
      client.pipe(server).pipe(client);
      client.on('error', () => server.destroy());
      server.on('error', () => client.destroy());
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    const url = new URL(upstream);
    url.port = String((relay.address() as AddressInfo).port);
    const db = await openDatabase({ databaseUrl: url.toString(), dataDir: '', poolSize: 8, ...testPgOptions });
    const config = testConfig({ deductBatchInFlight: 1 });
    const app = await buildApp({ config, db, clock: h.clock });
    const send = (i: number) =>
      app.inject({
        method: 'POST',
        url: '/api/v1/mcp/usage',
        headers: { 'x-mcp-service-key': config.mcpServiceKey },
        payload: { deployment_id: t.deploymentId, tool_name: 'x', invocation_id: `down-${i}` },
      });
    try {
      // Warm the caches (key, deployment, terms): the requests then need the database only in the batch.
      expect((await send(-1)).statusCode).toBe(200);
      reachable = false;
      for (const s of sockets) s.destroy();
      const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => send(i)));
      expect(answers.map((r) => r.statusCode)).toEqual(answers.map(() => 503));
      for (const r of answers) expect(r.headers['retry-after']).toBe('1');
      // A lone first batch and the batch of the rest: each fails and tries one request alone. Two
      // attempts each at most, whatever the batch's size (one per request before: 22 here).
      expect(attemptsWhileDown).toBeLessThanOrEqual(4);
      reachable = true;
      // Nothing of theirs was written: retried with the same ids, each is charged once.
      const again = await Promise.all(Array.from({ length: 20 }, (_, i) => send(i)));
      expect(again.map((r) => r.statusCode)).toEqual(again.map(() => 200));
      const [charged] = await h.deps.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND success AND invocation_id LIKE 'down-%'",
        [t.deploymentId],
      );
      expect(charged!.n).toBe(21);
      expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    } finally {
      await app.close();
      await db.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => relay.close(() => resolve()));
    }
  });
});
