/**
 * `npm run bench:ai`: what the AI proxy adds to a call (docs/benchmarks.md, AI proxy latency). The OpenAI-compatible stand-in runs
 * in one process (bench/lib/ai-stand-in-server.ts), creditgate (production start path, PGlite in memory
 * or with --postgres a fresh PostgreSQL database, AI_BASE_URL → the stand-in) in another
 * (bench/lib/ai-server.ts), this load generator in a third. Every scenario calls the stand-in directly and
 * through /api/v1/ai/chat/completions with the same body (undici Pool, keep-alive, no SDK) and compares:
 *   - time to first token (TTFT, streams): until the first body chunk that carries a content piece
 *     (`"content":" w…`: the role chunk before it, whose content is empty, does not count);
 *   - total: until the body ended (for a stream, after `[DONE]`; the proxy settles before it).
 * The slow stream (10 ms between 50 chunks) shows the proxy hands chunks on as they come: its TTFT
 * must stay within one chunk interval of the direct one while the whole answer takes half a second.
 * Afterwards: SQL statements per proxied call (app.deps.db wrapped in the child), and the accounting
 * (one usage record per proxied call, no hold left, no ledger mismatch).
 * Options: --smoke (a short run, < 60 s; prints, writes nothing), --requests=N (sequential requests per
 * scenario and path), --postgres (PostgreSQL at BENCH_POSTGRES_URL or postgres://postgres@127.0.0.1:5432;
 * prints and writes its JSON to the temp directory, leaving the doc to the PGlite run),
 * --no-wait (do not wait for other benchmarks or test runs to end first).
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import type { AiSeed, AiVerification } from './lib/ai-server.js';
import { type ServerProcess, spawnServer } from './lib/child.js';
import { cpuShare, cpuSnapshot } from './lib/cpu.js';
import { gitState, productionServerEnv } from './lib/env.js';
import { type BenchDatabase, createBenchDatabase } from './lib/postgres.js';
import { type LatencySummary, round, Samples } from './lib/stats.js';

const argv = process.argv.slice(2);
const smoke = argv.includes('--smoke');
const usePostgres = argv.includes('--postgres');
const noWait = smoke || argv.includes('--no-wait');
const option = (name: string): number | undefined => {
  const hit = argv.find((a) => a.startsWith(`--${name}=`));
  return hit ? Number(hit.slice(name.length + 3)) : undefined;
};
const SEQUENTIAL = option('requests') ?? (smoke ? 150 : 2000);
const SLOW_SEQUENTIAL = smoke ? 8 : 60;
const SLOW_CHUNKS = 50;
const SLOW_DELAY_MS = 10;
const CONCURRENT = 16;
const CONCURRENT_REQUESTS = smoke ? 200 : 4000;
/** Warm-up calls per path and body (chat, stream) and key (unlimited, limited). */
const WARMUP = smoke ? 25 : 100;
/** Calls per variant while the server's SQL statements are counted. */
const COUNTED = smoke ? 50 : 200;
const GETS = smoke ? 150 : 1000;
const TARGET_ADDED_TTFT_P50_MS = 2;
const POOL_SIZE = 10;
const QUIET_MAX_MS = 15 * 60_000;
const DOC = fileURLToPath(new URL('../docs/benchmarks.md', import.meta.url));
const RESULTS = fileURLToPath(new URL('./results/ai-latest.json', import.meta.url));
const START = '<!-- bench:ai:start -->';
const END = '<!-- bench:ai:end -->';
const CONTENT = Buffer.from('"content":" w');

interface Target {
  name: 'direct' | 'proxy';
  pool: Pool;
  path: string;
  headers: Record<string, string>;
}

interface Timing {
  ttft: number;
  total: number;
}

function log(line: string): void {
  process.stdout.write(`[bench:ai] ${line}\n`);
}

/** Proxied calls answered 200: each must leave exactly one usage record. */
let proxied = 0;

async function call(target: Target, body: Record<string, unknown>): Promise<Timing> {
  const start = performance.now();
  const res = await target.pool.request({ method: 'POST', path: target.path, headers: target.headers, body: JSON.stringify(body) });
  let ttft = -1;
  // The marker may straddle two chunks: look at the end of the previous chunk too, until it is found.
  let tail: Buffer | null = null;
  for await (const chunk of res.body) {
    if (ttft >= 0) continue;
    const seen: Buffer = tail ? Buffer.concat([tail, chunk as Buffer]) : (chunk as Buffer);
    if (seen.includes(CONTENT)) ttft = performance.now() - start;
    else tail = seen.subarray(Math.max(0, seen.length - CONTENT.length + 1));
  }
  const total = performance.now() - start;
  if (res.statusCode !== 200) throw new Error(`${target.name} answered ${res.statusCode}`);
  if (ttft < 0) throw new Error(`${target.name}: no content in the answer`);
  if (target.name === 'proxy') proxied++;
  return { ttft, total };
}

interface PathResult {
  ttft: LatencySummary;
  total: LatencySummary;
}

interface Row {
  scenario: string;
  stream: boolean;
  inFlight: number;
  requests: number;
  direct: PathResult;
  proxy: PathResult;
  added: { ttftP50: number; ttftP99: number; totalP50: number; totalP99: number };
}

type PathSamples = Record<'direct' | 'proxy', { ttft: Samples; total: Samples }>;
const newSamples = (): PathSamples => ({ direct: { ttft: new Samples(), total: new Samples() }, proxy: { ttft: new Samples(), total: new Samples() } });

function record(samples: PathSamples, target: Target, timing: Timing): void {
  samples[target.name].ttft.push(timing.ttft);
  samples[target.name].total.push(timing.total);
}

/** Sequential: direct and proxy alternate request by request (and which goes first), so both see the same noise. */
async function sequential(scenario: string, targets: [Target, Target], body: Record<string, unknown>, n: number): Promise<Row> {
  const samples = newSamples();
  for (let i = 0; i < n; i++) {
    const order = i % 2 === 0 ? targets : ([targets[1], targets[0]] as const);
    for (const t of order) record(samples, t, await call(t, body));
  }
  return row(scenario, body, 1, n, samples);
}

/** `inFlight` requests at a time against one target, then the other. */
async function concurrent(scenario: string, targets: [Target, Target], body: Record<string, unknown>, n: number, inFlight: number): Promise<Row> {
  const samples = newSamples();
  for (const t of targets) {
    let next = 0;
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next++ < n) record(samples, t, await call(t, body));
      }),
    );
  }
  return row(scenario, body, inFlight, n, samples);
}

function row(scenario: string, body: Record<string, unknown>, inFlight: number, requests: number, s: PathSamples): Row {
  const direct = { ttft: s.direct.ttft.summary(), total: s.direct.total.summary() };
  const proxy = { ttft: s.proxy.ttft.summary(), total: s.proxy.total.summary() };
  return {
    scenario,
    stream: body.stream === true,
    inFlight,
    requests,
    direct,
    proxy,
    added: {
      ttftP50: round(proxy.ttft.p50 - direct.ttft.p50),
      ttftP99: round(proxy.ttft.p99 - direct.ttft.p99),
      totalP50: round(proxy.total.p50 - direct.total.p50),
      totalP99: round(proxy.total.p99 - direct.total.p99),
    },
  };
}

/** p50 of `n` sequential GETs: the cost of a request that is only authenticated and rate limited. */
async function getP50(pool: Pool, path: string, headers: Record<string, string>, n: number): Promise<number> {
  const samples = new Samples();
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    const res = await pool.request({ method: 'GET', path, headers });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`GET ${path} answered ${res.statusCode}`);
    samples.push(performance.now() - start);
  }
  return samples.summary().p50;
}

interface StatementCount {
  variant: string;
  calls: number;
  /** Statements per call, a transaction's BEGIN … COMMIT counted once besides its statements. */
  perCall: number;
  transactionsPerCall: number;
  /** Statements by label (first characters of the SQL, `tx:` inside a transaction), per call, ≥ 0.05. */
  byLabel: Record<string, number>;
}

/** SQL statements the server runs per call of one kind: `calls` sequential calls between two snapshots. */
async function countPerCall(server: ServerProcess, variant: string, calls: number, run: () => Promise<unknown>): Promise<StatementCount> {
  const before = await server.call<Record<string, number>>('statements');
  for (let i = 0; i < calls; i++) await run();
  const after = await server.call<Record<string, number>>('statements');
  const byLabel: Record<string, number> = {};
  let total = 0;
  for (const [label, n] of Object.entries(after)) {
    const d = n - (before[label] ?? 0);
    total += d;
    if (d / calls >= 0.05) byLabel[label] = round(d / calls);
  }
  const transactions = (after['BEGIN … COMMIT'] ?? 0) - (before['BEGIN … COMMIT'] ?? 0);
  return { variant, calls, perCall: round(total / calls), transactionsPerCall: round(transactions / calls), byLabel };
}

/** Other benchmarks or test runs on the machine (their processes' command lines), not counting this run. */
function otherWork(own: Set<number>): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (own.has(Number(pid))) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const hit = /bench\/[\w/-]+\.ts|vitest/.exec(cmd);
      if (hit && !cmd.includes('bench/ai.ts') && !cmd.includes('bench/lib/ai-')) found.push(hit[0]);
    } catch {
      // gone
    }
  }
  return found;
}

/** Wait (up to QUIET_MAX_MS) until no other benchmark or test run is going; the run goes ahead anyway then. */
async function waitQuiet(): Promise<{ waitedSeconds: number; busyAtStart: string[] }> {
  const own = new Set([process.pid, process.ppid]);
  const started = Date.now();
  let busy = otherWork(own);
  while (!noWait && busy.length > 0 && Date.now() - started < QUIET_MAX_MS) {
    log(`waiting for a quiet machine: ${[...new Set(busy)].join(', ')} running, load ${os.loadavg()[0]!.toFixed(2)}`);
    await sleep(15_000);
    busy = otherWork(own);
  }
  return { waitedSeconds: Math.round((Date.now() - started) / 1000), busyAtStart: [...new Set(busy)] };
}

interface Results {
  started: string;
  durationSeconds: number;
  commit: string;
  dirty: boolean;
  storage: string;
  machine: {
    cpus: number;
    model: string;
    node: string;
    loadAtStart: number;
    loadAtEnd: number;
    waitedSeconds: number;
    otherWorkAtStart: string[];
    /** CPU during the measurements, 100 = one core busy: this process, creditgate, the stand-in, the whole machine, and the rest. */
    cpu: { loadgen: number; server: number; standIn: number; postgres: number; machine: number; other: number };
  };
  smoke: boolean;
  settings: { sequential: number; concurrent: number; concurrentRequests: number; slow: { requests: number; chunks: number; delayMs: number }; warmup: number };
  rows: Row[];
  overhead: { healthzP50: number; modelsP50: number };
  statements: StatementCount[];
  verification: AiVerification & { proxied: number; ok: boolean };
  target: { addedTtftP50Ms: number; addedTtftP50: number; met: boolean };
  notBuffered: { met: boolean; directTtftP50: number; proxyTtftP50: number; proxyTtftP99: number; proxyTotalP50: number; chunkDelayMs: number };
}

async function main(): Promise<void> {
  const quiet = await waitQuiet();
  const started = new Date();
  const loadAtStart = os.loadavg()[0]!;
  const dataDir = mkdtempSync(join(os.tmpdir(), 'cg-bench-ai-'));
  let db: BenchDatabase | undefined;
  let standIn: ServerProcess | undefined;
  let server: ServerProcess | undefined;
  const pools: Pool[] = [];
  let results: Results;
  try {
    db = usePostgres ? await createBenchDatabase() : undefined;
    standIn = await spawnServer('lib/ai-stand-in-server.ts', [], { PATH: process.env.PATH, HOME: process.env.HOME, NODE_ENV: 'production' });
    const standInBase = `${standIn.url}/v1`;
    server = await spawnServer(
      'lib/ai-server.ts',
      [],
      productionServerEnv({
        databaseUrl: db?.url ?? 'memory://',
        poolSize: db ? POOL_SIZE : 1,
        dataDir,
        extra: { AI_BASE_URL: standInBase, AI_API_KEY: 'sk-bench' },
      }),
    );
    const { unlimitedKey, limitedKey } = await server.call<AiSeed>('seed');
    const headers = { 'content-type': 'application/json' };
    const direct: Target = { name: 'direct', pool: new Pool(standIn.url, { connections: 32 }), path: '/v1/chat/completions', headers: { ...headers, authorization: 'Bearer sk-bench' } };
    const proxy: Target = { name: 'proxy', pool: new Pool(server.url, { connections: 32 }), path: '/api/v1/ai/chat/completions', headers: { ...headers, authorization: `Bearer ${unlimitedKey}` } };
    const limited: Target = { ...proxy, headers: { ...headers, authorization: `Bearer ${limitedKey}` } };
    pools.push(direct.pool, proxy.pool);
    const targets: [Target, Target] = [direct, proxy];
    const limitedTargets: [Target, Target] = [direct, limited];
    const chat = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say twenty words, please.' }], max_tokens: 20 };
    const stream = { ...chat, stream: true };
    log(`${usePostgres ? `PostgreSQL ${db!.version} (pool ${POOL_SIZE})` : 'PGlite in memory'}; ${os.availableParallelism()} CPUs, load ${loadAtStart.toFixed(2)}`);

    log(`warm-up: ${WARMUP * 4} calls per path`);
    for (const t of [targets, limitedTargets]) {
      await sequential('warm-up', t, chat, WARMUP);
      await sequential('warm-up', t, stream, WARMUP);
    }

    const cpuFrom = { server: cpuSnapshot(server.pid), standIn: cpuSnapshot(standIn.pid) };
    const rows: Row[] = [];
    log(`sequential ×${SEQUENTIAL} per path: non-stream, stream; enterprise (no hold) and limited tier (hold + settle)`);
    rows.push(await sequential('non-stream, 20 tokens', targets, chat, SEQUENTIAL));
    rows.push(await sequential('stream, 20 chunks', targets, stream, SEQUENTIAL));
    rows.push(await sequential('non-stream, 20 tokens, limited tier', limitedTargets, chat, SEQUENTIAL));
    rows.push(await sequential('stream, 20 chunks, limited tier', limitedTargets, stream, SEQUENTIAL));
    log(`${CONCURRENT} in flight ×${CONCURRENT_REQUESTS} per path`);
    rows.push(await concurrent('non-stream, 20 tokens', targets, chat, CONCURRENT_REQUESTS, CONCURRENT));
    rows.push(await concurrent('stream, 20 chunks', targets, stream, CONCURRENT_REQUESTS, CONCURRENT));
    rows.push(await concurrent('stream, 20 chunks, limited tier', limitedTargets, stream, CONCURRENT_REQUESTS, CONCURRENT));
    await standIn.call('options', { replyTokens: SLOW_CHUNKS, chunkDelayMs: SLOW_DELAY_MS });
    log(`slow stream (${SLOW_CHUNKS} chunks, ${SLOW_DELAY_MS} ms apart), sequential ×${SLOW_SEQUENTIAL}`);
    const slow = await sequential(`stream, ${SLOW_CHUNKS} chunks ${SLOW_DELAY_MS} ms apart`, targets, { ...stream, max_tokens: SLOW_CHUNKS }, SLOW_SEQUENTIAL);
    rows.push(slow);
    await standIn.call('options', { replyTokens: 20, chunkDelayMs: 0 });
    const cpuTo = { server: cpuSnapshot(server.pid), standIn: cpuSnapshot(standIn.pid) };

    const overhead = {
      healthzP50: await getP50(proxy.pool, '/healthz', {}, GETS),
      modelsP50: await getP50(proxy.pool, '/api/v1/ai/models', { authorization: `Bearer ${unlimitedKey}` }, GETS),
    };
    log(`GET /healthz p50 ${overhead.healthzP50} ms, GET /api/v1/ai/models (authenticated, rate limited) p50 ${overhead.modelsP50} ms`);

    log(`SQL statements per call: ${COUNTED} calls of each kind`);
    const statements = [
      await countPerCall(server, 'GET /api/v1/ai/models (authentication only)', COUNTED, () =>
        proxy.pool.request({ method: 'GET', path: '/api/v1/ai/models', headers: { authorization: `Bearer ${unlimitedKey}` } }).then((r) => r.body.text()),
      ),
      await countPerCall(server, 'non-stream, enterprise', COUNTED, () => call(proxy, chat)),
      await countPerCall(server, 'stream, enterprise', COUNTED, () => call(proxy, stream)),
      await countPerCall(server, 'non-stream, limited tier', COUNTED, () => call(limited, chat)),
      await countPerCall(server, 'stream, limited tier', COUNTED, () => call(limited, stream)),
    ];
    for (const s of statements) log(`  ${s.variant}: ${s.perCall} statements (${s.transactionsPerCall} transactions) per call`);

    const verification = await server.call<AiVerification>('verify');
    const accountingOk = verification.usageRecords === proxied && verification.held === 0 && verification.mismatches === 0;
    log(`accounting: ${verification.usageRecords} usage records for ${proxied} proxied calls, ${verification.held} holds open, ${verification.mismatches} ledger mismatches`);

    // The target is read on the enterprise deployment's sequential stream; the limited tier's hold is reported beside it.
    const targetRow = rows.find((r) => r.scenario === 'stream, 20 chunks' && r.inFlight === 1)!;
    // Not buffered: the slow stream's first token comes less than one chunk interval after the direct one,
    // and long before the end of the answer.
    const notBuffered = {
      met: slow.added.ttftP50 < SLOW_DELAY_MS && slow.proxy.ttft.p99 < slow.proxy.total.p50 / 10,
      directTtftP50: slow.direct.ttft.p50,
      proxyTtftP50: slow.proxy.ttft.p50,
      proxyTtftP99: slow.proxy.ttft.p99,
      proxyTotalP50: slow.proxy.total.p50,
      chunkDelayMs: SLOW_DELAY_MS,
    };
    const cpuServer = cpuShare(cpuFrom.server, cpuTo.server);
    const cpuStandIn = cpuShare(cpuFrom.standIn, cpuTo.standIn);
    const postgresCpu = usePostgres ? cpuServer.postgres : 0;
    results = {
      started: started.toISOString(),
      durationSeconds: Math.round((Date.now() - started.getTime()) / 1000),
      ...gitState(),
      storage: usePostgres ? `PostgreSQL ${db!.version}, pool ${POOL_SIZE}` : 'PGlite in memory, one connection, in the server process',
      machine: {
        cpus: os.availableParallelism(),
        model: os.cpus()[0]?.model ?? 'unknown',
        node: process.version,
        loadAtStart: round(loadAtStart),
        loadAtEnd: round(os.loadavg()[0]!),
        waitedSeconds: quiet.waitedSeconds,
        otherWorkAtStart: quiet.busyAtStart,
        cpu: {
          loadgen: cpuServer.loadgen,
          server: cpuServer.server,
          standIn: cpuStandIn.server,
          postgres: postgresCpu,
          machine: cpuServer.machine,
          other: Math.max(0, cpuServer.machine - cpuServer.loadgen - cpuServer.server - cpuStandIn.server - postgresCpu),
        },
      },
      smoke,
      settings: {
        sequential: SEQUENTIAL,
        concurrent: CONCURRENT,
        concurrentRequests: CONCURRENT_REQUESTS,
        slow: { requests: SLOW_SEQUENTIAL, chunks: SLOW_CHUNKS, delayMs: SLOW_DELAY_MS },
        warmup: WARMUP * 4,
      },
      rows,
      overhead,
      statements,
      verification: { ...verification, proxied, ok: accountingOk },
      target: { addedTtftP50Ms: TARGET_ADDED_TTFT_P50_MS, addedTtftP50: targetRow.added.ttftP50, met: targetRow.added.ttftP50 < TARGET_ADDED_TTFT_P50_MS },
      notBuffered,
    };
  } finally {
    await Promise.all(pools.map((p) => p.close()));
    await server?.stop();
    await standIn?.stop();
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }

  for (const r of results.rows) {
    log(
      `${r.scenario} (${r.inFlight} in flight): ${r.stream ? `TTFT p50 ${r.direct.ttft.p50} → ${r.proxy.ttft.p50} ms (+${r.added.ttftP50}), p99 ${r.direct.ttft.p99} → ${r.proxy.ttft.p99} (+${r.added.ttftP99}); ` : ''}` +
        `total p50 ${r.direct.total.p50} → ${r.proxy.total.p50} ms (+${r.added.totalP50}), p99 ${r.direct.total.p99} → ${r.proxy.total.p99} (+${r.added.totalP99})`,
    );
  }
  log(`target (< ${TARGET_ADDED_TTFT_P50_MS} ms p50 added to TTFT): ${results.target.met ? 'met' : 'missed'} (+${results.target.addedTtftP50} ms)`);
  log(`slow stream not buffered: ${results.notBuffered.met ? 'yes' : 'NO'}`);
  log(`CPU (100 = one core): ${JSON.stringify(results.machine.cpu)}; load ${results.machine.loadAtStart} → ${results.machine.loadAtEnd}`);
  if (smoke || usePostgres) {
    const file = join(os.tmpdir(), `creditgate-bench-ai-${usePostgres ? 'postgres-' : ''}${smoke ? 'smoke-' : ''}${Date.now()}.json`);
    writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
    log(`results: ${file} (${results.durationSeconds} s); docs/benchmarks.md left as it was`);
    if (smoke) log(`\n${render(results).join('\n')}`);
  } else {
    writeFileSync(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
    writeDoc(results);
    log(`bench/results/ai-latest.json and docs/benchmarks.md written (${results.durationSeconds} s)`);
  }
  if (!results.verification.ok) throw new Error('the accounting after the run does not match the calls made');
  if (!results.notBuffered.met) process.exitCode = 1;
}

const ms = (v: number): string => v.toFixed(2);
const signed = (v: number): string => `${v >= 0 ? '+' : '−'}${ms(Math.abs(v))}`;
const code = (label: string): string => `\`${label.replaceAll('`', "'").replaceAll('|', '\\|')}\``;
/** A statement's label is its first 48 characters (bench/lib/server-stats.ts): end it on a whole word. */
const tidy = (label: string): string => {
  const text = label.startsWith('tx: ') ? label.slice(4) : label;
  return text.length < 48 ? label : `${label.slice(0, label.length - text.length)}${text.slice(0, text.lastIndexOf(' '))} …`;
};

function render(results: Results): string[] {
  const m = results.machine;
  const when = results.started.slice(0, 16).replace('T', ' ');
  const nb = results.notBuffered;
  const slow = results.settings.slow;
  const tableRows = results.rows.flatMap((r) => {
    const ttft = (p: PathResult) => (r.stream ? `${ms(p.ttft.p50)} / ${ms(p.ttft.p99)}` : '—');
    const head = `| ${r.scenario} | ${r.inFlight} | ${r.requests}`;
    return [
      `${head} | direct | ${ttft(r.direct)} | ${ms(r.direct.total.p50)} / ${ms(r.direct.total.p99)} | | |`,
      `${head} | proxy | ${ttft(r.proxy)} | ${ms(r.proxy.total.p50)} / ${ms(r.proxy.total.p99)} | ` +
        `${r.stream ? `**${signed(r.added.ttftP50)}** / ${signed(r.added.ttftP99)}` : '—'} | ${signed(r.added.totalP50)} / ${signed(r.added.totalP99)} |`,
    ];
  });
  const statementRows = results.statements.map((s) => {
    const top = Object.entries(s.byLabel)
      .sort((a, b) => b[1] - a[1])
      .map(([label, n]) => `${n} × ${code(tidy(label))}`)
      .join(', ');
    return `| ${s.variant} | ${ms(s.perCall)} | ${ms(s.transactionsPerCall)} | ${top} |`;
  });
  const v = results.verification;
  return [
    '## AI proxy latency',
    '',
    '`npm run bench:ai` (bench/ai.ts) measures what `POST /api/v1/ai/chat/completions` adds to a call',
    'against calling the OpenAI-compatible stand-in (test/ai-stand-in) directly, with the same body.',
    '',
    'Method:',
    '',
    '- Three processes: the stand-in (bench/lib/ai-stand-in-server.ts), creditgate on its production',
    `  start path (bench/lib/ai-server.ts; ${results.storage}; \`AI_BASE_URL\` → the stand-in) and the`,
    '  load generator (undici `Pool`, keep-alive, no OpenAI SDK, whose own overhead would hide the proxy\'s).',
    `  This machine has ${m.cpus} cores for all three${m.cpus <= 2 ? ', so they compete for the CPU (more in the 16-in-flight rows)' : ''}, and other`,
    `  work may run beside them: load average ${m.loadAtStart} at the start, ${m.loadAtEnd} at the end;`,
    `  CPU during the measurements (100 = one core): load generator ${m.cpu.loadgen}, creditgate ${m.cpu.server},`,
    `  stand-in ${m.cpu.standIn}${m.cpu.postgres ? `, PostgreSQL ${m.cpu.postgres}` : ''}, anything else ${m.cpu.other} (machine ${m.cpu.machine})` +
      `${m.otherWorkAtStart.length ? `; still running at the start: ${m.otherWorkAtStart.map(code).join(', ')}` : ''}. Other work shows in the p99s.`,
    '- Sequential rows: one call in flight, direct and proxy alternating call by call (and which goes',
    `  first), ${results.settings.sequential} calls per path; 16-in-flight rows: ${results.settings.concurrentRequests} calls per path, all direct calls then all`,
    `  proxied ones. ${results.settings.warmup} warm-up calls per path first.`,
    '- "enterprise" rows (no qualifier) use an enterprise deployment: no AI token limit, so nothing is held',
    '  before the provider call; the call is settled and recorded after it. "limited tier" rows use a launch',
    '  deployment with an AI token limit: each call holds (one transaction) before the provider call and',
    '  settles (one transaction) after it.',
    '- TTFT (streams only) = until the first body chunk that carries a content piece (the empty role chunk',
    '  before it does not count); total = until the body ended (a stream after `[DONE]`, which the proxy',
    '  sends after the settle). A non-streamed answer has only a total. Times in ms, p50 / p99;',
    '  "added" = proxy − direct of the same percentile.',
    '',
    `### Results of ${when} UTC (commit ${results.commit}${results.dirty ? ', uncommitted changes in src/ or migrations/' : ''}; ${m.cpus} cores ${m.model}, Node ${m.node})`,
    '',
    '| Scenario | In flight | Calls per path | Path | TTFT p50 / p99 | Total p50 / p99 | Added TTFT p50 / p99 | Added total p50 / p99 |',
    '|---|---|---|---|---|---|---|---|',
    ...tableRows,
    '',
    `**Target** < ${results.target.addedTtftP50Ms} ms p50 added to the time to first token (sequential stream, enterprise): ` +
      `**${results.target.met ? 'met' : 'missed'}** (${signed(results.target.addedTtftP50)} ms).`,
    '',
    `**Streams are not buffered** (${nb.met ? 'shown' : 'NOT shown'}): with ${slow.chunks} chunks ${slow.delayMs} ms apart the first token comes through the proxy after`,
    `${ms(nb.proxyTtftP50)} ms p50 (${ms(nb.proxyTtftP99)} p99) against ${ms(nb.directTtftP50)} ms direct, less than one chunk interval later, while the`,
    `whole answer takes ${ms(nb.proxyTotalP50)} ms: every chunk is handed on as it arrives (a buffering proxy's first token would come after the whole answer).`,
    '',
    `**Accounting** after the run: ${v.usageRecords} AI usage records for ${v.proxied} proxied calls (${v.estimated} estimated), ` +
      `${v.held} holds still open, ${v.mismatches} ledger mismatches: **${v.ok ? 'OK' : 'MISMATCH'}**.`,
    '',
    `**Where the added time goes.** \`GET /api/v1/ai/models\` (authentication and the rate limits, no provider`,
    `call, no accounting) takes ${ms(results.overhead.modelsP50)} ms p50 against ${ms(results.overhead.healthzP50)} ms for \`/healthz\` in the same run. SQL statements per`,
    'call, counted in the server (app.deps.db wrapped; `BEGIN … COMMIT` counts a transaction once, `tx:`',
    'marks its statements):',
    '',
    '| Call | Statements per call | Transactions per call | Statements (per call) |',
    '|---|---|---|---|',
    ...statementRows,
    '',
    '- Before the first token: authentication (the API key lookup) and the rate-limit window, body parsing',
    '  and validation, the prompt count (js-tiktoken), the limited tier\'s hold transaction, and the second',
    '  HTTP hop to the provider. The enterprise deployment skips the hold.',
    '- The settle transaction comes after the provider\'s answer: a stream pays it between its last chunk',
    '  and `[DONE]` (in the total, not in the TTFT); a non-streamed answer is read whole and sent only',
    '  after the settle, so the settle is in its total.',
    '- With PGlite every statement runs on the server\'s own event loop and its one connection: with 16',
    '  calls in flight, holds and settles queue behind each other and behind the HTTP work of the other',
    '  calls, which is most of what those rows add; `--postgres` moves the statements to another process.',
  ];
}

function writeDoc(results: Results): void {
  const block = [START, ...render(results), END].join('\n');
  const doc = readFileSync(DOC, 'utf8');
  const at = doc.indexOf(START);
  const next = at >= 0 ? `${doc.slice(0, at)}${block}${doc.slice(doc.indexOf(END) + END.length)}` : `${doc.trimEnd()}\n\n${block}\n`;
  writeFileSync(DOC, next);
}

await main();
