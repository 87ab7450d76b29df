
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Seeded, Verification } from './fixtures.js';
import { type ServerProcess, spawnServer } from './lib/child.js';
import { gitState, productionServerEnv } from './lib/env.js';
import { runLoad, type LoadTarget, type Measurement } from './lib/load.js';
import { type BenchDatabase, createBenchDatabase, perRequest } from './lib/postgres.js';
import {
  type BaselineName,
  type BaselineResult,
  type Endpoint,
  MATCHING_BASELINE,
  type Results,
  type ScenarioResult,
  type Settings,
  type Spread,
  type Storage,
  type StorageResult,
  TARGET_RATIO,
} from './lib/results.js';
import { updateBenchmarksDoc } from './report.js';
import { baselineTarget, creditgateTarget, ENDPOINTS, SPREADS } from './scenarios.js';

const smoke = process.argv.includes('--smoke');
const settings: Settings = {
  connections: 100,
  seconds: smoke ? 3 : 10,
  warmupSeconds: smoke ? 1 : 2,
  tenants: smoke ? 50 : 1000,
  poolSize: 20,
  fixedLoadFraction: 0.5,
  runtime: 'compiled',
};
const SERVER_WARMUP_SECONDS = smoke ? 2 : 6;
const storages = (process.env.BENCH_STORAGES ?? 'postgres,pglite').split(',') as Storage[];
/** `BENCH_ONLY=record:many,check:hot` runs only those scenarios (for profiling one of them); the results then say so. */
const only = process.env.BENCH_ONLY?.split(',').filter(Boolean);
const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
const log = (line: string) => process.stdout.write(`${line}\n`);

function countVitest(): number {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (Number(pid) !== process.pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('vitest')) n++;
    } catch {
      // gone
    }
  }
  return n;
}

async function waitQuiet(): Promise<void> {
  const deadline = Date.now() + 15 * 60_000;
  while (countVitest() > 0 && Date.now() < deadline) {
    log(`waiting for a quiet machine: ${countVitest()} vitest processes, load ${os.loadavg()[0]!.toFixed(2)}`);
    await sleep(30_000);
  }
}

const fmt = (m: Measurement) =>
  `${m.rps} req/s  p50 ${m.latency.p50} ms  p99 ${m.latency.p99} ms  p99.9 ${m.latency.p999} ms` +
  `  (non-2xx ${m.non2xx}, errors ${m.errors}, cpu lg/srv/pg ${m.cpu.loadgen}/${m.cpu.server}/${m.cpu.postgres}%)`;

/** Other work on the machine (the test suites of other sessions) is recorded, not hidden. */
let vitestMax = 0;
const waitForQuiet = process.argv.includes('--wait-quiet');
/** With --wait-quiet, measurements also wait for a quiet machine, up to this much in the whole run. */
let pauseBudgetMs = 6 * 60_000;

async function pauseWhileBusy(): Promise<void> {
  while (waitForQuiet && pauseBudgetMs > 0 && countVitest() > 0) {
    log(`  (pausing: ${countVitest()} vitest processes running; ${Math.round(pauseBudgetMs / 1000)} s of pauses left)`);
    await sleep(5_000);
    pauseBudgetMs -= 5_000;
  }
}

async function measure(target: LoadTarget, serverPid: number, rate?: number): Promise<Measurement> {
  await pauseWhileBusy();
  const before = countVitest();
  const m = await runLoad(target, { connections: settings.connections, seconds: settings.seconds, rate, serverPid });
  m.vitest = Math.max(before, countVitest());
  vitestMax = Math.max(vitestMax, m.vitest);
  return m;
}

/** A baseline server kept running through its storage's creditgate scenarios, to be measured again next to each. */
interface LiveBaseline {
  name: BaselineName;
  server: ServerProcess;
  target: LoadTarget;
}

async function runBaseline(
  name: BaselineName,
  storage: Storage,
  db: BenchDatabase | undefined,
): Promise<{ result: BaselineResult; live: LiveBaseline }> {
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, BENCH_DATABASE_URL: db?.url, BENCH_POOL_SIZE: String(settings.poolSize) };
  const server = await spawnServer('baseline-server.ts', [name, storage], env);
  try {
    const target = baselineTarget(server.url);
    await runLoad(target, { connections: settings.connections, seconds: settings.warmupSeconds });
    const from = await db?.stats();
    const throughput = await measure(target, server.pid);
    const pg = from && db ? perRequest(from, await db.stats(), throughput.responses) : undefined;
    log(`[${storage}] baseline ${name}: ${fmt(throughput)}`);
    const result: BaselineResult = { name, throughput, pg };
    if (name !== 'hello') {
      result.fixed = await measure(target, server.pid, Math.round(throughput.rps * settings.fixedLoadFraction));
      log(`[${storage}] baseline ${name} @ ${result.fixed.offered} req/s: ${fmt(result.fixed)}`);
    }
    return { result, live: { name, server, target } };
  } catch (err) {
    await server.stop();
    throw err;
  }
}

/**
 * The matching baseline measured again right before a scenario: the machine's speed drifts over
 * minutes (docs/benchmarks.md, "Method"), so the ratio compares two measurements seconds apart.
 */
async function measurePaired(live: LiveBaseline, storage: Storage): Promise<Measurement> {
  await runLoad(live.target, { connections: settings.connections, seconds: settings.warmupSeconds });
  const m = await measure(live.target, live.server.pid);
  log(`[${storage}]   paired baseline ${live.name}: ${fmt(m)}`);
  return m;
}

function creditgateEnv(storage: Storage, db: BenchDatabase | undefined, dataDir: string, serviceKey: string): NodeJS.ProcessEnv {
  return productionServerEnv({
    databaseUrl: storage === 'postgres' ? db!.url : 'memory://',
    poolSize: settings.poolSize,
    dataDir,
    // The batcher's settings pass through, to measure other defaults (docs/adr/0004-group-commit.md).
    extra: {
      MCP_SERVICE_KEY: serviceKey,
      DEDUCT_BATCH_IN_FLIGHT: process.env.DEDUCT_BATCH_IN_FLIGHT,
      DEDUCT_BATCH_WINDOW_MS: process.env.DEDUCT_BATCH_WINDOW_MS,
      DEDUCT_BATCH_MAX: process.env.DEDUCT_BATCH_MAX,
      DEDUCT_BATCH_REMEMBER_MS: process.env.DEDUCT_BATCH_REMEMBER_MS,
      // The seeding runs in the server: budgets on every tenant (bench/fixtures.ts).
      BENCH_BUDGETS: process.env.BENCH_BUDGETS,
    },
  });
}

async function runCreditgate(
  storage: Storage,
  db: BenchDatabase | undefined,
  baselines: BaselineResult[],
  live: LiveBaseline[],
): Promise<StorageResult> {
  const dataDir = mkdtempSync(join(os.tmpdir(), 'creditgate-bench-'));
  const serviceKey = randomBytes(32).toString('base64url');
  const server = await spawnServer('server.ts', [], creditgateEnv(storage, db, dataDir, serviceKey));
  const scenarios: ScenarioResult[] = [];
  try {
    const seeded = await server.call<Seeded>('seed', { count: settings.tenants });
    log(`[${storage}] seeded ${seeded.many.length} + 1 tenants through the service layer in ${seeded.ms} ms`);
    // A fresh server needs seconds to reach its pace (JIT, pool connections, each key's first-use
    // touch): warm it up on the read-only route, which writes no usage.
    const warmTarget = creditgateTarget(server.url, 'check', 'many', seeded, serviceKey);
    await runLoad(warmTarget, { connections: settings.connections, seconds: SERVER_WARMUP_SECONDS });
    let last = await server.call<Verification>('verify');
    for (const endpoint of Object.keys(ENDPOINTS) as Endpoint[]) {
      for (const spread of Object.keys(SPREADS) as Spread[]) {
        if (only && !only.includes(`${endpoint}:${spread}`)) continue;
        const target = creditgateTarget(server.url, endpoint, spread, seeded, serviceKey);
        const baseline = MATCHING_BASELINE[endpoint][spread];
        const firstBaselineRps = baselines.find((b) => b.name === baseline)?.throughput.rps ?? 0;
        const pairedLive = live.find((b) => b.name === baseline);
        const pairedBaseline = pairedLive ? await measurePaired(pairedLive, storage) : undefined;
        const baselineRps = pairedBaseline?.rps ?? firstBaselineRps;
        const warm = await runLoad(target, { connections: settings.connections, seconds: settings.warmupSeconds });
        const from = await db?.stats();
        const throughput = await measure(target, server.pid);
        const rate = Math.max(1, Math.round(baselineRps * settings.fixedLoadFraction));
        const fixed = await measure(target, server.pid, rate);
        const pg = from && db ? perRequest(from, await db.stats(), throughput.responses + fixed.responses) : undefined;
        const now = await server.call<Verification>('verify');
        const runs = [warm, throughput, fixed];
        const successes = runs.reduce((n, m) => n + m.successes, 0);
        const expected = endpoint === 'check' ? 0 : successes;
        const usageRecords = now.usageSuccess - last.usageSuccess;
        const unanswered = endpoint === 'check' ? 0 : runs.reduce((n, m) => n + m.errors, 0);
        const accounting = {
          successes,
          usageRecords,
          ledgerDeducts: now.ledgerDeducts - last.ledgerDeducts,
          creditsSpent: now.spent - last.spent,
          failedUsageRecords: now.usageFailed - last.usageFailed,
          mismatches: now.mismatches,
          unanswered,
          exact: usageRecords === expected,
          ok: false,
        };
        accounting.ok =
          accounting.mismatches === 0 &&
          accounting.ledgerDeducts === usageRecords &&
          accounting.creditsSpent === usageRecords &&
          accounting.failedUsageRecords === 0 &&
          usageRecords >= expected &&
          usageRecords <= expected + unanswered &&
          runs.every((m) => m.drained);
        if (now.mismatches > 0) log(`  ledger mismatches: ${JSON.stringify(now.sample)}`);
        last = now;
        scenarios.push({
          endpoint,
          spread,
          baseline,
          baselineRps,
          firstBaselineRps,
          pairedBaseline,
          targetRatio: TARGET_RATIO[endpoint][spread],
          throughput,
          fixed,
          accounting,
          pg,
        });
        log(`[${storage}] ${ENDPOINTS[endpoint].label}, ${SPREADS[spread]}: ${fmt(throughput)} = ${(throughput.rps / Math.max(1, baselineRps)).toFixed(2)}x ${baseline}`);
        log(`[${storage}]   @ ${rate} req/s: ${fmt(fixed)}`);
        log(
          `[${storage}]   accounting: ${accounting.ok ? 'OK' : 'MISMATCH'} (${successes} successes, ${usageRecords} usage records, ` +
            `${accounting.creditsSpent} credits spent, ${unanswered} unanswered)`,
        );
      }
    }
    return { storage, baselines, tenants: settings.tenants + 1, seedMs: seeded.ms, scenarios };
  } finally {
    await server.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (waitForQuiet) await waitQuiet();
  const started = Date.now();
  const vitestAtStart = countVitest();
  const loadAtStart = os.loadavg()[0]!;
  const db = storages.includes('postgres') ? await createBenchDatabase() : undefined;
  process.once('SIGINT', () => {
    log('interrupted: dropping the bench database');
    void (db?.drop() ?? Promise.resolve()).finally(() => process.exit(130));
  });
  const results: Results = {
    date: new Date().toISOString(),
    git: gitState(),
    durationSeconds: 0,
    machine: {
      cpus: os.availableParallelism(),
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      memoryGb: Math.round(os.totalmem() / 2 ** 30),
      node: process.version,
      postgres: db?.version ?? 'n/a',
      os: `${os.type()} ${os.release()}`,
      loadAtStart: Number(loadAtStart.toFixed(2)),
      vitestAtStart,
      loadAtEnd: 0,
      vitestMax: 0,
    },
    settings,
    storages: [],
  };
  log(`creditgate bench: ${results.machine.cpus} CPUs, node ${results.machine.node}, PostgreSQL ${results.machine.postgres}`);
  try {
    let hello: BaselineResult | undefined;
    for (const storage of storages) {
      const sdb = storage === 'postgres' ? db : undefined;
      if (!hello) {
        const first = await runBaseline('hello', storage, undefined);
        await first.live.server.stop();
        hello = first.result;
      }
      // The database baselines stay up, to be measured again next to each scenario.
      const live: LiveBaseline[] = [];
      try {
        const baselines = [hello];
        for (const name of ['select', 'update', 'hot'] as const) {
          const b = await runBaseline(name, storage, sdb);
          live.push(b.live);
          baselines.push(b.result);
        }
        results.storages.push(await runCreditgate(storage, sdb, baselines, live));
      } finally {
        for (const b of live) await b.server.stop();
      }
      await sdb?.exec('DROP TABLE IF EXISTS bench_baseline_rows');
    }
  } finally {
    await db?.drop();
  }
  results.durationSeconds = Math.round((Date.now() - started) / 1000);
  results.machine.loadAtEnd = Number(os.loadavg()[0]!.toFixed(2));
  results.machine.vitestMax = Math.max(vitestMax, vitestAtStart);
  mkdirSync(resultsDir, { recursive: true });
  const partial = smoke || only !== undefined;
  const file = join(resultsDir, partial ? 'smoke.json' : 'latest.json');
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`results: ${file} (${results.durationSeconds} s)`);
  if (!partial) log(`docs: ${updateBenchmarksDoc(results)}`);
}

await main();
