import { pathToFileURL } from 'node:url';
import { ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import type { Deps } from '../src/context.js';
import { openDatabase } from '../src/db/client.js';
import { testPgOptions } from './pg-options.js';
import { Metrics } from '../src/lib/metrics.js';
import { reportMeterEvents } from '../src/modules/billing/meter-events.js';

/**
 * The real `meter-events` worker pass in a process of its own, for the SIGKILL test
 * (src/modules/billing/meter-reporting.test.ts, PostgreSQL only). It prints `started` and runs one
 * pass; the test's Stripe in front of the stand-in withholds some answers, so the pass hangs there
 * until the test kills it.
 *
 *   node --import tsx test/meter-worker-child.ts <databaseUrl> <nowIso> <stripeApiBase> <secretKey> <eventName>
 */
async function main(): Promise<void> {
  const [databaseUrl, nowIso, stripeApiBase, stripeSecretKey, stripeMeterEventName] = process.argv.slice(2);
  if (!databaseUrl || !nowIso || !stripeApiBase || !stripeSecretKey || !stripeMeterEventName) {
    process.stderr.write('usage: meter-worker-child.ts <databaseUrl> <nowIso> <stripeApiBase> <secretKey> <eventName>\n');
    process.exit(64);
  }
  // Never outlive a test that forgot to kill us.
  setTimeout(() => process.exit(3), 120_000);
  const db = await openDatabase({ databaseUrl, dataDir: '', poolSize: 4, ...testPgOptions });
  const silent = { error() {}, warn() {}, info() {}, debug() {} };
  // What a worker pass reads: configuration, database, clock, metrics (Stripe calls are counted) and a logger.
  const deps = {
    config: testConfig({ databaseUrl, stripeApiBase, stripeSecretKey, stripeMeterEventName }),
    db,
    clock: new ManualClock(nowIso),
    metrics: new Metrics(),
    log: silent,
  } as unknown as Deps;
  process.stdout.write('started\n');
  await reportMeterEvents(deps, 100);
  process.stdout.write('finished\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
