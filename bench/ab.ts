/**
 * Two creditgate configurations compared interleaved, against the matching baseline, on one PostgreSQL
 * database: the machine's speed drifts by tens of percent over minutes (docs/benchmarks.md, "Method"),
 * so a setting measured in one run and its alternative in another compare the drift, not the setting.
 * Here every round measures the baseline, A and B for the same few seconds each, in rotating order, and
 * the report gives each round's ratios and their medians.
 *
 * Usage: tsx bench/ab.ts --a "DEDUCT_BATCH_IN_FLIGHT=1" --b "DEDUCT_BATCH_IN_FLIGHT=2"
 *          [--scenario record:many] [--rounds 6] [--seconds 5] [--rate 3000] [--tenants 1000]
 * `--rate` offers a fixed load (requests per second) instead of the closed loop, to compare latency.
 * The two servers share one database; each serves tenants of its own, so that neither's writes make the
 * other's in-process state (caches, remembered rows) stale.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Seeded } from './fixtures.js';
import { type ServerProcess, spawnServer } from './lib/child.js';
import { productionServerEnv } from './lib/env.js';
import { type LoadTarget, type Measurement, runLoad } from './lib/load.js';
import { createBenchDatabase } from './lib/postgres.js';
import { type Endpoint, MATCHING_BASELINE, type Spread } from './lib/results.js';
import { baselineTarget, creditgateTarget } from './scenarios.js';

const { values } = parseArgs({
  options: {
    a: { type: 'string', default: '' },
    b: { type: 'string', default: '' },
    scenario: { type: 'string', default: 'record:many' },
    rounds: { type: 'string', default: '6' },
    seconds: { type: 'string', default: '5' },
    rate: { type: 'string' },
    tenants: { type: 'string', default: '1000' },
  },
});
const [endpoint, spread] = values.scenario!.split(':') as [Endpoint, Spread];
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const rate = values.rate === undefined ? undefined : Number(values.rate);
const CONNECTIONS = 100;
const POOL_SIZE = 20;

/** "K=V K2=V2" → { K: 'V', K2: 'V2' } */
function parseEnv(spec: string): Record<string, string> {
  return Object.fromEntries(
    spec
      .split(/\s+/)
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
}

/**
 * The order of baseline (0), A (1) and B (2) in each round: all six, so that over six rounds each
 * runs right after each of the others equally often. A contender pays for what the one before it
 * left PostgreSQL to do (dirty pages, WAL); with only the three rotations, B followed A in two rounds
 * of three, and two identical servers measured A/B 1.03–1.05 (docs/benchmarks.md, "Budgets on the
 * record path, a fourth look").
 */
const ORDERS = [
  [0, 1, 2],
  [2, 1, 0],
  [1, 0, 2],
  [2, 0, 1],
  [0, 2, 1],
  [1, 2, 0],
];

const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
const line = (m: Measurement) => `${String(m.rps).padStart(6)}/s p50 ${m.latency.p50} p99 ${m.latency.p99} ms (cpu srv/pg ${m.cpu.server}/${m.cpu.postgres}%)`;

/**
 * Mean and count of the histograms that break a request's time down (the batcher's wait and batch, the
 * balance reads, the HTTP request of the measured route), and the batches on remembered rows, from
 * Prometheus text.
 */
function summarizeHistograms(text: string): string[] {
  const sums = new Map<string, { sum: number; count: number }>();
  for (const line of text.split('\n')) {
    const m = /^(creditgate_(?:deduction_batch_\w+|balance_read_batch_size|http_request_duration_seconds))_(sum|count)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || (m[3] && !m[3].includes('status_code="2'))) continue;
    const key = `${m[1]}${m[3] ?? ''}`;
    const entry = sums.get(key) ?? { sum: 0, count: 0 };
    entry[m[2] as 'sum' | 'count'] = Number(m[4]);
    sums.set(key, entry);
  }
  const lines = [...sums].map(([key, { sum, count }]) => {
    const mean = count === 0 ? 0 : sum / count;
    return `${key}: count ${count}, mean ${key.includes('seconds') ? `${(mean * 1000).toFixed(2)} ms` : mean.toFixed(1)}`;
  });
  // Batches on remembered rows (one round trip) committed, and attempts that found a row changed.
  for (const line of text.split('\n')) if (line.startsWith('creditgate_deduction_batch_remembered_total{')) lines.push(line);
  return lines;
}

const db = await createBenchDatabase();
const dataDirs: string[] = [];
const servers: ServerProcess[] = [];
try {
  const baselineName = MATCHING_BASELINE[endpoint][spread];
  const baseline = await spawnServer('baseline-server.ts', [baselineName, 'postgres'], {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    BENCH_DATABASE_URL: db.url,
    BENCH_POOL_SIZE: String(POOL_SIZE),
  });
  servers.push(baseline);
  const serviceKey = randomBytes(32).toString('base64url');
  const dataDir = mkdtempSync(join(os.tmpdir(), 'creditgate-ab-'));
  dataDirs.push(dataDir);
  // One set of secrets for both: they serve the same tenants.
  const shared = productionServerEnv({ databaseUrl: db.url, poolSize: POOL_SIZE, dataDir, extra: { MCP_SERVICE_KEY: serviceKey } });
  const a = await spawnServer('server.ts', [], { ...shared, ...parseEnv(values.a!) });
  servers.push(a);
  const b = await spawnServer('server.ts', [], { ...shared, ...parseEnv(values.b!) });
  servers.push(b);
  // Each its own tenants: what one writes must not make the other's in-process state stale.
  const seededA = await a.call<Seeded>('seed', { count: Number(values.tenants) });
  const seededB = await b.call<Seeded>('seed', { count: Number(values.tenants), prefix: 'bench-b' });
  const contenders: Array<{ name: string; server: ServerProcess; target: LoadTarget }> = [
    { name: baselineName, server: baseline, target: baselineTarget(baseline.url) },
    { name: `A ${values.a}`, server: a, target: creditgateTarget(a.url, endpoint, spread, seededA, serviceKey) },
    { name: `B ${values.b}`, server: b, target: creditgateTarget(b.url, endpoint, spread, seededB, serviceKey) },
  ];
  for (const c of contenders) await runLoad(c.target, { connections: CONNECTIONS, seconds: 4 });
  const ratios: Record<'A' | 'B', number[]> = { A: [], B: [] };
  const p99: Record<'A' | 'B' | 'base', number[]> = { A: [], B: [], base: [] };
  process.stdout.write(`${values.scenario} against ${baselineName}, ${rate ? `${rate} req/s offered` : 'closed loop'}, ${rounds} rounds of ${seconds} s\n`);
  for (let round = 0; round < rounds; round++) {
    const order = ORDERS[round % ORDERS.length]!.map((i) => contenders[i]!);
    const got = new Map<string, Measurement>();
    for (const c of order) {
      await runLoad(c.target, { connections: CONNECTIONS, seconds: 1, rate });
      got.set(c.name, await runLoad(c.target, { connections: CONNECTIONS, seconds, rate, serverPid: c.server.pid }));
    }
    const base = got.get(contenders[0]!.name)!;
    const ma = got.get(contenders[1]!.name)!;
    const mb = got.get(contenders[2]!.name)!;
    ratios.A.push(ma.rps / base.rps);
    ratios.B.push(mb.rps / base.rps);
    p99.base.push(base.latency.p99);
    p99.A.push(ma.latency.p99);
    p99.B.push(mb.latency.p99);
    process.stdout.write(
      `round ${round + 1}: base ${line(base)}\n         A    ${line(ma)} = ${(ma.rps / base.rps).toFixed(2)}x\n         B    ${line(mb)} = ${(mb.rps / base.rps).toFixed(2)}x\n`,
    );
  }
  // What the servers' own histograms say over all rounds (warm-ups included): where a request's time went.
  for (const [label, server] of [['A', a] as const, ['B', b] as const]) {
    const res = await fetch(`${server.url}/metrics`, { headers: { 'x-admin-key': shared.ADMIN_API_KEY! } });
    process.stdout.write(`${label}: ${summarizeHistograms(await res.text()).join('\n   ')}\n`);
  }
  process.stdout.write(
    `median: A ${median(ratios.A).toFixed(2)}x (p99 ${median(p99.A)} ms)  B ${median(ratios.B).toFixed(2)}x (p99 ${median(p99.B)} ms)  baseline p99 ${median(p99.base)} ms\n`,
  );
} finally {
  for (const s of servers.reverse()) await s.stop();
  await db.drop();
  for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
}
