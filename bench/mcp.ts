/**
 * What metering costs an MCP server (npm run bench:mcp): the latency withMetering adds to a tool
 * call and the calls/s one server process meters, with exact accounting. See docs/benchmarks.md,
 * "MCP metering overhead", for the method; bench/lib/mcp-load.ts drives the MCP side.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { type ServerProcess, spawnServer } from './lib/child.js';
import { gitState, productionServerEnv } from './lib/env.js';
import { type McpTarget, measureMcp, VARIANTS, type Variant } from './lib/mcp-load.js';
import { type McpAccounting, type McpResults, type McpRun, renderMcp, updateMcpDoc } from './lib/mcp-report.js';
import type { McpSeed, McpVerification } from './lib/mcp-server.js';
import { startPgWaits } from './lib/pg-waits.js';
import { type BenchDatabase, createBenchDatabase, type PgCounters, perRequest } from './lib/postgres.js';
import { round } from './lib/stats.js';

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(`--${name}`);
const option = (name: string): number | undefined => {
  const hit = argv.find((a) => a.startsWith(`--${name}=`));
  return hit ? Number(hit.slice(name.length + 3)) : undefined;
};
const smoke = flag('smoke');
const settings = {
  seconds: option('seconds') ?? (smoke ? 3 : 10),
  rounds: option('rounds') ?? 1,
  callers: [1, 16],
  warmupSeconds: smoke ? 1 : 3,
  poolSize: 20,
  sdk: '',
};
const TOOL = 'lookup';
const DOC = fileURLToPath(new URL('../docs/benchmarks.md', import.meta.url));
const QUIET_POLL_MS = 15_000;
const QUIET_MAX_MS = 25 * 60_000;
const PG_SETTLE_MS = 1_100;
const log = (line: string) => process.stdout.write(`${line}\n`);

/** What `pgrep -f vitest` finds, plus the other benchmarks' processes (this run's own excluded). */
const OTHER_WORK = ['vitest', 'bench/run.ts', 'bench/server.ts', 'baseline-server', 'bench/limiter', 'limiter-server', 'bench/webhooks', 'webhooks-server', 'webhooks-receiver'];
function otherWork(): number {
  let busy = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (Number(pid) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (OTHER_WORK.some((w) => cmd.includes(w))) busy++;
    } catch {
      // gone
    }
  }
  return busy;
}

async function waitQuiet(skip: boolean): Promise<{ waitedSeconds: number; busyAtStart: number }> {
  const started = Date.now();
  while (!skip && otherWork() > 0 && Date.now() - started < QUIET_MAX_MS) {
    log(`waiting for a quiet machine: ${otherWork()} vitest / benchmark processes, load ${os.loadavg()[0]!.toFixed(2)}`);
    await sleep(QUIET_POLL_MS);
  }
  return { waitedSeconds: Math.round((Date.now() - started) / 1000), busyAtStart: otherWork() };
}

/** HEAD, and uncommitted changes in what is measured: the service, its migrations and the middleware. */
function codeState(): { commit: string; dirty: boolean } {
  const git = gitState();
  try {
    const status = execFileSync('git', ['status', '--porcelain', '--', 'packages/client/src'], { encoding: 'utf8' });
    return { commit: git.commit, dirty: git.dirty || status.trim().length > 0 };
  } catch {
    return git;
  }
}

interface Setup {
  server: ServerProcess;
  db: BenchDatabase;
  seed: McpSeed;
  target: McpTarget;
}

/** pg_stat counters once every pool backend has published its own (see webhooks-server.ts, flushStats). */
async function pgSnapshot(s: Setup): Promise<PgCounters> {
  await sleep(PG_SETTLE_MS);
  await s.server.call('flushStats');
  await sleep(200);
  return s.db.stats();
}

function accountingOf(run: McpRun['m'], cost: number, v0: McpVerification, v1: McpVerification): McpAccounting {
  const expected = run.variant === 'unmetered' ? 0 : run.successes;
  const a: McpAccounting = {
    expected,
    usageRecords: v1.usageSuccess - v0.usageSuccess,
    usageFailed: v1.usageFailed - v0.usageFailed,
    usageCredits: v1.usageCredits - v0.usageCredits,
    ledgerDeducts: v1.ledgerDeducts - v0.ledgerDeducts,
    refunds: v1.ledgerRefunds - v0.ledgerRefunds,
    creditsSpent: v1.creditsSpent - v0.creditsSpent,
    reservedCredits: v1.reserved,
    openReservations: v1.invocations.reserved ?? 0,
    mismatches: v1.mismatches,
    ok: false,
  };
  const problems = run.refused + run.unrecorded + run.thrown + run.logged.length + (run.events.queued ?? 0) + (run.events.record_failed ?? 0);
  a.ok =
    problems === 0 &&
    run.successes === run.calls &&
    a.usageRecords === expected &&
    a.ledgerDeducts === expected &&
    a.usageCredits === expected * cost &&
    a.creditsSpent === expected * cost &&
    a.usageFailed === 0 &&
    a.refunds === 0 &&
    a.reservedCredits === 0 &&
    a.openReservations === 0 &&
    a.mismatches === 0;
  return a;
}

async function measure(s: Setup, variant: Variant, callers: number, roundNo: number, seconds: number): Promise<McpRun> {
  const v0 = await s.server.call<McpVerification>('verify');
  const st0 = await s.server.call<Record<string, number>>('statements');
  const busyBefore = otherWork();
  const pg0 = await pgSnapshot(s);
  // An unmetered call never yields to the event loop: a sampler would not run, and there is nothing to see.
  const stopWaits = variant === 'unmetered' ? undefined : await startPgWaits(s.db.name);
  const m = await measureMcp(variant, callers, seconds, s.target, s.server.pid);
  const pgWaits = (await stopWaits?.()) ?? { samples: 0, backends: {} };
  const pg = perRequest(pg0, await pgSnapshot(s), m.calls);
  const st1 = await s.server.call<Record<string, number>>('statements');
  const v1 = await s.server.call<McpVerification>('verify');
  const statementMix: Record<string, number> = {};
  let statements = 0;
  for (const [k, v] of Object.entries(st1).sort((a, b) => b[1] - a[1])) {
    const d = v - (st0[k] ?? 0);
    if (k !== 'BEGIN … COMMIT') statements += d;
    if (m.calls > 0 && d / m.calls >= 0.01) statementMix[k] = round(d / m.calls);
  }
  const run: McpRun = {
    round: roundNo,
    m,
    pg,
    statementMix,
    pgWaits,
    statementsPerCall: round(m.calls > 0 ? statements / m.calls : 0),
    accounting: accountingOf(m, s.seed.cost, v0, v1),
    otherWork: Math.max(busyBefore, otherWork()),
  };
  const c = m.cpu;
  log(
    `  ${roundNo === 0 ? 'warm-up' : `round ${roundNo}`} ${variant} × ${callers}: ${m.callsPerSecond} calls/s  p50 ${m.latency.p50} p90 ${m.latency.p90} p99 ${m.latency.p99} ms  ` +
      `req/call ${m.requestsPerCall} ${JSON.stringify(m.requests)}  stmts/call ${run.statementsPerCall}  xacts/call ${pg.xacts}  fsyncs/call ${pg.walSyncs}  backends ${JSON.stringify(pgWaits.backends)}  ` +
      `cpu runner/srv/pg/machine ${c.loadgen}/${c.server}/${c.postgres}/${c.machine}%  accounting ${run.accounting.ok ? 'OK' : `MISMATCH ${JSON.stringify({ ...run.accounting, calls: m.calls, successes: m.successes, refused: m.refused, unrecorded: m.unrecorded, thrown: m.thrown, problem: m.firstProblem, logged: m.logged.slice(0, 3), events: m.events })}`}` +
      (run.otherWork ? `  (other work: ${run.otherWork} processes)` : ''),
  );
  return run;
}

async function main(): Promise<void> {
  const quiet = await waitQuiet(flag('no-wait'));
  const started = Date.now();
  const loadAtStart = os.loadavg()[0]!;
  const sdkVersion = (JSON.parse(readFileSync(new URL('../node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url), 'utf8')) as { version: string }).version;
  settings.sdk = `@modelcontextprotocol/sdk ${sdkVersion}, middleware from packages/client/src`;
  log(`creditgate MCP metering bench: ${os.availableParallelism()} CPUs, node ${process.version}, ${settings.rounds} × ${settings.seconds} s, callers ${settings.callers.join('/')}`);

  const db = await createBenchDatabase();
  const dataDir = mkdtempSync(join(os.tmpdir(), 'creditgate-bench-mcp-'));
  const outboxDir = mkdtempSync(join(os.tmpdir(), 'creditgate-bench-mcp-outbox-'));
  let server: ServerProcess | undefined;
  const cleanup = async () => {
    await server?.stop();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(outboxDir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    log('interrupted: stopping the server and dropping the bench database');
    void cleanup().finally(() => process.exit(130));
  });
  let results: McpResults;
  try {
    const env = productionServerEnv({ databaseUrl: db.url, poolSize: settings.poolSize, dataDir });
    server = await spawnServer('lib/mcp-server.ts', [], env);
    const seed = await server.call<McpSeed>('seed', { tool: TOOL });
    const target: McpTarget = { baseUrl: server.url, apiKey: seed.apiKey, serviceKey: env.MCP_SERVICE_KEY!, userId: seed.userId, tool: TOOL, outboxDir };
    const setup: Setup = { server, db, seed, target };
    log(`service ${server.url} (pid ${server.pid}); deployment ${seed.deploymentId}; user ${seed.userId}; ${TOOL} costs ${seed.cost} (${seed.action})`);

    const runs: McpRun[] = [];
    // A fresh process needs a few seconds to reach its pace (JIT, pool connections, keep-alive sockets).
    for (const variant of VARIANTS) runs.push(await measure(setup, variant, 16, 0, settings.warmupSeconds));
    for (let r = 1; r <= settings.rounds; r++) {
      const order = r % 2 === 1 ? VARIANTS : [...VARIANTS].reverse();
      for (const callers of settings.callers) for (const variant of order) runs.push(await measure(setup, variant, callers, r, settings.seconds));
    }
    const final = await server.call<McpVerification>('verify');
    const metered = runs.filter((r) => r.m.variant !== 'unmetered').reduce((x, r) => x + r.m.successes, 0);
    const ok =
      runs.every((r) => r.accounting.ok) &&
      final.mismatches === 0 &&
      final.usageSuccess === metered &&
      final.ledgerDeducts === metered &&
      final.creditsSpent === metered * seed.cost &&
      final.reserved === 0 &&
      !final.invocations.reserved;
    log(`final: ${ok ? 'OK' : 'MISMATCH'}: ${metered} metered calls, ${JSON.stringify(final)}`);
    const { apiKey: _k, userId: _u, organizationId: _o, deploymentId: _d, ...seedInfo } = seed;
    results = {
      date: new Date().toISOString(),
      git: codeState(),
      durationSeconds: Math.round((Date.now() - started) / 1000),
      machine: {
        cpus: os.availableParallelism(),
        cpuModel: os.cpus()[0]?.model ?? 'unknown',
        node: process.version,
        postgres: db.version,
        os: `${os.type()} ${os.release()}`,
        loadAtStart: Number(loadAtStart.toFixed(2)),
        loadAtEnd: Number(os.loadavg()[0]!.toFixed(2)),
        ...quiet,
      },
      settings,
      seed: seedInfo,
      runs,
      final,
      ok,
    };
  } finally {
    await cleanup();
  }
  const file = join(os.tmpdir(), `creditgate-bench-mcp-${smoke ? 'smoke-' : ''}${Date.now()}.json`);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`results: ${file} (${results.durationSeconds} s)`);
  if (smoke) log(`\n${renderMcp(results)}`);
  else log(`docs: ${updateMcpDoc(results, DOC)}`);
  if (!results.ok) process.exitCode = 1;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const render = argv.find((a) => a.startsWith('--render='));
  if (render) log(`docs: ${updateMcpDoc(JSON.parse(readFileSync(render.slice('--render='.length), 'utf8')) as McpResults, DOC)}`);
  else await main();
}
