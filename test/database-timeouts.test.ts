import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.js';
import { type Config, testConfig } from '../src/config.js';
import { type Database, openDatabase } from '../src/db/client.js';
import { toAppError } from '../src/http/error-handler.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { createHarness, createTenant, dbKind, type Harness, json, type Tenant } from './harness.js';
import { testPgOptions } from './pg-options.js';

/**
 * A statement the database gives up on (docs/operations.md, Database faults): a `statement_timeout` set
 * for the service's connections (an operator's `options=-c statement_timeout=…`, or ALTER ROLE … SET)
 * meets a row lock held elsewhere. The answer is 503 with Retry-After, nothing written, the books
 * whole; the other transient codes (lock timeout, deadlock, serialization failure) map the same way.
 */
describe('transient database errors', () => {
  it('each transient database code maps to 503 SERVICE_UNAVAILABLE with Retry-After; another database error stays a 500', () => {
    for (const code of ['57014', '55P03', '40P01', '40001']) {
      const e = toAppError(Object.assign(new Error('canceling statement'), { code }));
      expect({ code, status: e.status, name: e.code, retryAfter: e.headers['retry-after'] }).toEqual({ code, status: 503, name: 'SERVICE_UNAVAILABLE', retryAfter: '1' });
    }
    expect(toAppError(Object.assign(new Error('division by zero'), { code: '22012' })).status).toBe(500);
  });
});

// Not through a pooler (scripts/test-pgbouncer.ts sets CG_TEST_POOLER): PgBouncer refuses the
// `options` startup parameter that sets the timeout for these connections.
describe.runIf(dbKind === 'postgres' && !process.env.CG_TEST_POOLER)('statement_timeout hits (PostgreSQL)', () => {
  let h: Harness;
  let db: Database;
  let app: FastifyInstance;
  let config: Config;
  let locker: pg.Client;
  beforeAll(async () => {
    h = await createHarness();
    const url = new URL(inject('postgresUrl'));
    url.searchParams.set('options', '-c statement_timeout=300');
    db = await openDatabase({ databaseUrl: url.toString(), dataDir: '', poolSize: 6, ...testPgOptions });
    config = testConfig();
    app = await buildApp({ config, db, clock: h.clock });
    await app.ready();
    locker = new pg.Client({ connectionString: inject('postgresUrl') });
    await locker.connect();
  });
  afterAll(async () => {
    await locker?.end();
    await app?.close();
    await db?.close();
    await h?.close();
  });

  const svc = () => ({ 'x-mcp-service-key': config.mcpServiceKey });
  const usage = (t: Tenant, id: string) =>
    app.inject({ method: 'POST', url: '/api/v1/mcp/usage', headers: svc(), payload: { deployment_id: t.deploymentId, tool_name: 'x', invocation_id: id } });

  it('a record whose balance row stays locked past statement_timeout: answered 503 with Retry-After, nothing charged', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    expect((await usage(t, 'st-warm')).statusCode).toBe(200);
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM credit_balances WHERE deployment_id = $1 FOR UPDATE', [t.deploymentId]);
    let res: Awaited<ReturnType<typeof usage>>;
    try {
      res = await usage(t, 'st-1');
    } finally {
      await locker.query('ROLLBACK');
    }
    const [n] = await h.deps.db.query<{ n: number }>("SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND invocation_id = 'st-1'", [
      t.deploymentId,
    ]);
    expect(n!.n).toBe(0);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    expect({ status: res.statusCode, code: json(res).code, retryAfter: res.headers['retry-after'] }).toEqual({
      status: 503,
      code: 'SERVICE_UNAVAILABLE',
      retryAfter: '1',
    });
  });

  it('a refund whose usage row stays locked past statement_timeout: answered 503, refunded nothing', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const used = json(await usage(t, 'st-ref'));
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM usage_records WHERE id = $1 FOR UPDATE', [used.usage_id]);
    let res: Awaited<ReturnType<typeof usage>>;
    try {
      res = await app.inject({ method: 'POST', url: `/api/v1/mcp/usage/${used.usage_id}/refund`, headers: svc(), payload: { reason: 'x' } });
    } finally {
      await locker.query('ROLLBACK');
    }
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    expect({ status: res.statusCode, code: json(res).code }).toEqual({ status: 503, code: 'SERVICE_UNAVAILABLE' });
  });
});
