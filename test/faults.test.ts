import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { createHarness, createTenant, dbKind, type Harness, json } from './harness.js';

describe('database unreachable', () => {
  it('answers 503 SERVICE_UNAVAILABLE with Retry-After on every metered path, /readyz 503, /healthz 200', async () => {
    // Nothing listens on port 1: every connection attempt is refused.
    const db = await openDatabase({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none', dataDir: '' });
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
describe.runIf(dbKind === 'postgres')('connections killed mid-flight (PostgreSQL)', () => {
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
    const db = await openDatabase({ databaseUrl: url.toString(), dataDir: '', poolSize: 8 });
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
