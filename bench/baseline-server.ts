/**
 * The baselines: a tiny Fastify 5 server doing the least a metering route could do, in the same
 * shape as creditgate's routes (POST, JSON body validated by a schema, JSON answer serialized by a
 * schema). Modes: hello (no database), select (one primary-key SELECT), update (one conditional
 * UPDATE … WHERE … RETURNING), each on a random row of a 10,000-row table, and hot (the naive hot-row
 * route: the same UPDATE, always on row 1, so every request waits for the previous one's lock and commit).
 * Usage: tsx bench/baseline-server.ts <hello|select|update|hot> <postgres|pglite>   (BENCH_DATABASE_URL for postgres)
 */
import type { AddressInfo } from 'node:net';
import { PGlite } from '@electric-sql/pglite';
import Fastify from 'fastify';
import pg from 'pg';
import { serveParent } from './lib/child.js';

export const BASELINE_ROWS = 10_000;
const POOL_SIZE = Number(process.env.BENCH_POOL_SIZE ?? 20);

type Mode = 'hello' | 'select' | 'update' | 'hot';
type Run = (sql: string, params: unknown[], name: string) => Promise<Array<Record<string, unknown>>>;

const mode = process.argv[2] as Mode;
const storage = process.argv[3] as 'postgres' | 'pglite';
if (!['hello', 'select', 'update', 'hot'].includes(mode) || !['postgres', 'pglite'].includes(storage)) {
  process.stderr.write('usage: baseline-server.ts <hello|select|update|hot> <postgres|pglite>\n');
  process.exit(2);
}

const SETUP = [
  `CREATE TABLE IF NOT EXISTS bench_baseline_rows (id integer PRIMARY KEY, balance bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
  `INSERT INTO bench_baseline_rows (id, balance) SELECT g, 1000000000000 FROM generate_series(1, ${BASELINE_ROWS}) g ON CONFLICT (id) DO NOTHING`,
  'ANALYZE bench_baseline_rows',
];
const SELECT_SQL = 'SELECT id, balance FROM bench_baseline_rows WHERE id = $1';
const UPDATE_SQL =
  'UPDATE bench_baseline_rows SET balance = balance - $2, updated_at = now() WHERE id = $1 AND balance >= $2 RETURNING id, balance';

async function openStorage(): Promise<{ run: Run; close: () => Promise<void> }> {
  if (storage === 'pglite') {
    const db = new PGlite();
    await db.waitReady;
    for (const sql of SETUP) await db.exec(sql);
    return {
      run: async (sql, params) => (await db.query<Record<string, unknown>>(sql, params)).rows,
      close: () => db.close(),
    };
  }
  const url = process.env.BENCH_DATABASE_URL;
  if (!url) throw new Error('BENCH_DATABASE_URL is required for postgres');
  const pool = new pg.Pool({ connectionString: url, max: POOL_SIZE });
  pool.on('error', () => {});
  for (const sql of SETUP) await pool.query(sql);
  return {
    // A named statement is parsed once per connection, as creditgate's hot queries are.
    run: async (sql, params, name) => (await pool.query({ text: sql, values: params, name })).rows,
    close: () => pool.end(),
  };
}

const body = {
  type: 'object',
  properties: { tool_name: { type: 'string', minLength: 1, maxLength: 200 } },
  required: ['tool_name'],
  additionalProperties: false,
} as const;
const answer = {
  200: {
    type: 'object',
    properties: { ok: { type: 'boolean' }, id: { type: 'integer' }, balance: { type: 'integer' } },
  },
} as const;

const db = mode === 'hello' ? undefined : await openStorage();
const app = Fastify({ logger: false });
const randomRow = () => 1 + Math.floor(Math.random() * BASELINE_ROWS);

/**
 * BENCH_BASELINE_RATE_HEADERS=1: answer with the five rate-limit fields docs/limits.md puts on every
 * metering answer (same names, same sizes), to see what they cost the server and the load generator.
 */
const rateHeaders = process.env.BENCH_BASELINE_RATE_HEADERS === '1';
let remaining = 1_000_000;

app.post('/baseline', { schema: { body, response: answer } }, async (_request, reply) => {
  if (rateHeaders) {
    remaining = remaining > 1 ? remaining - 1 : 1_000_000;
    reply.headers({
      'x-ratelimit-limit': '2000',
      'x-ratelimit-remaining': String(remaining % 2000),
      'x-ratelimit-reset': String(Math.ceil(Date.now() / 1000) + 60),
      'ratelimit-policy': '"minute";q=2000;w=60',
      ratelimit: `"minute";r=${remaining % 2000};t=60`,
    });
  }
  if (!db) return { ok: true };
  const rows =
    mode === 'select'
      ? await db.run(SELECT_SQL, [randomRow()], 'baseline_select')
      : await db.run(UPDATE_SQL, [mode === 'hot' ? 1 : randomRow(), 1], 'baseline_update');
  const row = rows[0];
  return { ok: row !== undefined, id: Number(row?.id ?? 0), balance: Number(row?.balance ?? 0) };
});

await app.listen({ host: '127.0.0.1', port: 0 });
process.once('SIGTERM', () => {
  void app
    .close()
    .then(() => db?.close())
    .finally(() => process.exit(0));
});
serveParent((app.server.address() as AddressInfo).port, {});
