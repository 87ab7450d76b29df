/**
 * The console's overview with 1,000,000 usage records on the embedded default (docs/console.md
 * "Budget", docs/benchmarks.md "Console"). The service runs in this process on PGlite in a fresh
 * DATA_DIR (the default of `npm start`), listening on a loopback port; 100,000 records are recorded
 * through the API (service mode, the batcher, so ledger and balances follow) over 30 days of a manual
 * clock, across 12 tools and 200 end users. Then Debian's Chromium opens the overview again and again
 * and the page itself says when the numbers, the chart and both top lists are on screen
 * (`performance.now()`, milliseconds since the navigation began).
 *
 *   npx tsx bench/console.ts [records=1000000] [loads=15]
 *
 * Past 100,000 (CONSOLE_API_RECORDS) the rest are inserted in bulk (INSERT … SELECT generate_series,
 * spread over the same 30 days, the rollup triggers counting them as they count the engine's
 * batches): a million records through the API would take most of an hour here. Those are not money
 * (no ledger rows), so the ledger check covers the records made through the API.
 *
 * Needs the console built (`npm run build:console`) and /usr/bin/chromium (or CHROMIUM_PATH).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { buildApp } from '../src/app.js';
import { DAY, ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { Samples } from './lib/stats.js';

const RECORDS = Number(process.argv[2] ?? 1_000_000);
const LOADS = Number(process.argv[3] ?? 15);
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const PASSWORD = 'violet-harbor-lantern-42';
const TOOLS = Array.from({ length: 12 }, (_, i) => `tool_${String(i).padStart(2, '0')}`);
const USERS = 200;
const CONCURRENCY = 200;
const API_RECORDS = Math.min(RECORDS, Number(process.env.CONSOLE_API_RECORDS ?? 100_000));
const BULK_CHUNK = 250_000;

function summarize(values: number[]) {
  const samples = new Samples();
  for (const v of values) samples.push(v);
  return samples.summary();
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cg-console-bench-'));
  const db = await openDatabase({ databaseUrl: undefined, dataDir });
  await runMigrations(db);
  const now = new Date();
  const clock = new ManualClock(new Date(now.getTime() - 30 * DAY).toISOString());
  const config = testConfig({ dataDir, logLevel: 'warn' });
  const app = await buildApp({ config, db, clock });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  try {
    const call = async (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) => {
      const res = await app.inject({ method: method as 'POST', url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });
      if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
      return res.json();
    };
    const email = `bench-${Date.now()}@example.com`;
    const signup = await call('POST', '/auth/signup', { email, password: PASSWORD, full_name: 'Bench' });
    let bearer = { authorization: `Bearer ${signup.data.access_token}` };
    const org = (await call('POST', '/organizations', { name: 'Bench Org', slug: `bench-${Date.now()}` }, bearer)).data;
    const admin = { 'x-admin-key': config.adminApiKey };
    // Enterprise: no per-minute rate limit in the way of the seeding.
    await call('PUT', `/api/v1/admin/deployments/${org.deployment.id}`, { tier: 'enterprise' }, admin);
    await call('POST', `/api/v1/admin/deployments/${org.deployment.id}/credits`, { amount: API_RECORDS * 10, reason: 'console benchmark' }, admin);

    // Seed: API_RECORDS records through the API, spread evenly over 30 days (the clock steps between rounds).
    const seedStart = performance.now();
    const service = { 'x-mcp-service-key': config.mcpServiceKey };
    const rounds = Math.ceil(API_RECORDS / CONCURRENCY);
    const step = Math.floor((30 * DAY - 60_000) / rounds);
    let sent = 0;
    for (let r = 0; r < rounds; r++) {
      const batch = Math.min(CONCURRENCY, API_RECORDS - sent);
      await Promise.all(
        Array.from({ length: batch }, (_, i) => {
          const n = sent + i;
          return call(
            'POST',
            '/api/v1/mcp/usage',
            { deployment_id: org.deployment.id, tool_name: TOOLS[(n * 7) % TOOLS.length], mcp_user_id: `user-${n % USERS}`, invocation_id: `bench-${n}` },
            service,
          );
        }),
      );
      sent += batch;
      clock.advance(step);
    }
    const seedSeconds = (performance.now() - seedStart) / 1000;
    const mismatches = await findLedgerMismatches(db, org.id);
    // The rest in bulk over the same 30 days (not money: usage records and their rollups only).
    const bulkStart = performance.now();
    const from = now.getTime() - 30 * DAY;
    const bulk = RECORDS - API_RECORDS;
    for (let start = 0; start < bulk; start += BULK_CHUNK) {
      const n = Math.min(BULK_CHUNK, bulk - start);
      await db.query(
        `INSERT INTO usage_records (organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, success, "timestamp")
         SELECT $1, $2, 'platform_basic', 1, 'tool_' || lpad(((i * 7) % 12)::text, 2, '0'), 'user-' || (i % ${USERS}), true,
                to_timestamp(($3::float8 + i * $4::float8) / 1000)
         FROM generate_series($5::bigint, $5::bigint + $6::bigint - 1) AS i`,
        [org.id, org.deployment.id, from, (30 * DAY - 60_000) / bulk, start, n],
      );
    }
    const bulkSeconds = (performance.now() - bulkStart) / 1000;
    clock.set(now.toISOString());
    // 30 days later by the service's clock: the access token of the sign-up has expired.
    bearer = { authorization: `Bearer ${(await call('POST', '/auth/login', { email, password: PASSWORD })).data.access_token}` };
    const count = (await db.query<{ count: number }>('SELECT count(*)::int AS count FROM usage_records WHERE organization_id = $1', [org.id]))[0]?.count ?? 0;

    // The API alone: the three summaries the overview asks for, timed in-process.
    const apiTimes: Record<string, number[]> = {};
    for (const q of ['group_by=day&split_by=tool', 'group_by=tool', 'group_by=mcp_user']) {
      apiTimes[q] = [];
      for (let i = 0; i < 10; i++) {
        const t0 = performance.now();
        await call('GET', `/organizations/${org.id}/usage/summary?${q}`, undefined, bearer);
        apiTimes[q].push(performance.now() - t0);
      }
    }

    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    const context = await browser.newContext({ baseURL: base, viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    await page.goto('/console/');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/console\/orgs\//);
    const loads: number[] = [];
    let cold = 0;
    // Each request of a load: when it was sent and answered, in ms since the navigation began (the last load's are reported).
    let requests: Array<{ url: string; start: number; end: number }> = [];
    page.on('requestfinished', (request) => {
      const t = request.timing();
      const url = new URL(request.url());
      if (url.origin === base) requests.push({ url: `${request.method()} ${url.pathname}${url.search}`, start: t.startTime, end: t.startTime + t.responseEnd });
    });
    for (let i = 0; i < LOADS + 1; i++) {
      requests = [];
      await page.goto(`/console/orgs/${org.id}`);
      const ms = await page.waitForFunction(
        () => {
          const done =
            document.querySelector('[data-testid="usage-chart"][data-rendered="true"] canvas') &&
            document.querySelector('[data-testid="card-monthly"]') &&
            document.querySelector('[data-testid="top-tools"] table') &&
            document.querySelector('[data-testid="top-users"] table');
          return done ? performance.now() : false;
        },
        undefined,
        { polling: 'raf', timeout: 30_000 },
      );
      const value = (await ms.jsonValue()) as number;
      if (i > 0) loads.push(value);
      else cold = value; // the first load of the overview fetches its chunks; later ones hit the browser cache
    }
    const credits = await page.getByTestId('credits-total').textContent();
    await browser.close();

    const s = summarize(loads);
    const fmt = (n: number) => n.toFixed(0);
    console.log(`## Console overview, ${count.toLocaleString('en-US')} usage records (PGlite in DATA_DIR)\n`);
    console.log(
      `Seeded ${API_RECORDS.toLocaleString('en-US')} through the API in ${seedSeconds.toFixed(1)} s (${Math.round(API_RECORDS / seedSeconds)} records/s; ledger mismatches: ${mismatches.length})` +
        (bulk > 0 ? ` and ${bulk.toLocaleString('en-US')} in bulk in ${bulkSeconds.toFixed(1)} s` : '') +
        `; overview shows ${credits} credits.\n`,
    );
    console.log('| Summary request (in-process) | median ms | p90 ms | max ms |');
    console.log('|---|---|---|---|');
    for (const [q, times] of Object.entries(apiTimes)) {
      const t = summarize(times);
      console.log(`| \`${q}\` | ${t.p50.toFixed(1)} | ${t.p90.toFixed(1)} | ${t.max.toFixed(1)} |`);
    }
    console.log(`\n| Overview load in Chromium (${LOADS} loads, warm asset cache) | median ms | p90 ms | max ms |`);
    console.log('|---|---|---|---|');
    console.log(`| navigation start → numbers, chart and top lists shown | ${fmt(s.p50)} | ${fmt(s.p90)} | ${fmt(s.max)} |`);
    console.log(`\nThe first load after sign-in (the overview's first visit): ${fmt(cold)} ms.`);
    // The last load's requests, by when they were answered (a request's start is absolute time; shown relative to the first).
    const first = Math.min(...requests.map((r) => r.start));
    console.log('\n| The last load\'s requests | sent at ms | answered at ms | took ms |');
    console.log('|---|---:|---:|---:|');
    for (const r of [...requests].sort((a, b) => a.end - b.end)) {
      console.log(`| \`${r.url.replace(org.id, '{id}').replace(/(from|to)=[^&]+/g, '$1=…')}\` | ${fmt(r.start - first)} | ${fmt(r.end - first)} | ${fmt(r.end - r.start)} |`);
    }
    console.log(`\nTarget: under 500 ms warm — ${s.max < 500 ? 'met (every load)' : s.p50 < 500 ? 'met at the median, not every load' : 'missed'}.`);
  } finally {
    await app.close();
    await db.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
