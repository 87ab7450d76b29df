
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { spawnServer, type ServerProcess } from './lib/child.js';
import { gitState, productionServerEnv } from './lib/env.js';
import { type BenchDatabase, createBenchDatabase, type PgCounters, type PgPerRequest, perRequest } from './lib/postgres.js';
import { round } from './lib/stats.js';
import { type ClosedLoadTarget, type ClosedMeasurement, runClosedLoad } from './lib/webhooks-load.js';
import type { ReceiverCounts } from './lib/webhooks-receiver.js';
import type { WebhooksSeed, WebhooksTenant, WebhooksVerification } from './lib/webhooks-server.js';

// ---------------------------------------------------------------------------------------------
// Settings

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(`--${name}`);
const option = (name: string): number | undefined => {
  const hit = argv.find((a) => a.startsWith(`--${name}=`));
  return hit ? Number(hit.slice(name.length + 3)) : undefined;
};
const smoke = flag('smoke');

interface Settings {
  connections: number;
  seconds: number;
  rounds: number;
  /** Once, before the first round: sends, then the quota route, then the receiver. */
  warmupSeconds: number;
  poolSize: number;
  /** Deployments of the send-spread variant (round-robin). */
  spreadDeployments: number;
  payloadBytes: number;
}

const settings: Settings = {
  connections: option('connections') ?? 50,
  seconds: option('seconds') ?? (smoke ? 3 : 10),
  rounds: option('rounds') ?? (smoke ? 1 : 3),
  warmupSeconds: smoke ? 2 : 6,
  poolSize: 20,
  spreadDeployments: option('spread') ?? 50,
  payloadBytes: 0,
};
const QUIET_POLL_MS = 15_000;
const PG_SETTLE_MS = 1_100;
const QUIET_MAX_MS = 25 * 60_000;
const SEND_PATH = '/api/v1/proxy/webhooks/send';
const QUOTA_PATH = '/api/v1/proxy/webhooks/quota';
const DOC = fileURLToPath(new URL('../docs/benchmarks.md', import.meta.url));
const START = '<!-- bench:webhooks:start -->';
const END = '<!-- bench:webhooks:end -->';
const HEADING = '## Webhook proxy throughput';
/** What the proxy delivers: a small event. */
const PAYLOAD = { type: 'invoice.paid', id: 'evt_bench_0001', data: { invoice: 'in_bench_42', amount: 4200, currency: 'usd' } };
const SIGNING_SECRET = `whsec_${randomBytes(24).toString('base64')}`;

const log = (line: string) => process.stdout.write(`${line}\n`);

// ---------------------------------------------------------------------------------------------
// Other work on the machine: another benchmark (bench:limiter) or a test suite

function otherWork(): { limiter: number; vitest: number } {
  let limiter = 0;
  let vitest = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    if (Number(pid) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (cmd.includes('bench/limiter') || cmd.includes('limiter-server')) limiter++;
      else if (cmd.includes('vitest')) vitest++;
    } catch {
      // gone
    }
  }
  return { limiter, vitest };
}
const busyCount = () => {
  const w = otherWork();
  return w.limiter + w.vitest;
};

interface Quiet {
  waitedSeconds: number;
  /** Still busy when the wait gave up (the run went ahead anyway). */
  busyAtStart: boolean;
  limiterAtStart: number;
  vitestAtStart: number;
}

async function waitQuiet(skip: boolean): Promise<Quiet> {
  const started = Date.now();
  while (!skip && busyCount() > 0 && Date.now() - started < QUIET_MAX_MS) {
    const w = otherWork();
    log(`waiting for a quiet machine: ${w.limiter} bench:limiter and ${w.vitest} vitest processes, load ${os.loadavg()[0]!.toFixed(2)}`);
    await sleep(QUIET_POLL_MS);
  }
  const w = otherWork();
  return {
    waitedSeconds: Math.round((Date.now() - started) / 1000),
    busyAtStart: w.limiter + w.vitest > 0,
    limiterAtStart: w.limiter,
    vitestAtStart: w.vitest,
  };
}

// ---------------------------------------------------------------------------------------------
// Variants and measurements

type Variant = 'receiver' | 'quota' | 'send' | 'send-signed' | 'send-spread';
const VARIANTS: Variant[] = ['receiver', 'quota', 'send', 'send-signed', 'send-spread'];
const VARIANT_LABEL: Record<Variant, string> = {
  receiver: 'Receiver direct (autocannon → node:http, no service)',
  quota: 'Service, trivial route: `GET /api/v1/proxy/webhooks/quota`',
  send: 'Proxy send, unsigned',
  'send-signed': 'Proxy send, signed (`secret` set)',
  'send-spread': 'Proxy send, unsigned, sends spread over several deployments',
};
const SHORT: Record<Variant, string> = { receiver: 'receiver', quota: 'quota', send: 'send', 'send-signed': 'send signed', 'send-spread': 'send spread' };
const isSend = (v: Variant) => v === 'send' || v === 'send-signed' || v === 'send-spread';
const authOf = (t: WebhooksTenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });

interface Setup {
  server: ServerProcess;
  receiver: ServerProcess;
  seed: WebhooksSeed;
  db: BenchDatabase;
}

function targetOf(variant: Variant, s: Setup): ClosedLoadTarget {
  const auth = authOf(s.seed.hot);
  const hook = `${s.receiver.url}/hook`;
  switch (variant) {
    case 'receiver':
      return { url: s.receiver.url, method: 'POST', path: '/hook', headers: {}, body: JSON.stringify(PAYLOAD), isSuccess: (b) => b === 'ok' };
    case 'quota':
      return { url: s.server.url, method: 'GET', path: QUOTA_PATH, headers: auth, isSuccess: (b) => b.includes('"creditsPerWebhook":1') };
    case 'send':
    case 'send-signed':
    case 'send-spread':
      return {
        url: s.server.url,
        method: 'POST',
        path: SEND_PATH,
        headers: auth,
        headerSets: variant === 'send-spread' ? s.seed.spread.map(authOf) : undefined,
        body: JSON.stringify({ url: hook, payload: PAYLOAD, ...(variant === 'send-signed' ? { secret: SIGNING_SECRET } : {}) }),
        isSuccess: (b) => b.includes('"success":true') && b.includes('"attempts":1'),
      };
  }
}

/** Growth of the service's and the receiver's counters over one measurement (sends only). */
interface Accounting {
  successes: number;
  /** Requests without an answer at the client: each may or may not have been delivered and charged. */
  unanswered: number;
  received: number;
  duplicates: number;
  signed: number;
  badSignatures: number;
  usageRecords: number;
  usageCredits: number;
  failedUsageRecords: number;
  ledgerDeducts: number;
  refunds: number;
  creditsSpent: number;
  creditsCharged: number;
  delivered: number;
  failedDeliveries: number;
  inProgress: number;
  retried: number;
  mismatches: number;
  ok: boolean;
}

interface Run {
  variant: Variant;
  round: number;
  m: ClosedMeasurement;
  pg: PgPerRequest;
  /** Requests the receiver got during the measurement. */
  received: number;
  /** SQL statements the service ran during the measurement (drain included), by label. */
  statements: Record<string, number>;
  statementsPerAnswer: number;
  accounting?: Accounting;
}

function diffAccounting(
  variant: Variant,
  m: ClosedMeasurement,
  r0: ReceiverCounts,
  r1: ReceiverCounts,
  v0: WebhooksVerification,
  v1: WebhooksVerification,
): Accounting {
  const d = (k: string) => (v1.deliveries[k] ?? 0) - (v0.deliveries[k] ?? 0);
  const a: Accounting = {
    successes: m.successes,
    unanswered: m.errors,
    received: r1.sends - r0.sends,
    duplicates: r1.duplicates - r0.duplicates,
    signed: r1.signed - r0.signed,
    badSignatures: r1.badSignatures - r0.badSignatures,
    usageRecords: v1.usageSuccess - v0.usageSuccess,
    usageCredits: v1.usageCredits - v0.usageCredits,
    failedUsageRecords: v1.usageFailed - v0.usageFailed,
    ledgerDeducts: v1.ledgerDeducts - v0.ledgerDeducts,
    refunds: v1.ledgerRefunds - v0.ledgerRefunds,
    creditsSpent: v1.creditsSpent - v0.creditsSpent,
    creditsCharged: v1.creditsCharged - v0.creditsCharged,
    delivered: d('delivered'),
    failedDeliveries: d('failed'),
    inProgress: d('in_progress'),
    retried: v1.retried - v0.retried,
    mismatches: v1.mismatches,
    ok: false,
  };
  const within = (x: number) => x >= a.successes && x <= a.successes + a.unanswered;
  a.ok =
    m.drained &&
    m.non2xx === 0 &&
    m.ok2xx === m.successes &&
    a.mismatches === 0 &&
    a.duplicates === 0 &&
    a.failedUsageRecords === 0 &&
    a.refunds === 0 &&
    a.failedDeliveries === 0 &&
    a.inProgress === 0 &&
    a.retried === 0 &&
    within(a.received) &&
    a.usageRecords === a.received &&
    a.usageCredits === a.received &&
    a.ledgerDeducts === a.received &&
    a.creditsSpent === a.received &&
    a.creditsCharged === a.received &&
    a.delivered === a.received &&
    (variant !== 'send-signed' || (a.signed === a.received && a.badSignatures === 0)) &&
    (variant === 'send-signed' || a.signed === 0);
  return a;
}

const fmt = (m: ClosedMeasurement) =>
  `${m.rps} req/s  p50 ${m.latency.p50} ms  p99 ${m.latency.p99} ms  p99.9 ${m.latency.p999} ms  (non-2xx ${m.non2xx}, errors ${m.errors}, ` +
  `cpu lg/srv/pg/rcv/machine ${m.cpu.loadgen}/${m.cpu.server}/${m.cpu.postgres}/${m.receiverCpu}/${m.cpu.machine}%)`;

/**
 * pg_stat counters once every backend of the service's pool has published its own: a backend
 * publishes at the end of a transaction at most once a second (an idle one after 10 s), so wait
 * a second, then have every pool connection run a statement.
 */
async function pgSnapshot(s: Setup): Promise<PgCounters> {
  await sleep(PG_SETTLE_MS);
  await s.server.call('flushStats');
  await sleep(200);
  return s.db.stats();
}

async function measure(s: Setup, variant: Variant, roundNo: number, seconds = settings.seconds): Promise<Run> {
  const r0 = await s.receiver.call<ReceiverCounts>('counts');
  const v0 = isSend(variant) ? await s.server.call<WebhooksVerification>('verify') : undefined;
  const st0 = await s.server.call<Record<string, number>>('statements');
  const busyBefore = busyCount();
  const pg0 = await pgSnapshot(s);
  const m = await runClosedLoad(targetOf(variant, s), {
    connections: settings.connections,
    seconds,
    serverPid: variant === 'receiver' ? undefined : s.server.pid,
    receiverPid: s.receiver.pid,
  });
  const pg = perRequest(pg0, await pgSnapshot(s), m.responses);
  m.otherWork = Math.max(busyBefore, busyCount());
  const r1 = await s.receiver.call<ReceiverCounts>('counts');
  const st1 = await s.server.call<Record<string, number>>('statements');
  const statements: Record<string, number> = {};
  for (const [k, v] of Object.entries(st1)) if (v - (st0[k] ?? 0) > 0) statements[k] = v - (st0[k] ?? 0);
  const statementCount = Object.entries(statements).reduce((x, [k, v]) => x + (k === 'BEGIN … COMMIT' ? 0 : v), 0);
  const run: Run = {
    variant,
    round: roundNo,
    m,
    pg,
    received: r1.requests - r0.requests,
    statements,
    statementsPerAnswer: round(m.responses > 0 ? statementCount / m.responses : 0),
  };
  if (v0) run.accounting = diffAccounting(variant, m, r0, r1, v0, await s.server.call<WebhooksVerification>('verify'));
  const acc = run.accounting;
  log(
    `  ${roundNo === 0 ? 'warm-up' : `round ${roundNo}`} ${variant}: ${fmt(m)}  statements/req ${run.statementsPerAnswer} (pg xacts ${pg.xacts})  received ${run.received}` +
      (acc ? `  accounting ${acc.ok ? 'OK' : `MISMATCH ${JSON.stringify(acc)}`}` : '') +
      (Object.keys(m.failures).length ? `  failures ${JSON.stringify(m.failures)}` : '') +
      (m.otherWork ? `  (other work: ${m.otherWork} processes)` : ''),
  );
  return run;
}

/** One send by hand before any load: the answer's shape, and what the receiver saw. */
async function sanity(s: Setup): Promise<string[]> {
  const notes: string[] = [];
  for (const variant of ['send', 'send-signed'] as const) {
    const t = targetOf(variant, s);
    const r0 = await s.receiver.call<ReceiverCounts>('counts');
    const res = await fetch(`${t.url}${t.path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...t.headers }, body: t.body });
    const body = (await res.json()) as Record<string, unknown>;
    const r1 = await s.receiver.call<ReceiverCounts>('counts');
    const ok = res.status === 200 && body.success === true && body.attempts === 1 && r1.sends - r0.sends === 1;
    const signedOk = variant === 'send' ? r1.signed === r0.signed : r1.signed - r0.signed === 1 && r1.badSignatures === r0.badSignatures;
    if (!ok || !signedOk) throw new Error(`sanity send (${variant}) failed: ${res.status} ${JSON.stringify(body)} receiver ${JSON.stringify(r1)}`);
    notes.push(`${variant} → ${res.status}, statusCode ${body.statusCode}, creditsUsed ${body.creditsUsed}, attempts ${body.attempts}`);
  }
  log(`sanity: ${notes.join('; ')}`);
  return notes;
}

// ---------------------------------------------------------------------------------------------
// Results

interface Stat {
  median: number;
  min: number;
  max: number;
}

interface VariantSummary {
  variant: Variant;
  rounds: number;
  rps: Stat;
  p50: Stat;
  p99: Stat;
  p999: Stat;
  cpu: { loadgen: number; server: number; postgres: number; receiver: number; machine: number };
  statementsPerReq: number;
  /** Statements per answer by label, over the rounds. */
  statementMix: Record<string, number>;
  xactsPerReq: number;
  walSyncsPerReq: number;
  walBytesPerReq: number;
  otherWork: number;
}

interface WebhooksResults {
  date: string;
  git: { commit: string; dirty: boolean };
  durationSeconds: number;
  machine: {
    cpus: number;
    cpuModel: string;
    memoryGb: number;
    node: string;
    postgres: string;
    os: string;
    loadAtStart: number;
    loadAtEnd: number;
    quiet: Quiet;
    /** Most bench:limiter + vitest processes seen at the start or end of any measurement. */
    otherWorkMax: number;
  };
  settings: Settings & { tier: string; grant: number; monthlyAllocation: number | null; rateLimitOverride: number };
  sanity: string[];
  variants: VariantSummary[];
  /** Sums over every send measurement (warm-up included), and the state at the end. */
  total: { sends: number; successes: number; unanswered: number; received: number; ok: boolean; final: WebhooksVerification; receiver: ReceiverCounts };
  runs: Run[];
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};
const stat = (xs: number[]): Stat => ({ median: round(median(xs)), min: round(Math.min(...xs)), max: round(Math.max(...xs)) });

function mix(rs: Run[]): Record<string, number> {
  const sum: Record<string, number> = {};
  let answers = 0;
  for (const r of rs) {
    answers += r.m.responses;
    for (const [k, v] of Object.entries(r.statements)) sum[k] = (sum[k] ?? 0) + v;
  }
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(sum).sort((a, b) => b[1] - a[1])) if (answers > 0 && v / answers >= 0.005) out[k] = round(v / answers);
  return out;
}

function summarize(runs: Run[]): VariantSummary[] {
  return VARIANTS.map((variant) => {
    const rs = runs.filter((r) => r.variant === variant && r.round > 0);
    const mean = (f: (r: Run) => number, digits = 0) => round(rs.reduce((n, r) => n + f(r), 0) / Math.max(1, rs.length), digits);
    return {
      variant,
      rounds: rs.length,
      rps: stat(rs.map((r) => r.m.rps)),
      p50: stat(rs.map((r) => r.m.latency.p50)),
      p99: stat(rs.map((r) => r.m.latency.p99)),
      p999: stat(rs.map((r) => r.m.latency.p999)),
      cpu: {
        loadgen: mean((r) => r.m.cpu.loadgen),
        server: mean((r) => r.m.cpu.server),
        postgres: mean((r) => r.m.cpu.postgres),
        receiver: mean((r) => r.m.receiverCpu),
        machine: mean((r) => r.m.cpu.machine),
      },
      statementsPerReq: mean((r) => r.statementsPerAnswer, 2),
      statementMix: mix(rs),
      xactsPerReq: mean((r) => r.pg.xacts, 2),
      walSyncsPerReq: mean((r) => r.pg.walSyncs, 3),
      walBytesPerReq: mean((r) => r.pg.walBytes, 0),
      otherWork: Math.max(0, ...rs.map((r) => r.m.otherWork ?? 0)),
    };
  });
}

const n = (x: number) => x.toLocaleString('en-US');
const range = (s: Stat, f: (x: number) => string = (x) => String(x)) => (s.min === s.max ? f(s.median) : `${f(s.median)} (${f(s.min)}–${f(s.max)})`);
const mark = (x: { otherWork?: number }) => (x.otherWork ? ' †' : '');

function variantTable(results: WebhooksResults): string[] {
  const lines = [
    `| Variant | rounds | req/s | p50 ms | p99 ms | p99.9 ms | CPU % runner / service / PostgreSQL / receiver / machine (of ${results.machine.cpus * 100}) | SQL statements/req | PG xacts/req | WAL fsyncs/req | WAL bytes/req |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const v of results.variants) {
    const c = v.cpu;
    lines.push(
      `| ${VARIANT_LABEL[v.variant]}${mark(v)} | ${v.rounds} | ${range(v.rps, (x) => n(Math.round(x)))} | ${range(v.p50)} | ${range(v.p99)} | ${range(v.p999)} | ` +
        `${c.loadgen} / ${v.variant === 'receiver' ? '—' : c.server} / ${c.postgres} / ${c.receiver} / ${c.machine} | ${v.variant === 'receiver' ? '—' : v.statementsPerReq} | ${v.xactsPerReq} | ${v.walSyncsPerReq} | ${n(v.walBytesPerReq)} |`,
    );
  }
  return lines;
}

function roundsTable(results: WebhooksResults): string[] {
  const lines = [
    '| Round | variant | req/s | p50 ms | p99 ms | answers (2xx / other / unanswered) | receiver got | accounting |',
    '|---:|---|---:|---:|---:|---|---:|---|',
  ];
  for (const r of results.runs) {
    const a = r.accounting;
    lines.push(
      `| ${r.round === 0 ? 'warm-up' : r.round} | ${r.variant}${mark(r.m)} | ${n(r.m.rps)} | ${r.m.latency.p50} | ${r.m.latency.p99} | ` +
        `${n(r.m.ok2xx)} / ${n(r.m.non2xx)} / ${r.m.errors} | ${n(r.received)} | ${a ? (a.ok ? 'OK' : '**MISMATCH**') : '—'} |`,
    );
  }
  return lines;
}

function accountingTable(results: WebhooksResults): string[] {
  const sends = results.runs.filter((r) => r.accounting);
  const sum = (f: (a: Accounting) => number) => sends.reduce((x, r) => x + f(r.accounting!), 0);
  const t = results.total;
  const f = t.final;
  return [
    '| Check (all send measurements, warm-up included) | value |',
    '|---|---:|',
    `| Successful answers (2xx, \`"success":true\`, \`"attempts":1\`) | ${n(sum((a) => a.successes))} |`,
    `| Requests without an answer at the client | ${n(sum((a) => a.unanswered))} |`,
    `| Sends the receiver got (distinct webhook ids; duplicates ${sum((a) => a.duplicates)}) | ${n(sum((a) => a.received))} |`,
    `| … of them signed / with a bad signature (send-signed only) | ${n(sum((a) => a.signed))} / ${sum((a) => a.badSignatures)} |`,
    `| Successful \`webhook_send\` usage records / their credits | ${n(sum((a) => a.usageRecords))} / ${n(sum((a) => a.usageCredits))} |`,
    `| \`deduct\` ledger rows | ${n(sum((a) => a.ledgerDeducts))} |`,
    `| Credits gone from the balance (monthly_used + grant − purchased) | ${n(sum((a) => a.creditsSpent))} |`,
    `| \`credits_charged\` on delivery records / records \`delivered\` | ${n(sum((a) => a.creditsCharged))} / ${n(sum((a) => a.delivered))} |`,
    `| Refunds, failed usage records, failed or unfinished deliveries, retried deliveries | ${sum((a) => a.refunds)}, ${sum((a) => a.failedUsageRecords)}, ${sum((a) => a.failedDeliveries + a.inProgress)}, ${sum((a) => a.retried)} |`,
    `| Whole run with the 2 sanity sends: successful answers / receiver / usage records / \`deduct\` rows / credits spent | ` +
      `${n(t.successes)} / ${n(t.received)} / ${n(f.usageSuccess)} / ${n(f.ledgerDeducts)} / ${n(f.creditsSpent)} |`,
    `| \`findLedgerMismatches(db)\` at the end | ${f.mismatches} |`,
    `| The one-deployment variants' balance at the end: monthly used / purchased left | ${n(f.hotMonthlyUsed)} of ${n(results.settings.monthlyAllocation ?? 0)} / ${n(f.hotPurchasedBalance)} of ${n(results.settings.grant)} |`,
    `| **Verdict** | ${t.ok ? 'OK: every count equals the successful answers' : '**MISMATCH** (see the rounds table and the JSON file)'} |`,
  ];
}

function bounds(results: WebhooksResults): string[] {
  const v = (x: Variant) => results.variants.find((s) => s.variant === x)!;
  const send = v('send');
  const signed = v('send-signed');
  const quota = v('quota');
  const receiver = v('receiver');
  const spread = v('send-spread');
  const pct = (a: number, b: number) => (b > 0 ? `${Math.round((a / b) * 100)} %` : '—');
  const us = (rps: number) => (rps > 0 ? 1e6 / rps : 0);
  const signCost = us(signed.rps.median) - us(send.rps.median);
  const rpsOf = (variant: Variant, r: number) => results.runs.find((x) => x.variant === variant && x.round === r)?.m.rps ?? 0;
  const rounds = [...new Set(results.runs.filter((x) => x.round > 0).map((x) => x.round))];
  const paired = rounds.map((r) => rpsOf('send-signed', r) - rpsOf('send', r));
  /** CPU per answer, ms, from the CPU shares: (share / 100) cores × 1000 ms / answers per second. */
  const cpuMs = (x: VariantSummary, share: number) => (x.rps.median > 0 ? ((share / 100) * 1000) / x.rps.median : 0).toFixed(2);
  const cpuLine = (x: VariantSummary) =>
    `${SHORT[x.variant]}: service ${cpuMs(x, x.cpu.server)} + PostgreSQL ${cpuMs(x, x.cpu.postgres)} + ` +
    `receiver ${cpuMs(x, x.cpu.receiver)} + runner ${cpuMs(x, x.cpu.loadgen)} ms (machine ${cpuMs(x, x.cpu.machine)} ms)`;
  return [
    `- Proxy send: ${n(Math.round(send.rps.median))} sends/s, ${pct(send.rps.median, quota.rps.median)} of the trivial route's ${n(Math.round(quota.rps.median))} req/s ` +
      `and ${pct(send.rps.median, receiver.rps.median)} of the receiver's own ${n(Math.round(receiver.rps.median))} req/s.`,
    `- Per send at saturation (1/throughput): ${us(send.rps.median).toFixed(0)} µs of the two cores, against ${us(quota.rps.median).toFixed(0)} µs for the quota route ` +
      `and ${us(receiver.rps.median).toFixed(0)} µs for a bare receiver round trip.`,
    `- Signing (\`secret\` set): ${n(Math.round(signed.rps.median))} vs ${n(Math.round(send.rps.median))} sends/s unsigned (medians); ` +
      `signed − unsigned within each round: ${paired.map((d) => `${d >= 0 ? '+' : '−'}${n(Math.abs(d))}`).join(', ')} sends/s; p50 ${signed.p50.median} vs ${send.p50.median} ms. ` +
      (paired.some((d) => d >= 0)
        ? 'Signing was not slower in every round: its cost is below what this run resolves.'
        : `Signing was slower in every round: about ${signCost.toFixed(0)} µs more per send at saturation (medians).`),
    `- One deployment against ${results.settings.spreadDeployments} round-robin: ${n(Math.round(send.rps.median))} vs ${n(Math.round(spread.rps.median))} sends/s ` +
      `(${pct(spread.rps.median, send.rps.median)}), p50 ${send.p50.median} vs ${spread.p50.median} ms, WAL fsyncs per send ${send.walSyncsPerReq} vs ${spread.walSyncsPerReq}.`,
    `- CPU per answer (CPU share ÷ throughput, means of the rounds): ${[send, signed, spread, quota].map(cpuLine).join('; ')}.`,
    `- SQL statements per send, counted in the service: ${Object.entries(send.statementMix).map(([k, c]) => `\`${k}\` ${c}`).join(', ')}; ` +
      `per quota call: ${Object.entries(quota.statementMix).map(([k, c]) => `\`${k}\` ${c}`).join(', ')}. WAL bytes per send ${n(send.walBytesPerReq)}.`,
  ];
}

export function renderWebhooks(results: WebhooksResults): string {
  const m = results.machine;
  const s = results.settings;
  const q = m.quiet;
  const otherWorkText = q.busyAtStart
    ? `**the machine was still busy after waiting ${Math.round(q.waitedSeconds / 60)} minutes: ${q.limiterAtStart} bench:limiter and ${q.vitestAtStart} vitest processes were running when the measurements started**`
    : `waited ${q.waitedSeconds} s for no bench:limiter and no vitest process`;
  const out = [
    `### Results of ${results.date.slice(0, 16).replace('T', ' ')} UTC`,
    '',
    `Code: commit ${results.git.commit}${results.git.dirty ? ' with uncommitted changes in src/ or migrations/' : ''}.`,
    '',
    `Machine: ${m.cpus} CPUs (${m.cpuModel}), shared by the load generator, the service, PostgreSQL and the receiver; ${m.memoryGb} GB, ${m.os}; ` +
      `Node ${m.node}; PostgreSQL ${m.postgres}. Other work: 1-minute load average ${m.loadAtStart} at the start and ${m.loadAtEnd} at the end ` +
      `(the run's own load included); ${otherWorkText}; at most ${m.otherWorkMax} such processes during any measurement. The run took ${results.durationSeconds} s.`,
    '',
    `Settings: ${s.connections} connections, closed loop; ${s.rounds} round${s.rounds === 1 ? '' : 's'} of ${s.seconds} s per variant, the order reversed every other round; ` +
      `warm-up ${s.warmupSeconds} s of sends and ${Math.max(2, Math.round(s.warmupSeconds / 2))} s of each other variant first; pg pool ${s.poolSize}; ` +
      `deployments of tier ${s.tier} (${n(s.monthlyAllocation ?? 0)} monthly credits), each with ${n(s.grant)} purchased credits and \`api_rate_limit\` override ${n(s.rateLimitOverride)}: ` +
      `one takes every request of the other variants, send-spread goes round-robin over ${s.spreadDeployments} more; ` +
      `payload ${s.payloadBytes} bytes of JSON. Sanity sends before the load: ${results.sanity.join('; ')}. ` +
      'Cells are the median of the rounds with (min–max); CPU and PostgreSQL columns are means over the rounds.',
    '',
    '#### Throughput and latency',
    '',
    ...variantTable(results),
    '',
    ...bounds(results),
    '',
    '#### Accounting',
    '',
    ...accountingTable(results),
    '',
    '#### Every measurement',
    '',
    ...roundsTable(results),
    '',
  ];
  if (results.runs.some((r) => r.m.otherWork)) out.push('† a bench:limiter or vitest process was running at the start or end of the measurement.', '');
  return out.join('\n');
}

const INTRO = `How many webhook sends a second does the webhook proxy ([webhooks.md](webhooks.md), \`POST ${SEND_PATH}\`) deliver to a receiver
that answers at once, and what bounds it? \`npm run bench:webhooks\` (\`bench/webhooks.ts\`, with
\`bench/lib/webhooks-server.ts\`, \`bench/lib/webhooks-receiver.ts\` and \`bench/lib/webhooks-load.ts\`)
answers it. Each run writes the part between the \`bench:webhooks\` markers again; the text around
them is written by hand.

\`\`\`sh
npm run bench:webhooks                  # about 5 minutes once the machine is quiet
npm run bench:webhooks -- --smoke       # 3 s measurements, one round; prints, writes no doc
npm run bench:webhooks -- --no-wait     # do not wait for bench:limiter / test suites to finish
npx tsx bench/webhooks.ts --render=FILE # re-render the section from a results file of an earlier run
\`\`\`

### Method

- **Four processes on two shared cores.** The runner (autocannon), the service, PostgreSQL and the
  receiver. The receiver (\`node:http\` on 127.0.0.1) reads the body and answers \`200 ok\` at once,
  in its own process so it shares no event loop with the load generator. It counts the sends it got
  (by \`x-service-webhook-id\`, duplicates too) and checks the \`x-service-signature\` HMAC of every
  signed one.
- **The service** starts through the production path (\`serve()\`, \`NODE_ENV=production\`, no
  Redis, pg pool 20) on a new PostgreSQL database, dropped at the end, with
  \`WEBHOOK_ALLOW_PRIVATE_NETWORKS=true\` (without it the SSRF guard refuses 127.0.0.1). One
  deployment takes every request of the one-deployment variants. It is made through the service
  layer: tier growth (20,000 monthly credits, so the monthly bucket runs dry partway through the
  run and purchased credits pay from then on), a purchased grant large enough for every send, and
  an \`api_rate_limit\` override of 10⁹ (growth allows 10,000 requests a minute; the in-process
  limiter still runs on every request, it just never refuses). Requests carry
  \`X-Deployment-ID\` / \`X-Deployment-Secret\`. A send counts as a success only when its answer
  is 2xx with \`"success":true\` and \`"attempts":1\`.
- **Variants**, each a closed loop at 50 connections for 10 s, in 3 rounds (order reversed every
  other round), after one warm-up:
  - *receiver direct*: autocannon POSTs the payload straight to the receiver: the ceiling the
    receiver, the loopback and the load generator allow on this machine;
  - *quota*: \`GET ${QUOTA_PATH}\` with the same credentials: deployment authentication and one
    balance read, the service's cost for a trivial route;
  - *send*: \`{"url": "http://127.0.0.1:<port>/hook", "payload": {…}}\` (a ~110-byte event, no
    idempotency key, so every request is a new send: one attempt, since the receiver succeeds);
  - *send, signed*: the same with \`"secret": "whsec_…"\` (\`x-service-signature\` and the Standard
    Webhooks \`webhook-signature\`: two HMAC-SHA256 per send);
  - *send, spread*: unsigned sends going round-robin over 50 other deployments (same tier, grant
    and override), to tell the cost of a send from the cost of one deployment's balance row, which
    every send of the other variants locks.
- **Ending a measurement without losing answers**: as in \`npm run bench\`, every client is capped
  at the requests it has already sent when the window closes, so sends in flight finish and are
  counted. Throughput counts answers completed inside the window; latency is each answer's own timer.
- **Accounting check** around every send measurement, through the service process: the sends the
  receiver got, the successful \`webhook_send\` usage records and their credits, the \`deduct\`
  ledger rows, the credits gone from the balance and \`credits_charged\` on the delivery records
  must all equal the successful answers (at most the unanswered requests more), with no refund, no
  failed or retried delivery, no duplicate at the receiver, every signature valid, and
  \`findLedgerMismatches(db)\` (\`src/modules/credits/ledger.ts\`) empty.
- **SQL per answer.** The service process counts the statements it runs (by wrapping
  \`app.deps.db\`), so "SQL statements/req" is exact. The pg_stat counters (transactions of the
  bench database, WAL fsyncs and bytes, cluster-wide) are read after every pool connection has run
  a statement a second after the load: a backend publishes its counters at most once a second, and
  an idle one only after 10 s, which otherwise moves one measurement's transactions into the next.
- **Machine**: 2 cores shared by all four processes; CPU columns give each one's share (100 = one
  core; "machine" is the whole box, other work included). Other sessions run benchmarks and test
  suites here: the run first waits, up to 25 minutes, until no \`bench:limiter\` and no vitest
  process runs; a measurement during which one ran anyway is marked †.
`;

/** Replace the bench:webhooks section of docs/benchmarks.md; appended at the end, with heading and method, when missing. */
export function updateWebhooksDoc(results: WebhooksResults, doc = DOC): string {
  const section = `${START}\n${renderWebhooks(results)}\n${END}`;
  // Read right before writing: other benchmarks rewrite their own sections of this file.
  const current = existsSync(doc) ? readFileSync(doc, 'utf8') : '# Benchmarks\n';
  const start = current.indexOf(START);
  const end = current.indexOf(END);
  const next =
    start >= 0 && end > start
      ? current.slice(0, start) + section + current.slice(end + END.length)
      : `${current.trimEnd()}\n\n${HEADING}\n\n${INTRO}\n${section}\n`;
  writeFileSync(doc, next);
  return doc;
}

// ---------------------------------------------------------------------------------------------

function serverEnv(db: BenchDatabase, dataDir: string): NodeJS.ProcessEnv {
  return productionServerEnv({ databaseUrl: db.url, poolSize: settings.poolSize, dataDir, extra: { WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' } });
}

async function main(): Promise<void> {
  const quiet = await waitQuiet(smoke || flag('no-wait'));
  const started = Date.now();
  const loadAtStart = os.loadavg()[0]!;
  settings.payloadBytes = Buffer.byteLength(JSON.stringify(PAYLOAD));
  log(`creditgate webhooks bench: ${os.availableParallelism()} CPUs, node ${process.version}, ${settings.connections} connections, ${settings.rounds} × ${settings.seconds} s`);

  const db = await createBenchDatabase();
  const dataDir = mkdtempSync(join(os.tmpdir(), 'creditgate-bench-webhooks-'));
  const children: ServerProcess[] = [];
  const cleanup = async () => {
    await Promise.allSettled(children.map((c) => c.stop()));
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    log('interrupted: stopping the children and dropping the bench database');
    void cleanup().finally(() => process.exit(130));
  });
  const runs: Run[] = [];
  let results: WebhooksResults;
  try {
    const receiver = await spawnServer('lib/webhooks-receiver.ts', [SIGNING_SECRET], { PATH: process.env.PATH, HOME: process.env.HOME });
    children.push(receiver);
    const server = await spawnServer('lib/webhooks-server.ts', [], serverEnv(db, dataDir));
    children.push(server);
    const seed = await server.call<WebhooksSeed>('seed', { spread: settings.spreadDeployments });
    log(`receiver ${receiver.url} (pid ${receiver.pid}); service ${server.url} (pid ${server.pid}); hot deployment ${seed.hot.deploymentId}`);
    const setup: Setup = { server, receiver, seed, db };
    const sanityNotes = await sanity(setup);

    // A fresh server needs seconds to reach its pace (JIT, pool connections, the outbound pool).
    runs.push(await measure(setup, 'send', 0, settings.warmupSeconds));
    const shortWarm = Math.max(2, Math.round(settings.warmupSeconds / 2));
    for (const variant of ['send-signed', 'send-spread', 'quota', 'receiver'] as Variant[]) runs.push(await measure(setup, variant, 0, shortWarm));

    for (let r = 1; r <= settings.rounds; r++) {
      const order = r % 2 === 1 ? VARIANTS : [...VARIANTS].reverse();
      for (const variant of order) runs.push(await measure(setup, variant, r));
    }

    await pgSnapshot(setup); // publishes every backend's pg_stat counters (HOT updates below)
    const final = await server.call<WebhooksVerification>('verify');
    const receiverCounts = await receiver.call<ReceiverCounts>('counts');
    const sendRuns = runs.filter((r) => r.accounting);
    const successes = sendRuns.reduce((x, r) => x + r.accounting!.successes, 0) + 2; // + the two sanity sends
    const unanswered = sendRuns.reduce((x, r) => x + r.accounting!.unanswered, 0);
    const totalOk =
      sendRuns.every((r) => r.accounting!.ok) &&
      final.mismatches === 0 &&
      receiverCounts.duplicates === 0 &&
      receiverCounts.badSignatures === 0 &&
      final.usageSuccess === receiverCounts.sends &&
      final.ledgerDeducts === receiverCounts.sends &&
      final.creditsSpent === receiverCounts.sends &&
      receiverCounts.sends >= successes &&
      receiverCounts.sends <= successes + unanswered;
    log(
      `final: ${totalOk ? 'OK' : 'MISMATCH'}: ${successes} successful sends, ${receiverCounts.sends} received, ${final.usageSuccess} usage records, ` +
        `${final.ledgerDeducts} deductions, ${final.creditsSpent} credits spent, ${final.mismatches} ledger mismatches; ` +
        `updates (HOT) ${Object.entries(final.updates ?? {}).map(([t, u]) => `${t} ${u.updates} (${u.hot})`).join(', ')}`,
    );

    results = {
      date: new Date().toISOString(),
      git: gitState(),
      durationSeconds: Math.round((Date.now() - started) / 1000),
      machine: {
        cpus: os.availableParallelism(),
        cpuModel: os.cpus()[0]?.model ?? 'unknown',
        memoryGb: Math.round(os.totalmem() / 2 ** 30),
        node: process.version,
        postgres: db.version,
        os: `${os.type()} ${os.release()}`,
        loadAtStart: Number(loadAtStart.toFixed(2)),
        loadAtEnd: Number(os.loadavg()[0]!.toFixed(2)),
        quiet,
        otherWorkMax: Math.max(0, ...runs.map((r) => r.m.otherWork ?? 0)),
      },
      settings: { ...settings, tier: seed.tier, grant: seed.grant, monthlyAllocation: seed.monthlyAllocation, rateLimitOverride: seed.rateLimitOverride },
      sanity: sanityNotes,
      variants: summarize(runs),
      total: { sends: sendRuns.length, successes, unanswered, received: receiverCounts.sends, ok: totalOk, final, receiver: receiverCounts },
      runs,
    };
  } finally {
    await cleanup();
  }
  const file = join(os.tmpdir(), `creditgate-bench-webhooks-${smoke ? 'smoke-' : ''}${Date.now()}.json`);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`results: ${file} (${results.durationSeconds} s)`);
  if (smoke) log(`\n${renderWebhooks(results)}`);
  else log(`docs: ${updateWebhooksDoc(results)}`);
  if (!results.total.ok) process.exitCode = 1;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const render = argv.find((a) => a.startsWith('--render='));
  if (render) log(`docs: ${updateWebhooksDoc(JSON.parse(readFileSync(render.slice('--render='.length), 'utf8')) as WebhooksResults)}`);
  else await main();
}
