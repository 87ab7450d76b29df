import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { McpMeasurement, Variant } from './mcp-load.js';
import type { McpSeed, McpVerification } from './mcp-server.js';
import type { PgWaits } from './pg-waits.js';
import type { PgPerRequest } from './postgres.js';

/** Results of bench/mcp.ts, and the docs/benchmarks.md section rendered from them. */
export interface McpAccounting {
  /** Calls whose usage must be on the books: the successful metered calls (0 for the unmetered tool). */
  expected: number;
  usageRecords: number;
  usageFailed: number;
  usageCredits: number;
  ledgerDeducts: number;
  refunds: number;
  creditsSpent: number;
  /** After the run: credit_balances.reserved and invocations still `reserved`. */
  reservedCredits: number;
  openReservations: number;
  mismatches: number;
  ok: boolean;
}

export interface McpRun {
  round: number;
  m: McpMeasurement;
  pg: PgPerRequest;
  /** SQL statements the service ran per call, by label, and in all (BEGIN … COMMIT not counted). */
  statementMix: Record<string, number>;
  statementsPerCall: number;
  /** The service's PostgreSQL backends by state and wait event (mean per sample). */
  pgWaits: PgWaits;
  accounting: McpAccounting;
  /** vitest / other bench processes seen at the start or end of the measurement. */
  otherWork: number;
}

export interface McpResults {
  date: string;
  git: { commit: string; dirty: boolean };
  durationSeconds: number;
  machine: { cpus: number; cpuModel: string; node: string; postgres: string; os: string; loadAtStart: number; loadAtEnd: number; waitedSeconds: number; busyAtStart: number };
  settings: { seconds: number; rounds: number; callers: number[]; warmupSeconds: number; poolSize: number; sdk: string };
  seed: Omit<McpSeed, 'apiKey' | 'userId' | 'organizationId' | 'deploymentId'>;
  runs: McpRun[];
  final: McpVerification;
  ok: boolean;
}

export const VARIANT_LABEL: Record<Variant, string> = {
  unmetered: '(a) unmetered tool',
  stdio: '(b) stdio, reserve (default)',
  'stdio-noreserve': '(c) stdio, `reserve: false`',
  service: '(d) service mode',
};

const n = (x: number) => x.toLocaleString('en-US');
const fixed = (x: number, d = 2) => x.toFixed(d);
const mark = (r: McpRun) => (r.otherWork ? ' †' : '');
const sign = (x: number) => `${x >= 0 ? '+' : '−'}${fixed(Math.abs(x))}`;

function baselineOf(results: McpResults, r: McpRun): McpRun | undefined {
  return results.runs.find((b) => b.round === r.round && b.m.variant === 'unmetered' && b.m.callers === r.m.callers);
}

/** CPU ms per call from a CPU share (100 = one core busy the whole window). */
const cpuMs = (share: number, cps: number) => (cps > 0 ? fixed((share * 10) / cps, 3) : '—');

export function renderMcp(results: McpResults): string {
  const runs = results.runs.filter((r) => r.round > 0);
  const multi = results.settings.rounds > 1;
  const label = (r: McpRun) => `${VARIANT_LABEL[r.m.variant]}${multi ? `, round ${r.round}` : ''}${mark(r)}`;
  const m = results.machine;
  const s = results.settings;
  const seed = results.seed;
  const lines = [
    `### Results of ${results.date.slice(0, 16).replace('T', ' ')} UTC`,
    '',
    `Code: commit ${results.git.commit}${results.git.dirty ? ' with uncommitted changes in src/, migrations/ or packages/client/src/' : ''}; ${s.sdk}.`,
    '',
    `Machine: ${m.cpus} CPUs (${m.cpuModel}) shared by the runner (MCP client, MCP server and middleware), the service and PostgreSQL; ${m.os}; Node ${m.node}; ` +
      `PostgreSQL ${m.postgres}. 1-minute load average ${m.loadAtStart} at the start and ${m.loadAtEnd} at the end (the run's own included); ` +
      (m.busyAtStart
        ? `**${m.busyAtStart} vitest or benchmark processes were still running when the measurements started** (after ${m.waitedSeconds} s of waiting)`
        : `waited ${m.waitedSeconds} s for no vitest and no other benchmark process`) +
      `. The run took ${results.durationSeconds} s.`,
    '',
    `Settings: ${s.rounds} round${multi ? 's' : ''} of ${s.seconds} s per variant and caller count (${s.callers.join(' and ')} concurrent callers on one MCP session, closed loop), ` +
      `after ${s.warmupSeconds} s of warm-up per variant; pg pool ${s.poolSize}; tool \`${seed.tool}\` (action \`${seed.action}\`, ${seed.cost} credit${seed.cost === 1 ? '' : 's'}); ` +
      `deployment of tier ${seed.tier} (${n(seed.monthlyAllocation ?? 0)} monthly credits) with ${n(seed.grant)} purchased credits and \`api_rate_limit\` override ${n(seed.rateLimitOverride)}.`,
    '',
    '#### Throughput and latency',
    '',
    '| Variant | callers | calls/s | p50 ms | p90 ms | p99 ms | added p50 / p90 / p99 ms (vs unmetered) | HTTP requests/call |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of runs) {
    const b = baselineOf(results, r);
    const l = r.m.latency;
    const added = r.m.variant === 'unmetered' || !b ? '—' : `${sign(l.p50 - b.m.latency.p50)} / ${sign(l.p90 - b.m.latency.p90)} / ${sign(l.p99 - b.m.latency.p99)}`;
    lines.push(`| ${label(r)} | ${r.m.callers} | ${n(r.m.callsPerSecond)} | ${l.p50} | ${l.p90} | ${l.p99} | ${added} | ${r.m.requestsPerCall} |`);
  }
  lines.push(
    '',
    '#### What a call costs',
    '',
    `| Variant | callers | HTTP requests by route (total) | SQL statements/call | PG xacts/call | WAL fsyncs/call | CPU % runner / service / PostgreSQL / machine (of ${m.cpus * 100}) | CPU ms/call runner / service / PostgreSQL |`,
    '|---|---:|---|---:|---:|---:|---:|---:|',
  );
  for (const r of runs) {
    const c = r.m.cpu;
    const cps = r.m.callsPerSecond;
    const routes = Object.entries(r.m.requests).map(([k, v]) => `${k} ${n(v)}`).join(', ') || '—';
    lines.push(
      `| ${label(r)} | ${r.m.callers} | ${routes} | ${r.statementsPerCall} | ${r.pg.xacts} | ${r.pg.walSyncs} | ${c.loadgen} / ${c.server} / ${c.postgres} / ${c.machine} | ` +
        `${cpuMs(c.loadgen, cps)} / ${cpuMs(c.server, cps)} / ${cpuMs(c.postgres, cps)} |`,
    );
  }
  lines.push('', 'SQL statements per call in the service (≥ 0.01; `tx:` inside a transaction):', '');
  for (const r of runs.filter((x) => x.m.variant !== 'unmetered' && x.m.callers === s.callers[s.callers.length - 1])) {
    // Labels are statement names or the first characters of the text (see bench/lib/mcp-server.ts).
    const mix = Object.entries(r.statementMix).map(([k, v]) => `\`${k}\` ${v}`).join(', ');
    lines.push(`- ${label(r)}, ${r.m.callers} callers: ${mix || '—'}.`);
  }
  lines.push(
    '',
    'The service\'s PostgreSQL backends that were not idle, by state and wait event (mean number per sample of `pg_stat_activity`, every 20 ms; ' +
      '`idle in transaction: Client/ClientRead` = a transaction waiting for the service\'s next statement):',
    '',
  );
  for (const r of runs.filter((x) => x.m.variant !== 'unmetered')) {
    const w = Object.entries(r.pgWaits.backends).map(([k, v]) => `${k} ${v}`).join(', ');
    lines.push(`- ${label(r)}, ${r.m.callers} caller${r.m.callers === 1 ? '' : 's'} (${r.pgWaits.samples} samples): ${w || '—'}.`);
  }
  lines.push(
    '',
    '#### Accounting',
    '',
    '| Variant | callers | calls (all / successful / refused / threw) | usage records (failed) | credits on them | `deduct` rows | credits gone from the balance | open reservations after (credits held) | ledger mismatches | check |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  );
  for (const r of results.runs) {
    const a = r.accounting;
    lines.push(
      `| ${r.round === 0 ? `warm-up: ${VARIANT_LABEL[r.m.variant]}` : label(r)} | ${r.m.callers} | ${n(r.m.calls)} / ${n(r.m.successes)} / ${r.m.refused + r.m.unrecorded} / ${r.m.thrown} | ` +
        `${n(a.usageRecords)} (${a.usageFailed}) | ${n(a.usageCredits)} | ${n(a.ledgerDeducts)} | ${n(a.creditsSpent)} | ${a.openReservations} (${a.reservedCredits}) | ${a.mismatches} | ${a.ok ? 'OK' : '**MISMATCH**'} |`,
    );
  }
  const f = results.final;
  lines.push(
    '',
    `Whole run: ${n(f.usageSuccess)} usage records, ${n(f.ledgerDeducts)} \`deduct\` rows, ${n(f.creditsSpent)} credits gone, ${f.ledgerRefunds} refunds, ` +
      `invocations ${Object.entries(f.invocations).map(([k, v]) => `${k} ${n(v)}`).join(', ') || 'none'}, ${f.mismatches} ledger mismatches: ` +
      `${results.ok ? '**OK**, every count equals the successful metered calls × cost' : '**MISMATCH** (see the JSON file)'}.`,
    '',
  );
  if (results.runs.some((r) => r.otherWork)) lines.push('† a vitest or other benchmark process was running at the start or end of the measurement.', '');
  return lines.join('\n');
}

const START = '<!-- bench:mcp:start -->';
const END = '<!-- bench:mcp:end -->';
const HEADING = '## MCP metering overhead';
const INTRO = `What does metering cost an MCP server: how much latency does \`withMetering\` add to a tool call,
and how many calls a second can one server process meter? \`npm run bench:mcp\` (\`bench/mcp.ts\`,
with \`bench/lib/mcp-server.ts\`, \`bench/lib/mcp-load.ts\` and \`bench/lib/mcp-report.ts\`) answers
it. Each run writes the part between the \`bench:mcp\` markers again; the text after them is written by hand.

\`\`\`sh
npm run bench:mcp                  # about 2–3 minutes once the machine is quiet
npm run bench:mcp -- --smoke       # 3 s measurements; prints, writes no doc
npm run bench:mcp -- --no-wait     # do not wait for test suites or other benchmarks to finish
npm run bench:mcp -- --rounds=3    # repeat every measurement (order reversed every other round)
npx tsx bench/mcp.ts --render=FILE # re-render the section from a results file of an earlier run
\`\`\`

### Method

- **Three parties on two shared cores.** The service runs in its own process through the production
  path (\`serve()\`, \`NODE_ENV=production\`, no Redis, pg pool 20) on a new PostgreSQL database,
  dropped at the end. The runner process holds the MCP side: a real \`McpServer\`
  (\`@modelcontextprotocol/sdk\`) with one tool that answers at once, a real MCP \`Client\` on the
  other end of an \`InMemoryTransport\` pair (one session), and the middleware imported from
  \`packages/client/src\` (not as \`@creditgate/client/mcp\`: under tsx that name follows the root
  tsconfig's \`paths\` to the source when the working directory is inside the repository, and resolves
  to \`packages/client/dist\` from outside it; the source is what the commit holds). The MCP client
  and server must share a process to use the in-memory transport; the runner does nothing else
  during a measurement, so a second child would only move the same work elsewhere. Its CPU
  share is reported: it is the MCP server's own cost.
- **Seed** through the service layer: a user, an organization on growth that the user owns, a
  purchased grant larger than the run can spend and an \`api_rate_limit\` override of 10⁹, and an
  organization API key with scopes read and write.
- **Variants**, each a closed loop of 1 and of 16 concurrent callers (\`client.callTool\`) on one
  session for 10 s, each measurement with a new \`McpServer\`, \`Client\` and Meter:
  (a) the tool unmetered (the baseline); (b) stdio mode with the defaults (API key; check with a
  reservation, then record); (c) stdio mode with \`reserve: false\` (the plain check, cached by the
  client, then record); (d) service mode (service key; the user id comes with every request as
  \`authInfo.extra.userId\`, as an HTTP transport with OAuth gives it; the deployment is resolved once
  per session, then check with a reservation and record). Stdio mode's file outbox is in a temporary
  directory; nothing is queued in it unless the service cannot be reached.
- **Counts.** Throughput counts calls completed inside the window; latency is each call's time from
  \`callTool\` to its result. When the window closes, calls in flight finish and are counted for the
  accounting. HTTP requests are counted by the client's \`fetch\` option, SQL statements inside the
  service (wrapping \`app.deps.db\`), transactions and WAL fsyncs from pg_stat (after every pool
  connection has published its counters), CPU from /proc (100 = one core).
- **Accounting check** after every measurement: successful usage records, their credits, \`deduct\`
  ledger rows and the credits gone from the balance must equal the successful metered calls (× the
  tool's cost), with no refused or failed call, no refund, no reservation left open (no invocation
  \`reserved\`, \`credit_balances.reserved\` 0), nothing the middleware logged, and
  \`findLedgerMismatches(db)\` empty.
- **Machine**: other sessions run test suites and benchmarks here; the run first waits (up to 25
  minutes) until no vitest and no other benchmark process runs; a measurement during which one ran
  anyway is marked †.
`;

/** Replace the bench:mcp section of docs/benchmarks.md; appended at the end, with heading and method, when missing. */
export function updateMcpDoc(results: McpResults, doc: string): string {
  const section = `${START}\n${renderMcp(results)}\n${END}`;
  // Read right before writing: other benchmarks rewrite their own sections of this file.
  const current = existsSync(doc) ? readFileSync(doc, 'utf8') : '# Benchmarks\n';
  const start = current.indexOf(START);
  const end = current.indexOf(END);
  const next =
    start >= 0 && end > start ? current.slice(0, start) + section + current.slice(end + END.length) : `${current.trimEnd()}\n\n${HEADING}\n\n${INTRO}\n${section}\n`;
  writeFileSync(doc, next);
  return doc;
}
