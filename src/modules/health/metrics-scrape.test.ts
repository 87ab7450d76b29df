import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness } from '../../../test/harness.js';
import { parseScrape, scrape } from '../../../test/metrics.js';
import { buildApp } from '../../app.js';
import { HOUR } from '../../clock.js';
import { ManualClock } from '../../clock.js';
import { testConfig } from '../../config.js';
import type { Database } from '../../db/client.js';

/**
 * What /metrics reads at scrape time (the outbox backlog), a scrape whose database read fails, and the
 * METRICS_PORT listener (docs/operations-metrics.md).
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

describe('the outbox backlog, read at scrape time', () => {
  it('depth and age of the events not yet fanned out', async () => {
    const t = await createTenant(h);
    const created = new Date(h.clock.now().getTime() - HOUR);
    const rows = await h.deps.db.query<{ id: string }>(
      `INSERT INTO outbox_events (organization_id, type, data, created_at)
       SELECT $1, 'metrics.test', '{}'::jsonb, $2 FROM generate_series(1, 3) RETURNING id`,
      [t.organizationId, created],
    );
    const ids = rows.map((r) => r.id);
    const read = async () => {
      const s = await scrape(h);
      // Other tests' pending events only add to both: at least ours, at least an hour old.
      expect(s.value('creditgate_outbox_depth', { outbox: 'events' })).toBeGreaterThanOrEqual(3);
      expect(s.value('creditgate_outbox_oldest_age_seconds', { outbox: 'events' })).toBeGreaterThanOrEqual(3600);
      for (const outbox of ['webhook_deliveries', 'meter_events']) expect(s.family('creditgate_outbox_depth')?.metrics.some((m) => m.labels?.outbox === outbox)).toBe(true);
      expect(s.value('creditgate_scrape_collector_success', { collector: 'outbox' })).toBe(1);
    };
    try {
      if (h.deps.db.kind === 'postgres') {
        // Other test files share this database and may run the dispatcher meanwhile: it claims with
        // SKIP LOCKED, so holding our rows keeps them pending until the scrape (a plain read) saw them.
        await h.deps.db.transaction(async (tx) => {
          await tx.query('SELECT id FROM outbox_events WHERE id = ANY($1::uuid[]) FOR UPDATE', [ids]);
          await read();
        });
      } else {
        await read();
      }
    } finally {
      await h.deps.db.query('UPDATE outbox_events SET dispatched_at = $2 WHERE id = ANY($1::uuid[])', [ids, h.clock.now()]);
    }
  });

  it('a database that fails the read does not fail the scrape: the collector says 0 and its series are left out', async () => {
    const db = h.deps.db;
    // The app's database, except that the backlog statement fails as a lost connection would.
    const failing = new Proxy(db, {
      get(target, prop) {
        if (prop === 'query') {
          return (text: string, params?: readonly unknown[], name?: string) =>
            text.includes('FROM outbox_events WHERE dispatched_at IS NULL') ? Promise.reject(new Error('connection terminated')) : target.query(text, params, name);
        }
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as Database;
    const app = await buildApp({ config: testConfig(), db: failing, clock: new ManualClock('2026-01-15T12:00:00.000Z') });
    try {
      await app.ready();
      const res = await app.inject({ method: 'GET', url: '/metrics', headers: { 'x-admin-key': testConfig().adminApiKey } });
      expect(res.statusCode).toBe(200);
      const s = parseScrape(res.body);
      expect(s.value('creditgate_scrape_collector_success', { collector: 'outbox' })).toBe(0);
      expect(s.family('creditgate_outbox_depth')?.metrics ?? []).toEqual([]);
      expect(s.family('process_cpu_user_seconds_total')).toBeDefined();
    } finally {
      await app.close();
    }
  });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('METRICS_PORT', () => {
  it('serves only GET /metrics on 127.0.0.1 without credentials, and closes with the app', async () => {
    const port = await freePort();
    const other = await createHarness({ metricsPort: port });
    const base = `http://127.0.0.1:${port}`;
    try {
      const res = await fetch(`${base}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const s = parseScrape(await res.text());
      expect(s.family('process_cpu_user_seconds_total')).toBeDefined();
      expect(s.value('creditgate_scrape_collector_success', { collector: 'outbox' })).toBe(1);
      expect((await fetch(`${base}/healthz`)).status).toBe(404);
      expect((await fetch(`${base}/metrics`, { method: 'POST' })).status).toBe(404);
      // The main port still asks for credentials.
      expect((await other.request({ method: 'GET', url: '/metrics' })).statusCode).toBe(401);
      await scrape(other, adminHeaders(other));
    } finally {
      await other.close();
    }
    await expect(fetch(`${base}/metrics`)).rejects.toThrow();
  });
});
