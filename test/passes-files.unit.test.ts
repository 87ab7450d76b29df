import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * A test file that runs a pass over every tenant's rows (a worker of src/workers/catalog.ts, the webhook
 * delivery worker, a job queue) does it on a database of its own on PostgreSQL (CONTRIBUTING.md,
 * createPassesHarness): on the run's shared database such a pass at a moved clock takes other files' rows
 * in flight. The browser tests run on PGlite only, whose database is one per vitest worker.
 */
const ROOT = join(import.meta.dirname, '..');

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' ? [] : testFiles(path);
    return e.name.endsWith('.test.ts') && !e.name.endsWith('.unit.test.ts') && !e.name.endsWith('.browser.test.ts') ? [path] : [];
  });
}

/**
 * Calls that pass over every tenant's rows: the catalog's workers and the functions they run, the delivery
 * worker, the event dispatcher (and the harness's loop of it), an unscoped job queue. expireReservations
 * with a deployment (its third argument) is scoped; `M.expireReservations` is the money model's
 * (test/money-model.ts), not the database's.
 */
const PASS =
  /\bWORKERS\b|\bdeliverDue\(|\brunJobs\((?![^)]*\bparams:)|(?<![.\w])(?:dispatchPending|dispatchAllPending|pruneInvocations|expireAiHolds|pruneAiHolds|pruneEachBudgetWindows|backfillRollupsStep|deleteExpiredUsage|pruneStripeEvents|askDueAutoTopUps|lapseDomainClaims)\(|(?<![.\w])expireReservations\([^,()]+,[^,()]+(?:\([^)]*\))?\)/;
/** Harnesses on a database of their own (startWebhookHarness is createPassesHarness with the webhook settings). */
const OWN = /\b(?:createPassesHarness|isolatedDatabase|databaseBefore|startWebhookHarness)\(/;

function unguardedPassFiles(files: string[]): string[] {
  return files.filter((file) => {
    const text = readFileSync(file, 'utf8');
    return PASS.test(text) && !OWN.test(text);
  });
}

describe('test files that run worker passes', () => {
  const files = ['src', 'test', 'packages'].flatMap((dir) => testFiles(join(ROOT, dir)));

  it('each runs them on a database of its own', () => {
    expect(unguardedPassFiles(files).map((f) => relative(ROOT, f))).toEqual([]);
  });

  it('the scan finds the files that run passes (a rule that finds nothing proves nothing)', () => {
    const passing = files.filter((f) => PASS.test(readFileSync(f, 'utf8'))).map((f) => relative(ROOT, f));
    expect(passing).toEqual(
      expect.arrayContaining([
        'src/workers/catalog.test.ts',
        'src/modules/webhooks/test-send.test.ts',
        'src/modules/billing/auto-top-up.test.ts',
        'src/modules/credits/ai-usage.test.ts',
        'src/modules/credits/budgets-edges.test.ts',
        'src/modules/webhooks/organization-delivery.test.ts',
      ]),
    );
    // A sweep scoped to one deployment is not a pass over every tenant's rows.
    expect(PASS.test('expireReservations(h.deps.db, h.clock.now(), t.deploymentId)')).toBe(false);
    expect(PASS.test('M.expireReservations(d, w.now)')).toBe(false);
    // The event dispatcher fans out every organization's pending events.
    expect(PASS.test('await dispatchAllPending(h.deps.db, h.clock.now())')).toBe(true);
  });
});
