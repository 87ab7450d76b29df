import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Database, openDatabase } from '../src/db/client.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';

/**
 * `creditgate serve` as a process on PostgreSQL and Redis (docs/cli.md, "Exit codes" and "Signals and
 * shutdown"): a port it cannot listen on ends it at once with exit 4 and one line naming the address,
 * instead of leaving it alive on its pools; SIGTERM in the middle of a load stops taking requests,
 * answers those in flight, commits the deduction batches it holds, and exits 0 with nothing lost.
 * Each run makes its own database (dropped at the end) and its own REDIS_PREFIX.
 */
const ROOT = process.cwd();
const ADMIN_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const DB_NAME = `creditgate_lifecycle_${process.pid}_${randomBytes(3).toString('hex')}`;
const REDIS_PREFIX = `cg-test:lifecycle:${process.pid}:${randomBytes(4).toString('hex')}:`;
const ADMIN_KEY = randomBytes(24).toString('hex');
const SERVICE_KEY = randomBytes(24).toString('hex');

const children: ChildProcess[] = [];
const temporary: string[] = [];
let databaseUrl: string;
let db: Database | undefined;

async function admin<T>(use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  await admin((c) => c.query(`CREATE DATABASE ${DB_NAME}`));
  const url = new URL(ADMIN_URL);
  url.pathname = `/${DB_NAME}`;
  databaseUrl = url.toString();
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await db?.close();
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${DB_NAME} WITH (FORCE)`));
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    const keys = await redis.keys(`${REDIS_PREFIX}*`);
    if (keys.length > 0) await redis.del(...keys);
  } finally {
    redis.disconnect();
  }
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

interface Served {
  child: ChildProcess;
  output: () => string;
  stderr: () => string;
  /** The exit code and when the process ended (performance.now()). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

/**
 * `serve` through Node with tsx as its loader (the tsx wrapper would run it as a grandchild that a
 * SIGKILL does not reach), on this file's database and Redis prefix.
 */
function serve(env: Record<string, string>): Served {
  const dataDir = mkdtempSync(join(tmpdir(), 'cg-lifecycle-'));
  temporary.push(dataDir);
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli.ts'), 'serve'], {
    env: {
      ...process.env,
      NODE_ENV: 'development',
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      DATA_DIR: dataDir,
      DATABASE_URL: databaseUrl,
      REDIS_URL,
      REDIS_PREFIX,
      HOST: '127.0.0.1',
      ADMIN_API_KEY: ADMIN_KEY,
      MCP_SERVICE_KEY: SERVICE_KEY,
      JWT_SECRET: randomBytes(32).toString('hex'),
      ENCRYPTION_KEY: randomBytes(32).toString('hex'),
      SMTP_URL: '',
      ...env,
    },
  });
  children.push(child);
  let out = '';
  let err = '';
  // Request logs would be many megabytes under load: keep the head and the tail for the failure messages.
  const keep = (text: string, d: Buffer) => {
    const next = text + d.toString();
    return next.length > 200_000 ? next.slice(0, 50_000) + next.slice(-100_000) : next;
  };
  child.stdout!.on('data', (d: Buffer) => (out = keep(out, d)));
  child.stderr!.on('data', (d: Buffer) => {
    err = keep(err, d);
    out = keep(out, d);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal, at: performance.now() })),
  );
  return { child, output: () => out, stderr: () => err, exited };
}

/** Resolve with the address once `serve` listens; reject if it exits first or takes too long. */
async function listening(served: Served, timeoutMs = 60_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let ended = false;
  void served.exited.then(() => (ended = true));
  while (Date.now() < deadline) {
    const match = /creditgate listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(served.output());
    if (match) return match[1]!;
    if (ended) throw new Error(`serve exited before listening:\n${served.output().slice(-5000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`serve did not listen within ${timeoutMs} ms:\n${served.output().slice(-5000)}`);
}

describe('serve cannot listen', () => {
  let blocker: Server;
  afterAll(() => new Promise<void>((resolve) => (blocker ? blocker.close(() => resolve()) : resolve())));

  it('exits 4 with one line naming the address and the cause, having closed its database and Redis', async () => {
    blocker = createServer();
    await new Promise<void>((resolve, reject) => {
      blocker.once('error', reject);
      blocker.listen(0, '127.0.0.1', resolve);
    });
    const port = (blocker.address() as { port: number }).port;

    const started = performance.now();
    const served = serve({ PORT: String(port) });
    let messageAt = 0;
    served.child.stderr!.on('data', () => {
      if (messageAt === 0 && served.stderr().includes('cannot listen')) messageAt = performance.now();
    });
    const timeout = setTimeout(() => served.child.kill('SIGKILL'), 90_000);
    const { code, signal, at } = await served.exited;
    clearTimeout(timeout);

    expect(signal, served.output().slice(-5000)).toBeNull();
    expect(code, served.output().slice(-5000)).toBe(4);
    expect(served.stderr()).toContain(`creditgate: cannot listen on 127.0.0.1:${port}: address already in use (EADDRINUSE)\n`);
    expect(served.stderr().match(/cannot listen/g)).toHaveLength(1);
    // Measured, not a tight bound: from the message to the exit is the closing of what serve opened.
    const closeMs = Math.round(at - messageAt);
    console.info(`serve cannot listen: exit ${code} ${Math.round(at - started)} ms after spawn, ${closeMs} ms after its message`);
    expect(messageAt).toBeGreaterThan(0);
    expect(closeMs).toBeLessThan(20_000);
    // Its migrations ran (the start got as far as the port); its connections are gone.
    const left = await admin((c) =>
      c.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [DB_NAME]),
    );
    expect(left.rows[0]!.n).toBe(0);
  }, 120_000);
});

interface Answer {
  success?: boolean;
  credits_used?: number;
}

type Outcome =
  | { id: string; kind: 'answer'; status: number; body: Answer; at: number }
  | { id: string; kind: 'error'; code: string; message: string; at: number };

/** The code of a failed fetch: the socket's (ECONNREFUSED, ECONNRESET, UND_ERR_SOCKET) or the abort's. */
function errorCode(err: unknown): string {
  const e = err as { name?: string; code?: string; cause?: { code?: string; name?: string } };
  if (e.name === 'TimeoutError' || e.name === 'AbortError') return 'TIMEOUT';
  return e.cause?.code ?? e.code ?? e.cause?.name ?? e.name ?? 'UNKNOWN';
}

describe('SIGTERM drains', () => {
  it('mid-load: stops taking requests, answers those in flight, commits what it holds, exits 0 (a second signal does not cut it short)', async () => {
    // A batch window of 50 ms: deductions are held for company, so the signal finds batches to commit
    // (and the drain lasts long enough for the repeated signals below to arrive during it).
    const served = serve({ PORT: '0', DEDUCT_BATCH_WINDOW_MS: '50' });
    const base = await listening(served);
    const adminHeaders = { 'x-admin-key': ADMIN_KEY, 'content-type': 'application/json' };

    const slug = `drain-${randomBytes(4).toString('hex')}`;
    const created = await fetch(`${base}/api/v1/admin/organizations`, {
      method: 'POST',
      headers: adminHeaders,
      body: JSON.stringify({ name: 'Drain test', slug, tier: 'growth' }),
    });
    expect(created.status, await created.clone().text()).toBe(201);
    const org = (await created.json()) as { organization: { id: string }; deployment: { id: string } };
    const deploymentId = org.deployment.id;
    const granted = await fetch(`${base}/api/v1/admin/deployments/${deploymentId}/credits`, {
      method: 'POST',
      headers: adminHeaders,
      body: JSON.stringify({ amount: 1000, reason: 'drain test' }),
    });
    expect(granted.status, await granted.clone().text()).toBe(200);

    db = await openDatabase({ databaseUrl, dataDir: '', poolSize: 2 });
    const balance = async () => {
      const rows = await db!.query<{ spendable: string }>(
        `SELECT (GREATEST(0, monthly_allocation - monthly_used) + purchased_balance)::text AS spendable
         FROM credit_balances WHERE deployment_id = $1`,
        [deploymentId],
      );
      return Number(rows[0]!.spendable);
    };
    const starting = await balance();
    expect(starting).toBe(20_000 + 1000);

    // 20 callers, each one call after the other until the service is gone.
    const outcomes: Outcome[] = [];
    let signalledAt = Number.POSITIVE_INFINITY;
    let gone = false;
    void served.exited.then(() => (gone = true));
    const caller = async (c: number) => {
      for (let n = 0; !gone; n++) {
        const id = `drain-${c}-${n}`;
        try {
          const res = await fetch(`${base}/api/v1/mcp/usage`, {
            method: 'POST',
            headers: { 'x-mcp-service-key': SERVICE_KEY, 'content-type': 'application/json' },
            body: JSON.stringify({ deployment_id: deploymentId, tool_name: 'drain_tool', invocation_id: id }),
            signal: AbortSignal.timeout(15_000),
          });
          const text = await res.text();
          let body: Answer = {};
          try {
            body = JSON.parse(text) as Answer;
          } catch {
            // A body that is not JSON: its status says what happened.
          }
          outcomes.push({ id, kind: 'answer', status: res.status, body, at: performance.now() });
          // 503: the service is closing (it said so, and closed the connection); stop as a client would.
          if (res.status === 503) return;
        } catch (err) {
          outcomes.push({ id, kind: 'error', code: errorCode(err), message: String((err as Error).cause ?? err), at: performance.now() });
          return;
        }
      }
    };
    const load = Promise.all(Array.from({ length: 20 }, (_, c) => caller(c)));

    // Mid-load: once 200 calls were answered, SIGTERM.
    const deadline = Date.now() + 60_000;
    while (outcomes.filter((o) => o.kind === 'answer' && o.status === 200).length < 200) {
      if (Date.now() > deadline || gone) throw new Error(`the load did not get going:\n${JSON.stringify(outcomes.slice(0, 5))}\n${served.output().slice(-5000)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    signalledAt = performance.now();
    served.child.kill('SIGTERM');
    // Then again and again while it drains, as a supervisor forwarding a Ctrl-C may: the drain goes on.
    let repeated = 0;
    const again = setInterval(() => {
      if (served.child.exitCode === null && served.child.signalCode === null && served.output().includes('shutting down:')) {
        if (served.child.kill('SIGTERM')) repeated++;
      }
    }, 5);

    const timeout = setTimeout(() => served.child.kill('SIGKILL'), 60_000);
    const { code, signal, at } = await served.exited;
    clearTimeout(timeout);
    clearInterval(again);
    await load;
    const drainMs = Math.round(at - signalledAt);

    const answered = outcomes.filter((o): o is Outcome & { kind: 'answer' } => o.kind === 'answer');
    const errors = outcomes.filter((o): o is Outcome & { kind: 'error' } => o.kind === 'error');
    const charged = answered.filter((o) => o.status === 200 && o.body.success === true);
    const closing = answered.filter((o) => o.status === 503);
    const summary = `${outcomes.length} calls: ${charged.length} charged, ${closing.length} answered 503 while closing, ${errors.length} refused or reset (${[...new Set(errors.map((e) => e.code))].join(', ')}); SIGTERM repeated ${repeated} times during the drain; exit ${code} ${drainMs} ms after the first`;
    console.info(`serve SIGTERM drain: ${summary}`);

    expect(signal, served.output().slice(-5000)).toBeNull();
    expect(code, served.output().slice(-5000)).toBe(0);
    // A repeat was delivered to the live process after its first signal was handled: without a
    // handler still in place (a `once` handler) it would have been killed by it (signal SIGTERM, above).
    // Whether the repeat's "already shutting down" line is written depends on it arriving before the
    // last turn of the drain, so the line is not required.
    expect(repeated).toBeGreaterThan(0);
    // Every call got an answer: an HTTP one, or (only once the close began) a refused or reset connection; none hung.
    for (const e of errors) {
      expect(e.code, `${e.id}: ${e.message}`).not.toBe('TIMEOUT');
      expect(e.at, `${e.id} failed before the signal: ${e.code} ${e.message}`).toBeGreaterThan(signalledAt);
      expect(['ECONNREFUSED', 'ECONNRESET', 'UND_ERR_SOCKET', 'EPIPE']).toContain(e.code);
    }
    for (const o of answered) expect([200, 503], `${o.id}: ${o.status} ${JSON.stringify(o.body)}`).toContain(o.status);
    for (const o of closing) expect(o.at).toBeGreaterThan(signalledAt);
    for (const o of charged) expect(o.body.credits_used).toBe(1);
    // Answers that came after the signal: the requests in flight were answered, not dropped.
    expect(charged.length).toBeGreaterThanOrEqual(200);

    // Every call answered as charged has exactly one usage record; a record exists only for a call
    // answered as charged, or one whose connection was reset (it may have been done before the reset).
    const records = await db.query<{ invocation_id: string; n: number; credits: string }>(
      `SELECT invocation_id, count(*)::int AS n, sum(quantity)::text AS credits FROM usage_records
       WHERE deployment_id = $1 AND success GROUP BY invocation_id`,
      [deploymentId],
    );
    const byId = new Map(records.map((r) => [r.invocation_id, r]));
    for (const o of charged) {
      expect(byId.get(o.id)?.n, `${o.id} answered as charged`).toBe(1);
      expect(byId.get(o.id)?.credits).toBe('1');
    }
    const chargedIds = new Set(charged.map((o) => o.id));
    const resetIds = new Set(errors.filter((e) => e.code !== 'ECONNREFUSED').map((e) => e.id));
    for (const r of records) expect(chargedIds.has(r.invocation_id) || resetIds.has(r.invocation_id), `record of ${r.invocation_id}`).toBe(true);

    // The balance is the start less what the records charged, and the ledger agrees.
    const spent = records.reduce((sum, r) => sum + Number(r.credits), 0);
    expect(await balance()).toBe(starting - spent);
    expect(spent).toBeGreaterThanOrEqual(charged.length);
    expect(await findLedgerMismatches(db, org.organization.id)).toEqual([]);
  }, 180_000);
});
