/**
 * Memory of the built service (docs/operations-memory.md, docs/benchmarks.md "Memory"): `node
 * [flags] dist/cli.js serve` as `npm start` runs it (the flags read from its start script), on the
 * embedded default (an empty DATA_DIR) and on PostgreSQL, each: resident memory when idle after start, its peak under a fixed record-usage load
 * (closed loop over many deployments), and when idle again after it; with the load's throughput.
 *
 *   npm run bench:memory -- [pglite|postgres|both=both] [seconds=20] [connections=50]
 *
 * Settings of the embedded database come from the environment (PGLITE_SHARED_BUFFERS_MB), so two
 * settings compare as two runs. Resident memory is the server process's VmRSS from /proc, sampled
 * every 100 ms; initdb of a new data directory runs in a child process, not counted.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serveNodeFlags } from '../scripts/serve-node-flags.mjs';
import { gitState, productionServerEnv } from './lib/env.js';
import { runLoad } from './lib/load.js';
import { createBenchDatabase } from './lib/postgres.js';

const which = process.argv[2] ?? 'both';
const SECONDS = Number(process.argv[3] ?? 20);
const CONNECTIONS = Number(process.argv[4] ?? 50);
const DEPLOYMENTS = 50;
const ROOT = process.cwd();

const rssMb = (pid: number): number => {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Math.round(Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Result {
  database: 'pglite' | 'postgres';
  /** Three seconds after it listens, before any request. */
  start_mb: number;
  /** After the tenants were made, before the load. */
  idle_mb: number;
  peak_mb: number;
  /** The largest V8 heap and "external" memory (ArrayBuffers, WebAssembly memory) seen under the load, from /metrics. */
  idle_heap_mb: number;
  idle_external_mb: number;
  peak_heap_mb: number;
  peak_external_mb: number;
  /** The live V8 heap (used, not reserved) 5 s after the load. */
  after_heap_used_mb: number;
  after_mb: number;
  records_per_second: number;
}

async function measure(database: 'pglite' | 'postgres'): Promise<Result> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cg-memory-'));
  const pgBench = database === 'postgres' ? await createBenchDatabase() : undefined;
  const env = productionServerEnv({ databaseUrl: pgBench?.url ?? '', poolSize: 20, dataDir });
  if (!pgBench) delete env.DATABASE_URL;
  env.LOG_LEVEL = 'info'; // the "listening on" line
  for (const name of ['PGLITE_SHARED_BUFFERS_MB', 'NODE_OPTIONS']) if (process.env[name]) env[name] = process.env[name];
  // BENCH_HEAP_SNAPSHOTS=<dir>: the server writes a V8 heap snapshot there before the load and 5 s after it
  // (each after a full collection), to see what the heap holds (docs/operations-memory.md).
  const snapshots = process.env.BENCH_HEAP_SNAPSHOTS;
  if (snapshots) env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} --heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${snapshots}`.trim();
  // The flags `npm start` runs the service with, then BENCH_SERVER_NODE_ARGS (e.g. another V8 heap setting to compare).
  const nodeArgs = [...serveNodeFlags(), ...(process.env.BENCH_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [])];
  const child = spawn(process.execPath, [...nodeArgs, join(ROOT, 'dist', 'cli.js'), 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no start in 120 s:\n${out}`)), 120_000);
      const onData = (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      child.stdout.on('data', onData);
      child.stderr.on('data', onData);
      child.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${out}`)));
    });
    const call = async (method: string, path: string, body: unknown, headers: Record<string, string>) => {
      const res = await fetch(`${url}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { data: unknown }).data;
    };
    await sleep(3_000);
    const started = rssMb(child.pid!);
    // Tenants: one user's organizations, each with its primary deployment and credits enough for the run.
    const signup = await call('POST', '/auth/signup', { email: `memory-${Date.now()}@example.com`, password: 'violet-harbor-lantern-42', full_name: 'Memory' }, {});
    const bearer = { authorization: `Bearer ${(signup as { access_token: string }).access_token}` };
    const admin = { 'x-admin-key': env.ADMIN_API_KEY! };
    const service = { 'x-mcp-service-key': env.MCP_SERVICE_KEY! };
    const deployments: string[] = [];
    for (let i = 0; i < DEPLOYMENTS; i++) {
      const org = (await call('POST', '/organizations', { name: `Memory ${i}`, slug: `memory-${Date.now()}-${i}` }, bearer)) as { deployment: { id: string } };
      await call('POST', `/api/v1/admin/deployments/${org.deployment.id}/credits`, { amount: 100_000_000, reason: 'memory benchmark' }, admin);
      // A tier that meters MCP calls without a per-minute limit in the way (new organizations start on sandbox).
      await call('PUT', `/api/v1/admin/deployments/${org.deployment.id}`, { tier: 'enterprise' }, admin);
      deployments.push(org.deployment.id);
    }
    await sleep(5_000);
    const idle = rssMb(child.pid!);
    let peak = idle;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssMb(child.pid!));
    }, 100);
    // Where the memory is: the V8 heap and external memory, once a second (a scrape costs the server little).
    let peakHeap = 0;
    let peakExternal = 0;
    let heapUsed = 0;
    const scrape = async () => {
      const text = await (await fetch(`${url}/metrics`, { headers: admin })).text();
      const gauge = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
      peakHeap = Math.max(peakHeap, gauge('creditgate_nodejs_heap_size_total_bytes') || gauge('nodejs_heap_size_total_bytes'));
      peakExternal = Math.max(peakExternal, gauge('creditgate_nodejs_external_memory_bytes') || gauge('nodejs_external_memory_bytes'));
      heapUsed = gauge('creditgate_nodejs_heap_size_used_bytes') || gauge('nodejs_heap_size_used_bytes');
    };
    if (snapshots) {
      child.kill('SIGUSR2');
      await sleep(8_000);
    }
    await scrape();
    const idleHeap = peakHeap;
    const idleExternal = peakExternal;
    const scraper = setInterval(() => void scrape().catch(() => {}), 1_000);
    const load = await runLoad(
      {
        url,
        path: '/api/v1/mcp/usage',
        shapes: deployments.map((id, i) => ({ headers: service, body: JSON.stringify({ deployment_id: id, tool_name: `tool_${i % 12}`, mcp_user_id: `user-${i}` }) })),
        isSuccess: (b) => b.includes('"success":true'),
        uniqueInvocationIds: true,
      },
      { connections: CONNECTIONS, seconds: SECONDS, serverPid: child.pid! },
    );
    clearInterval(sampler);
    clearInterval(scraper);
    peak = Math.max(peak, rssMb(child.pid!));
    await sleep(5_000);
    await scrape();
    if (snapshots) {
      child.kill('SIGUSR2');
      await sleep(8_000);
    }
    return { database, start_mb: started, idle_mb: idle, peak_mb: peak,
      idle_heap_mb: Math.round(idleHeap / 2 ** 20),
      idle_external_mb: Math.round(idleExternal / 2 ** 20),
      peak_heap_mb: Math.round(peakHeap / 2 ** 20),
      peak_external_mb: Math.round(peakExternal / 2 ** 20),
      after_heap_used_mb: Math.round(heapUsed / 2 ** 20),
      after_mb: rssMb(child.pid!), records_per_second: Math.round(load.rps) };
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    rmSync(dataDir, { recursive: true, force: true });
    await pgBench?.drop();
  }
}

execFileSync(process.execPath, [join(ROOT, 'scripts', 'build-if-stale.mjs')], { stdio: 'inherit' });
const results: Result[] = [];
for (const database of which === 'both' ? (['pglite', 'postgres'] as const) : [which as 'pglite' | 'postgres']) {
  results.push(await measure(database));
}
console.log(
  JSON.stringify(
    { ...gitState(), seconds: SECONDS, connections: CONNECTIONS, pglite_shared_buffers_mb: process.env.PGLITE_SHARED_BUFFERS_MB ?? 'default', results },
    null,
    2,
  ),
);
