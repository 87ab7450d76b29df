/**
 * `npm run test:ha`: the service through a PostgreSQL primary failover managed by Patroni
 * (docs/benchmarks.md, "Failover with Patroni"). Bounded to a few minutes; exits 0 when every check
 * held, 1 otherwise, 2 when the cluster's packages are missing.
 *
 * 1. A two-node Patroni cluster (synchronous_mode) behind HAProxy, from test/ha/cluster.ts.
 * 2. Two instances of the real server (`serve`, on Node with tsx's loader) on the cluster through
 *    HAProxy, sharing one Redis prefix of their own; a tenant seeded through the operator API.
 * 3. Callers record usage (service mode, POST /api/v1/mcp/usage) with an invocation id each, and retry
 *    a 503 or a lost connection with the SAME id until they get a definite answer, as a client of
 *    docs/metering.md ("Idempotency") does, alternating instances.
 * 4. Mid-load the primary's postmaster is killed (SIGKILL). Patroni promotes the synchronous standby,
 *    HAProxy follows. Meanwhile the service must answer 503 with Retry-After (docs/decisions.md,
 *    "Database outage"), never another 5xx, hang or wrong answer, and recover by itself.
 * 5. Against the promoted database: every id answered 200 success:true is recorded exactly once with
 *    the usage id it was answered with, no id is charged twice, the balance is the grant less the
 *    charges, and the ledger invariant holds (docs/metering.md, "Buckets and the ledger").
 *
 * Prints the time to recover (kill to the first successful answer), the 503s and the calls answered.
 */
import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Queryable } from '../../src/db/client.js';
import { findLedgerMismatches } from '../../src/modules/credits/ledger.js';
import { type Cluster, freePort, GiveUp, httpStatus, missingBinaries, type PatroniNode, sleep, startCluster, waitFor } from './cluster.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CALLERS = Number(process.env.HA_CALLERS ?? 12);
const INSTANCES = 2;
/** Load before the kill, and steady success required after the recovery before the load stops. */
const WARM_MS = 5_000;
const STEADY_MS = 5_000;
/** Bounds: the recovery, one call with its retries, one request, the whole run. */
const RECOVERY_BOUND_MS = 90_000;
const CALL_BOUND_MS = 120_000;
const REQUEST_TIMEOUT_MS = 20_000;
const TOTAL_BOUND_MS = 285_000;
const GRANT = 1_000_000;
const COST = 3;
const TOOL = 'ha_failover_tool';
const REDIS_URL = process.env.HA_REDIS_URL ?? 'redis://127.0.0.1:6379';

const log = (line: string) => process.stdout.write(`${line}\n`);
const t0 = performance.now();
const now = () => performance.now() - t0;

const secret = () => randomBytes(32).toString('base64url');
const SECRETS = { JWT_SECRET: secret(), MCP_SERVICE_KEY: secret(), ADMIN_API_KEY: secret(), ENCRYPTION_KEY: secret() };

interface RecordReply {
  success: boolean;
  credits_used: number;
  credits_remaining: number | null;
  error: string | null;
  usage_id: string | null;
  invocation_id: string | null;
}

/** One request of a call: its HTTP status, or `network` (no answer) / `timeout` (no answer in time). */
interface Attempt {
  id: string;
  instance: number;
  sentAt: number;
  answeredAt: number;
  status: number | 'network' | 'timeout';
  retryAfter: string | null;
  replayed: boolean;
  body?: RecordReply;
  detail?: string;
}

interface Call {
  id: string;
  /** The definite answer (any HTTP status but 503), or none when the call's bound ran out. */
  final: Attempt | undefined;
}

async function redisReachable(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = createConnection({ host: hostname, port: Number(port || 6379) });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** `serve` on Node with tsx's loader: the tsx wrapper would run the server as a grandchild that a kill by pid does not reach. */
async function startService(cluster: Cluster, i: number, redis: { url: string; prefix: string } | undefined): Promise<string> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const name = `creditgate-${i}`;
  const child: ChildProcess = cluster.processes.start(name, process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'cli.ts'), 'serve'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      TMPDIR: process.env.TMPDIR,
      LANG: 'C.UTF-8',
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(port),
      PUBLIC_BASE_URL: base,
      DATA_DIR: join(cluster.dir, name),
      DATABASE_URL: cluster.url('creditgate'),
      DATABASE_POOL_SIZE: '10',
      EMAIL_VERIFICATION: 'off',
      LOG_LEVEL: 'warn',
      LOG_FORMAT: 'json',
      ...SECRETS,
      ...(redis ? { REDIS_URL: redis.url, REDIS_PREFIX: redis.prefix } : {}),
    },
  });
  await waitFor(`${name} ready`, 90_000, async () => {
    if (child.exitCode !== null || child.signalCode !== null) throw new GiveUp(`${name} exited (${child.exitCode ?? child.signalCode})\n${cluster.processes.tail(name)}`);
    return (await httpStatus(`${base}/readyz`)) === 200 ? true : undefined;
  });
  return base;
}

async function admin(base: string, method: 'POST' | 'PUT', path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { 'x-admin-key': SECRETS.ADMIN_API_KEY, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/**
 * A tenant through the operator API (docs/operator.md): an organization with its deployment, no monthly
 * allocation and a rate limit out of the way, GRANT purchased credits, and a tool that costs COST.
 */
async function seed(base: string): Promise<{ organizationId: string; deploymentId: string }> {
  const slug = `ha-${randomBytes(4).toString('hex')}`;
  const org = (await admin(base, 'POST', '/api/v1/admin/organizations', { name: 'HA failover', slug, tier: 'growth' })) as {
    organization: { id: string };
    deployment: { id: string };
  };
  const deploymentId = org.deployment.id;
  await admin(base, 'PUT', `/api/v1/admin/deployments/${deploymentId}/overrides`, { monthly_credits: 0, api_rate_limit: 1_000_000_000 });
  await admin(base, 'PUT', '/api/v1/admin/credit-costs/ha_failover', { credits: COST });
  await admin(base, 'PUT', `/api/v1/admin/tool-actions/${TOOL}`, { action: 'ha_failover' });
  await admin(base, 'POST', `/api/v1/admin/deployments/${deploymentId}/credits`, { amount: GRANT, reason: 'failover test' });
  return { organizationId: org.organization.id, deploymentId };
}

class Load {
  readonly attempts: Attempt[] = [];
  readonly calls: Call[] = [];
  private stopping = false;
  private running: Promise<void>[] = [];
  private readonly run = randomBytes(3).toString('hex');

  constructor(
    private readonly bases: string[],
    private readonly deploymentId: string,
  ) {}

  start(callers: number): void {
    this.running = Array.from({ length: callers }, (_, k) => this.caller(k));
  }

  /** Each caller finishes the call it is on (with its retries), then stops. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.running);
  }

  private async caller(k: number): Promise<void> {
    for (let n = 0; !this.stopping; n++) this.calls.push(await this.call(`ha-${this.run}-${k}-${n}`, k));
  }

  /** One call: retried with the same invocation id on a 503 or a lost connection until a definite answer (bounded). */
  private async call(id: string, k: number): Promise<Call> {
    const deadline = now() + CALL_BOUND_MS;
    for (let attempt = 0; ; attempt++) {
      const a = await this.send(id, (k + attempt) % this.bases.length);
      this.attempts.push(a);
      if (typeof a.status === 'number' && a.status !== 503) return { id, final: a };
      if (now() > deadline) return { id, final: undefined };
      // Retry-After (1 s, capped at 2), or 200 ms without an answer; jitter keeps the callers spread.
      const wait = a.status === 503 ? Math.min(Number(a.retryAfter) || 1, 2) * 1000 : 200;
      await sleep(wait + Math.random() * 250);
    }
  }

  private async send(id: string, instance: number): Promise<Attempt> {
    const sentAt = now();
    try {
      const res = await fetch(`${this.bases[instance]}/api/v1/mcp/usage`, {
        method: 'POST',
        headers: { 'x-mcp-service-key': SECRETS.MCP_SERVICE_KEY, 'content-type': 'application/json' },
        body: JSON.stringify({ deployment_id: this.deploymentId, tool_name: TOOL, invocation_id: id }),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      const text = await res.text();
      let body: RecordReply | undefined;
      try {
        body = JSON.parse(text) as RecordReply;
      } catch {
        body = undefined;
      }
      return {
        id,
        instance,
        sentAt,
        answeredAt: now(),
        status: res.status,
        retryAfter: res.headers.get('retry-after'),
        replayed: res.headers.get('idempotent-replayed') === 'true',
        body: res.status === 200 ? body : undefined,
        detail: res.status === 200 ? undefined : text.slice(0, 300),
      };
    } catch (err) {
      const e = err as Error & { cause?: unknown };
      return {
        id,
        instance,
        sentAt,
        answeredAt: now(),
        status: e.name === 'TimeoutError' ? 'timeout' : 'network',
        retryAfter: null,
        replayed: false,
        detail: String(e.cause ?? e.message),
      };
    }
  }
}

interface Timeline {
  killAt: number;
  /** The first answer after the kill that was not a 200: the outage as a client sees it. */
  firstOutageAt: number | undefined;
  /** The first 200 to a request sent after the outage began: recovered. */
  recoveredAt: number | undefined;
}

function timeline(attempts: Attempt[], killAt: number): Timeline {
  let firstOutageAt: number | undefined;
  for (const a of attempts) if (a.answeredAt > killAt && a.status !== 200 && (firstOutageAt === undefined || a.answeredAt < firstOutageAt)) firstOutageAt = a.answeredAt;
  let recoveredAt: number | undefined;
  if (firstOutageAt !== undefined) {
    for (const a of attempts) {
      if (a.status === 200 && a.sentAt > firstOutageAt && (recoveredAt === undefined || a.answeredAt < recoveredAt)) recoveredAt = a.answeredAt;
    }
  }
  return { killAt, firstOutageAt, recoveredAt };
}

/** A pg client as the Queryable of src/db/client.ts, for the shared ledger check. */
function queryableOf(client: pg.Client): Queryable {
  return {
    query: async <T>(text: string, params: readonly unknown[] = []) => (await client.query(text, params as unknown[])).rows as T[],
  };
}

async function verify(
  cluster: Cluster,
  promoted: PatroniNode,
  tenant: { organizationId: string; deploymentId: string },
  load: Load,
  failures: string[],
): Promise<void> {
  const check = (ok: boolean, message: string) => {
    if (!ok) failures.push(message);
  };
  // Answers: a 503 always with Retry-After; no other 5xx; no request left without an answer.
  const byStatus = new Map<string, number>();
  for (const a of load.attempts) byStatus.set(String(a.status), (byStatus.get(String(a.status)) ?? 0) + 1);
  const unavailable = load.attempts.filter((a) => a.status === 503);
  const noRetryAfter = unavailable.filter((a) => !a.retryAfter || !/^\d+$/.test(a.retryAfter));
  check(noRetryAfter.length === 0, `${noRetryAfter.length} 503 answers without a Retry-After in seconds (first: ${noRetryAfter[0]?.detail})`);
  const notService = unavailable.filter((a) => !a.detail?.includes('SERVICE_UNAVAILABLE'));
  check(notService.length === 0, `${notService.length} 503 answers not SERVICE_UNAVAILABLE (first: ${notService[0]?.detail})`);
  check(unavailable.length > 0, 'no 503 during the failover: the outage was not observed');
  const other = load.attempts.filter((a) => a.status !== 200 && a.status !== 503);
  for (const [status, n] of byStatus) if (status !== '200' && status !== '503') failures.push(`${n} requests answered ${status} (first: ${other.find((a) => String(a.status) === status)?.detail})`);
  const undecided = load.calls.filter((c) => c.final === undefined);
  check(undecided.length === 0, `${undecided.length} calls without a definite answer within ${CALL_BOUND_MS / 1000} s`);
  const answered = load.calls.filter((c): c is Call & { final: Attempt } => c.final?.status === 200);
  const wrong = answered.filter(
    (c) => c.final.body?.success !== true || c.final.body.credits_used !== COST || c.final.body.invocation_id !== c.id || !c.final.body.usage_id,
  );
  check(wrong.length === 0, `${wrong.length} answers not a charge of ${COST} for their own invocation id (first: ${JSON.stringify(wrong[0]?.final.body)})`);

  const client = new pg.Client({ connectionString: cluster.url('creditgate'), connectionTimeoutMillis: 5_000, statement_timeout: 30_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    const [server] = (await client.query<{ port: number; standby: boolean }>('SELECT inet_server_port() AS port, pg_is_in_recovery() AS standby')).rows;
    check(server?.port === promoted.pgPort && server.standby === false, `HAProxy does not lead to the promoted ${promoted.name}: ${JSON.stringify(server)}`);
    const { deploymentId } = tenant;
    const usage = (
      await client.query<{ invocation_id: string | null; n: number; usage_id: string; quantity: string; success: boolean }>(
        `SELECT invocation_id, success, count(*)::int AS n, min(id::text) AS usage_id, sum(quantity)::text AS quantity
         FROM usage_records WHERE deployment_id = $1 GROUP BY invocation_id, success`,
        [deploymentId],
      )
    ).rows;
    const recorded = new Map(usage.filter((u) => u.success && u.invocation_id !== null).map((u) => [u.invocation_id!, u]));
    const twice = usage.filter((u) => u.n > 1);
    check(twice.length === 0, `${twice.length} invocation ids with more than one usage record (first: ${JSON.stringify(twice[0])})`);
    const odd = usage.filter((u) => !u.success || u.invocation_id === null);
    check(odd.length === 0, `usage records refused or without an invocation id: ${JSON.stringify(odd.slice(0, 3))}`);
    const missing = answered.filter((c) => recorded.get(c.id)?.usage_id !== c.final.body?.usage_id);
    check(missing.length === 0, `${missing.length} ids answered 200 but not recorded under the usage id answered (first: ${missing[0]?.id})`);
    const answeredIds = new Set(answered.map((c) => c.id));
    const unanswered = [...recorded.keys()].filter((id) => !answeredIds.has(id));
    check(unanswered.length === 0, `${unanswered.length} ids recorded that no call was answered 200 for (first: ${unanswered[0]})`);

    const invocations = (
      await client.query<{ invocation_id: string; status: string; usage_id: string | null }>(
        'SELECT invocation_id, status, usage_id::text AS usage_id FROM invocations WHERE deployment_id = $1',
        [deploymentId],
      )
    ).rows;
    const byId = new Map(invocations.map((i) => [i.invocation_id, i]));
    const badInvocation = answered.filter((c) => {
      const row = byId.get(c.id);
      return row?.status !== 'recorded' || row.usage_id !== c.final.body?.usage_id;
    });
    check(badInvocation.length === 0, `${badInvocation.length} answered ids whose invocation row is not 'recorded' with the usage id answered (first: ${JSON.stringify(byId.get(badInvocation[0]?.id ?? ''))})`);
    check(invocations.length === answered.length, `${invocations.length} invocation rows for ${answered.length} ids answered`);

    const deducts = (
      await client.query<{ rows: number; ids: number; credits: string }>(
        `SELECT count(*)::int AS rows, count(DISTINCT u.invocation_id)::int AS ids, COALESCE(-sum(l.amount), 0)::text AS credits
         FROM credit_ledger l JOIN usage_records u ON u.id = l.usage_id
         WHERE l.deployment_id = $1 AND l.kind = 'deduct'`,
        [deploymentId],
      )
    ).rows[0]!;
    check(deducts.rows === answered.length && deducts.ids === answered.length, `ledger deductions: ${JSON.stringify(deducts)} for ${answered.length} ids (one each expected)`);
    const charged = answered.reduce((sum, c) => sum + (c.final.body?.credits_used ?? 0), 0);
    check(Number(deducts.credits) === charged, `the ledger deducted ${deducts.credits}, the answers charged ${charged}`);

    const [balance] = (
      await client.query<{ purchased_balance: string; monthly_used: string; reserved: string }>(
        'SELECT purchased_balance::text, monthly_used::text, reserved::text FROM credit_balances WHERE deployment_id = $1',
        [deploymentId],
      )
    ).rows;
    check(
      Number(balance?.purchased_balance) === GRANT - charged && Number(balance?.reserved) === 0,
      `balance ${JSON.stringify(balance)}: expected purchased ${GRANT} - ${charged} = ${GRANT - charged}, nothing reserved`,
    );
    const mismatches = await findLedgerMismatches(queryableOf(client), tenant.organizationId);
    check(mismatches.length === 0, `ledger invariant: ${JSON.stringify(mismatches)}`);
  } finally {
    await client.end().catch(() => {});
  }
}

async function main(): Promise<number> {
  const missingBins = missingBinaries();
  if (missingBins.length > 0) {
    process.stderr.write(`test:ha: missing ${missingBins.join(', ')} (apt-get install -y patroni etcd-server haproxy postgresql-15)\n`);
    return 2;
  }
  let cluster: Cluster | undefined;
  let stopping: Promise<void> | undefined;
  const stopAll = async () => {
    const c = cluster;
    if (!c) return;
    stopping ??= (async () => {
      await c.processes.stop(c.processes.names().filter((n) => n.startsWith('creditgate')), 10_000).catch(() => {});
      await c.stop().catch(() => c.killAll());
    })();
    await stopping;
  };
  // Cleanup always: on a signal, at the overall bound, on a crash, and synchronously at exit (a
  // SIGKILL to whatever still runs, the directory removed) whatever happened before.
  process.once('exit', () => cluster?.killAll());
  const crash = (err: unknown) => {
    process.stderr.write(`test:ha: FAILED: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  };
  process.on('uncaughtException', crash);
  process.on('unhandledRejection', crash);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      log(`test:ha: ${sig}, stopping everything`);
      void stopAll().finally(() => process.exit(130));
    });
  }
  const bound = setTimeout(() => {
    process.stderr.write(`test:ha: FAILED: not finished within ${TOTAL_BOUND_MS / 1000} s\n${cluster?.logs() ?? ''}\n`);
    void stopAll().finally(() => process.exit(1));
  }, TOTAL_BOUND_MS);

  const failures: string[] = [];
  try {
    cluster = await startCluster(log);
    const [first, second] = cluster.nodes as [PatroniNode, PatroniNode];
    const setup = new pg.Client({ connectionString: cluster.url('postgres'), connectionTimeoutMillis: 5_000 });
    setup.on('error', () => {});
    await setup.connect();
    try {
      await setup.query('CREATE DATABASE creditgate');
    } finally {
      await setup.end().catch(() => {});
    }

    const redis = (await redisReachable(REDIS_URL)) ? { url: REDIS_URL, prefix: `cg-ha:${process.pid}:${randomBytes(4).toString('hex')}:` } : undefined;
    if (!redis) log(`test:ha: no Redis at ${REDIS_URL}: the instances run without it`);
    // One at a time: the first runs the migrations, the second finds them applied.
    const bases: string[] = [];
    for (let i = 1; i <= INSTANCES; i++) bases.push(await startService(cluster, i, redis));
    log(`test:ha: ${INSTANCES} instances on ${bases.join(', ')}, through HAProxy`);
    const tenant = await seed(bases[0]!);

    const load = new Load(bases, tenant.deploymentId);
    load.start(CALLERS);
    await sleep(WARM_MS);
    const before = load.attempts.length;
    const warmOk = load.attempts.filter((a) => a.status === 200).length;
    log(`test:ha: ${CALLERS} callers, ${before} requests before the kill (${warmOk} answered 200)`);
    if (warmOk === 0) throw new Error(`no successful call before the kill:\n${load.attempts.slice(0, 3).map((a) => a.detail).join('\n')}`);

    const pid = cluster.postmasterPid(first);
    if (!pid) throw new Error(`no postmaster.pid for the primary ${first.name}`);
    const killAt = now();
    process.kill(pid, 'SIGKILL');
    log(`test:ha: killed the primary's postmaster (pid ${pid}, ${first.name}) with SIGKILL`);

    let promotedAt: number | undefined;
    const deadline = killAt + RECOVERY_BOUND_MS;
    let t = timeline(load.attempts, killAt);
    while (now() < deadline) {
      if (promotedAt === undefined && (await httpStatus(`http://127.0.0.1:${second.restPort}/primary`, 500)) === 200) promotedAt = now();
      t = timeline(load.attempts, killAt);
      if (t.recoveredAt !== undefined && promotedAt !== undefined && now() - t.recoveredAt >= STEADY_MS) break;
      await sleep(100);
    }
    await load.stop();
    t = timeline(load.attempts, killAt);
    if (t.recoveredAt === undefined) failures.push(`no successful answer within ${RECOVERY_BOUND_MS / 1000} s of the kill`);
    if (promotedAt === undefined) failures.push(`${second.name} was not promoted within ${RECOVERY_BOUND_MS / 1000} s`);

    await verify(cluster, second, tenant, load, failures);

    const after = load.attempts.filter((a) => a.sentAt > killAt);
    const unavailable = load.attempts.filter((a) => a.status === 503);
    const lastOutage = Math.max(...load.attempts.filter((a) => a.status !== 200).map((a) => a.answeredAt), killAt);
    const ms = (x: number | undefined) => (x === undefined ? 'n/a' : `${Math.round(x - killAt)} ms`);
    const slowest = load.attempts.reduce<Attempt | undefined>((max, a) => (!max || a.answeredAt - a.sentAt > max.answeredAt - max.sentAt ? a : max), undefined);
    const latency = (a: Attempt | undefined) => (a ? Math.round(a.answeredAt - a.sentAt) : 0);
    // The batcher's one-by-one fallback after a failed batch (src/modules/credits/engine/queue.ts), from the instances' logs.
    const fallbacks = cluster.processes
      .names()
      .filter((n) => n.startsWith('creditgate'))
      .flatMap((n) => cluster!.processes.read(n).split('\n'))
      .filter((line) => line.includes('its requests run one by one'))
      .map((line) => (JSON.parse(line) as { size?: number }).size ?? 0);
    const summary = {
      callers: CALLERS,
      instances: INSTANCES,
      calls_answered: load.calls.filter((c) => c.final?.status === 200).length,
      requests: load.attempts.length,
      requests_after_kill: after.length,
      answers_503: unavailable.length,
      answers_503_with_retry_after: unavailable.filter((a) => a.retryAfter).length,
      no_answer: load.attempts.filter((a) => a.status === 'network' || a.status === 'timeout').length,
      other_status: load.attempts.filter((a) => a.status !== 200 && a.status !== 503 && typeof a.status === 'number').length,
      replayed_after_retry: load.calls.filter((c) => c.final?.replayed).length,
      kill_to_first_503_ms: t.firstOutageAt === undefined ? null : Math.round(t.firstOutageAt - killAt),
      kill_to_promoted_ms: promotedAt === undefined ? null : Math.round(promotedAt - killAt),
      kill_to_first_success_ms: t.recoveredAt === undefined ? null : Math.round(t.recoveredAt - killAt),
      kill_to_last_503_ms: Math.round(lastOutage - killAt),
      slowest_answer_ms: latency(slowest),
      slowest_answer_status: slowest?.status ?? null,
      answers_slower_than_1s: load.attempts.filter((a) => latency(a) > 1_000).length,
      batches_run_one_by_one: fallbacks.length,
      requests_run_one_by_one: fallbacks.reduce((sum, n) => sum + n, 0),
    };
    // HA_TRACE=<file>: every request (times in ms since the kill) for a closer look at the outage.
    if (process.env.HA_TRACE) {
      const trace = load.attempts.map((a) => ({ ...a, body: undefined, sentAt: Math.round(a.sentAt - killAt), answeredAt: Math.round(a.answeredAt - killAt) }));
      writeFileSync(process.env.HA_TRACE, JSON.stringify(trace));
    }
    log('test:ha: failover with Patroni');
    log(`  calls answered: ${summary.calls_answered} (${summary.requests} requests, ${summary.requests_after_kill} sent after the kill)`);
    log(`  503 answers: ${summary.answers_503} (${summary.answers_503_with_retry_after} with Retry-After); other 5xx or 4xx: ${summary.other_status}; no answer: ${summary.no_answer}`);
    log(`  kill → first 503: ${ms(t.firstOutageAt)}; kill → ${second.name} promoted (Patroni REST): ${ms(promotedAt)}`);
    log(`  time to recover (kill → first successful answer): ${ms(t.recoveredAt)}; kill → last 503: ${ms(lastOutage)}`);
    log(`  calls whose answer was a replay of a commit the client had not heard of: ${summary.replayed_after_retry}`);
    log(`  slowest answer: ${summary.slowest_answer_ms} ms (${summary.slowest_answer_status}); answers slower than 1 s: ${summary.answers_slower_than_1s}`);
    log(`  deduction batches that failed and ran one by one: ${summary.batches_run_one_by_one} (${summary.requests_run_one_by_one} requests)`);
    log(`HA_RESULT ${JSON.stringify(summary)}`);
  } catch (err) {
    failures.push((err as Error).stack ?? String(err));
  } finally {
    if (failures.length > 0 && cluster) process.stderr.write(`${cluster.logs()}\n`);
    clearTimeout(bound);
    await stopAll();
  }
  if (failures.length > 0) {
    process.stderr.write(`test:ha: FAILED\n${failures.map((f) => `  - ${f}`).join('\n')}\n`);
    return 1;
  }
  log('test:ha: passed');
  return 0;
}

process.exit(await main());
