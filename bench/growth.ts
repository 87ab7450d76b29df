/**
 * Analytics against history (docs/usage-analytics.md "Rollups", docs/benchmarks.md "Growth"): one
 * organization with N usage records over 365 days, then the console's two summaries (365 days by tool;
 * 30 days by day split by tool) timed through the API, record-usage throughput before and after the
 * seeding, and the rollups' backfill (the usage-rollup-backfill worker's steps) timed over the seeded
 * records, seeded uncounted, with its longest step (the longest any record's row lock is held by it).
 *
 *   npx tsx bench/growth.ts [records=10000000] [postgres|pglite] [summaries=30]
 *
 * The records are inserted in chunks of INSERT … SELECT generate_series (12 tools, 200 end users, one in
 * fifty refused, spread evenly over the year), uncounted, as migration 0025 leaves the records it finds:
 * the backfill then counts them, and the rollup triggers count the engine's batches after. With
 * GROWTH_BACKFILL=0 they are seeded counted (the triggers count each chunk). The balance and the ledger
 * are not built (the seeding is not money). PostgreSQL: a fresh database on 127.0.0.1:5432 (BENCH_POSTGRES_URL), dropped
 * after. PGlite: a fresh DATA_DIR in the system's temp directory, removed after.
 *
 * Partitions (docs/usage-analytics.md, "Partitions"): by default the installation is partitioned from
 * a year ago, so the records land in monthly partitions, and at the end the retention drops the oldest
 * month, timed. GROWTH_LAYOUT=upgrade instead seeds an unpartitioned table (as before the partitions)
 * and times its conversion: the whole of it, and the exclusive lock.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../src/app.js';
import { DAY, ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { type Database, openDatabase } from '../src/db/client.js';
import { applyMigrations, MIGRATIONS_FOLDER } from '../src/db/migrate.js';
import { backfillRollupsStep, deleteExpiredUsage, ensureUsagePartitions, monthStart, usagePartitions } from '../src/modules/credits/index.js';
import { createBenchDatabase } from './lib/postgres.js';
import { Samples } from './lib/stats.js';

const RECORDS = Number(process.argv[2] ?? 10_000_000);
const KIND = (process.argv[3] ?? 'postgres') as 'postgres' | 'pglite';
const SUMMARIES = Number(process.argv[4] ?? 30);
const CHUNK = 250_000;
const THROUGHPUT_SECONDS = 5;
const CONCURRENCY = 64;
const LAYOUT = (process.env.GROWTH_LAYOUT ?? 'partitioned') as 'partitioned' | 'upgrade';

const ms = (t0: number) => performance.now() - t0;

async function main(): Promise<void> {
  const dataDir = KIND === 'pglite' ? mkdtempSync(join(tmpdir(), 'cg-growth-')) : undefined;
  const pgBench = KIND === 'postgres' ? await createBenchDatabase() : undefined;
  const sharedBuffersMb = process.env.PGLITE_SHARED_BUFFERS_MB ? Number(process.env.PGLITE_SHARED_BUFFERS_MB) : undefined;
  const db: Database = await openDatabase({ databaseUrl: pgBench?.url, dataDir: dataDir ?? '', ...(sharedBuffersMb ? { sharedBuffersMb } : {}) });
  await applyMigrations(db, MIGRATIONS_FOLDER);
  const now = new Date();
  if (LAYOUT === 'partitioned') {
    // Partitioned since a year ago: a partition per month from then on (the worker's passes, month by month).
    for (let m = -13; m <= 0; m++) await ensureUsagePartitions(db, monthStart(now, m));
  }
  const clock = new ManualClock(now.toISOString());
  const config = testConfig({ ...(dataDir ? { dataDir } : {}), logLevel: 'warn' });
  const app = await buildApp({ config, db, clock });
  try {
    const call = async (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) => {
      const res = await app.inject({ method: method as 'POST', url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });
      if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
      return res.json();
    };
    const signup = await call('POST', '/auth/signup', { email: `growth-${Date.now()}@example.com`, password: 'violet-harbor-lantern-42', full_name: 'Growth' });
    const bearer = { authorization: `Bearer ${signup.data.access_token}` };
    const org = (await call('POST', '/organizations', { name: 'Growth Org', slug: `growth-${Date.now()}` }, bearer)).data;
    const admin = { 'x-admin-key': config.adminApiKey };
    await call('PUT', `/api/v1/admin/deployments/${org.deployment.id}`, { tier: 'enterprise' }, admin);
    await call('POST', `/api/v1/admin/deployments/${org.deployment.id}/credits`, { amount: 1_000_000_000, reason: 'growth benchmark' }, admin);
    const service = { 'x-mcp-service-key': config.mcpServiceKey };

    /** Closed-loop record-usage for a few seconds (the service's batcher and triggers, in this process). */
    let invocation = 0;
    const throughput = async (): Promise<number> => {
      const until = performance.now() + THROUGHPUT_SECONDS * 1000;
      let done = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (performance.now() < until) {
            const n = invocation++;
            await call('POST', '/api/v1/mcp/usage', { deployment_id: org.deployment.id, tool_name: `tool_${String(n % 12).padStart(2, '0')}`, mcp_user_id: `user-${n % 200}`, invocation_id: `growth-${n}` }, service);
            done++;
          }
        }),
      );
      return done / THROUGHPUT_SECONDS;
    };
    await throughput(); // warm-up
    const emptyRate = await throughput();

    const timeBackfill = process.env.GROWTH_BACKFILL !== '0';
    const seedStart = performance.now();
    const from = now.getTime() - 365 * DAY;
    const step = (365 * DAY) / RECORDS;
    for (let start = 0; start < RECORDS; start += CHUNK) {
      const count = Math.min(CHUNK, RECORDS - start);
      await db.query(
        `INSERT INTO usage_records (organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, success, error, "timestamp", rolled_up)
         SELECT $1, $2, 'platform_basic', CASE WHEN i % 50 = 0 THEN 0 ELSE 1 + i % 3 END, 'tool_' || lpad((i % 12)::text, 2, '0'),
                'user-' || (i % 200), i % 50 <> 0, CASE WHEN i % 50 = 0 THEN 'insufficient_credits' END,
                to_timestamp(($3::float8 + i * $4::float8) / 1000), $7::boolean
         FROM generate_series($5::bigint, $5::bigint + $6::bigint - 1) AS i`,
        [org.id, org.deployment.id, from, step, start, count, !timeBackfill],
      );
      if ((start / CHUNK) % 8 === 7) console.error(`  seeded ${(start + count).toLocaleString('en')} (${(ms(seedStart) / 1000).toFixed(0)} s)`);
    }
    const seedSeconds = ms(seedStart) / 1000;
    let conversion: { seconds: number; locked_ms: number } | undefined;
    if (LAYOUT === 'upgrade') {
      const t0 = performance.now();
      const done = await ensureUsagePartitions(db, now);
      conversion = { seconds: Number((ms(t0) / 1000).toFixed(1)), locked_ms: Number(done.converted!.lockedMs.toFixed(1)) };
    }
    // The rollups' backfill (the usage-rollup-backfill worker's steps) over the seeded records, timed.
    // The records were seeded uncounted (`rolled_up` false, which the triggers skip), each written once,
    // as migration 0025 leaves the records it finds (a column default, no rewrite); the backfill then
    // counts them all before the summaries are read. GROWTH_BACKFILL=0 seeds them counted and leaves
    // it out (some 80 µs a record: a quarter of an hour at 10 million).
    if (timeBackfill) await db.query('UPDATE usage_rollup_backfill SET done_at = NULL, relation = NULL, next_page = 0, started_at = now() WHERE id = 1');
    const backfillStart = performance.now();
    let longestStepMs = 0;
    let backfillSteps = 0;
    for (let more = timeBackfill ? 1 : 0; more > 0; backfillSteps++) {
      const t0 = performance.now();
      more = await backfillRollupsStep(db, now);
      longestStepMs = Math.max(longestStepMs, ms(t0));
      if (backfillSteps % 100 === 99) console.error(`  backfill: ${backfillSteps + 1} steps (${(ms(backfillStart) / 1000).toFixed(0)} s)`);
    }
    const backfillSeconds = ms(backfillStart) / 1000;

    // The rollups count every record: the backfill's result checked against the records themselves.
    const counted = (await db.query<{ rolled: string; records: string }>(
      `SELECT (SELECT coalesce(sum(calls), 0) FROM usage_rollup_hours WHERE organization_id = $1)::text AS rolled,
              (SELECT count(*) FROM usage_records WHERE organization_id = $1)::text AS records`,
      [org.id],
    ))[0]!;
    if (counted.rolled !== counted.records) throw new Error(`rollups count ${counted.rolled} calls, the records are ${counted.records}`);
    const partitions = (await usagePartitions(db)).length;
    if (KIND === 'postgres') await db.query('ANALYZE usage_records; ANALYZE usage_rollup_hours; ANALYZE usage_rollup_days');
    const rollupRows = (await db.query<{ h: number; d: number }>(
      'SELECT (SELECT count(*) FROM usage_rollup_hours WHERE organization_id = $1)::int AS h, (SELECT count(*) FROM usage_rollup_days WHERE organization_id = $1)::int AS d',
      [org.id],
    ))[0]!;

    const summaries: Record<string, ReturnType<Samples['summary']>> = {};
    const fromYear = new Date(now.getTime() - 365 * DAY).toISOString();
    for (const [name, q] of [
      ['365 days by tool', `group_by=tool&from=${encodeURIComponent(fromYear)}`],
      ['30 days by day split by tool', 'group_by=day&split_by=tool'],
      ['365 days by end user', `group_by=mcp_user&from=${encodeURIComponent(fromYear)}`],
    ] as const) {
      const samples = new Samples();
      for (let i = 0; i < SUMMARIES + 2; i++) {
        const t0 = performance.now();
        const answer = await call('GET', `/organizations/${org.id}/usage/summary?${q}`, undefined, bearer);
        if (i >= 2) samples.push(ms(t0));
        if (i === 0 && answer.data.totals.calls === 0) throw new Error(`${name}: no calls counted`);
      }
      summaries[name] = samples.summary();
    }
    await throughput(); // warm-up
    const fullRate = await throughput();

    // The retention's pass that drops the oldest whole month (partitioned layout): one DROP, no row by row.
    let dropOldestMonth: { ms: number; partitions: number } | undefined;
    if (LAYOUT === 'partitioned') {
      const oldest = (await usagePartitions(db)).find((p) => p.from !== null)!;
      const retentionDays = Math.floor((now.getTime() - oldest.to!.getTime()) / DAY);
      const t0 = performance.now();
      const dropped = await deleteExpiredUsage(db, now, retentionDays, 1);
      dropOldestMonth = { ms: Number(ms(t0).toFixed(1)), partitions: dropped };
    }

    const report = {
      database: KIND,
      records: RECORDS,
      seed_seconds: Number(seedSeconds.toFixed(1)),
      rollup_rows: rollupRows,
      summaries_ms: Object.fromEntries(Object.entries(summaries).map(([k, s]) => [k, { p50: Number(s.p50.toFixed(1)), p90: Number(s.p90.toFixed(1)), max: Number(s.max.toFixed(1)) }])),
      record_usage_per_second: { empty: Math.round(emptyRate), full: Math.round(fullRate), ratio: Number((fullRate / emptyRate).toFixed(2)) },
      backfill_seconds: Number(backfillSeconds.toFixed(1)),
      backfill_steps: backfillSteps,
      backfill_longest_step_ms: Number(longestStepMs.toFixed(1)),
      layout: LAYOUT,
      partitions,
      ...(conversion ? { conversion } : {}),
      ...(dropOldestMonth ? { drop_oldest_month: dropOldestMonth } : {}),
    };
    console.log(JSON.stringify(report, null, 2));
  } finally {
    await app.close();
    await db.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    await pgBench?.drop();
  }
}

await main();
// The service's pools and timers are closed above; nothing else should keep the process, but be sure.
process.exit(0);
