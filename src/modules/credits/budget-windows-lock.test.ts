import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { createHarness, createTenant, dbKind, type Harness, isolatedDatabase, type Tenant } from '../../../test/harness.js';
import type { Database, Transaction } from '../../db/client.js';
import { windowOf } from './budget-rules.js';
import { type BudgetWithPeriod, budgetsStatement, type CounterKey, counterKey, lockCounters } from './budgets.js';

/**
 * The lock of a batch's budget windows (docs/budgets.md, "Enforcement") returns every window it was
 * asked for, also one that another transaction changed while the lock waited for it. Under READ
 * COMMITTED, PostgreSQL rechecks such a row's new version against the statement's conditions, and a
 * condition that joins the row to a subquery can fail that recheck whatever the row holds: the row is
 * then locked but not returned, and the batch would count without it. Each plan shape the planner may
 * choose is forced in turn.
 *
 * PostgreSQL only: PGlite has one connection, so one transaction never waits for another's lock.
 */
const custom = 'plan_cache_mode = force_custom_plan'; // planned under the settings, not taken from the statement's cache
const PLANS: Record<string, string[]> = {
  'as planned': [],
  'nested loops': [custom, 'enable_hashjoin = off', 'enable_mergejoin = off'],
  'nested loops, no memoize': [custom, 'enable_hashjoin = off', 'enable_mergejoin = off', 'enable_memoize = off'],
  'hash joins': [custom, 'enable_nestloop = off', 'enable_mergejoin = off'],
  'merge joins': [custom, 'enable_nestloop = off', 'enable_hashjoin = off'],
  'a generic plan': ['plan_cache_mode = force_generic_plan'],
};

describe.skipIf(dbKind === 'pglite')('the lock of budget windows', () => {
  let h: Harness;
  let db: Database;
  let t: Tenant;
  let keys: CounterKey[];
  const ids: string[] = [];
  const b = budgetFixtures(() => h);

  beforeAll(async () => {
    // A database of its own: a small budget_windows table without statistics, as a new installation's.
    db = await isolatedDatabase();
    h = await createHarness({}, undefined, db);
    t = await createTenant(h, { tier: 'launch' });
    for (let i = 0; i < 3; i++) await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 100, window: 'hour' });
    const at = h.clock.now();
    const budgets = await db.query<BudgetWithPeriod>(budgetsStatement([t.organizationId], at).text, budgetsStatement([t.organizationId], at).params);
    keys = budgets.map((budget) => ({ budget, subject: '', window: windowOf('hour', at, null) }));
    // The windows exist before the test's transactions: the lock's INSERT finds them and waits for nobody.
    const created = await db.transaction((tx) => lockCounters(tx, keys, []));
    for (const k of keys) ids.push(created.byKey.get(counterKey(k))!.id);
  });
  afterAll(async () => {
    await h?.close();
    await db?.close();
  });

  /** Lock under `settings` while another transaction adds 1 to window `target`; what the lock returned. */
  async function lockWhileUpdated(settings: string[], target: string, byKeys: boolean, releasing: string[]) {
    let commitUpdate!: () => void;
    const updateMayCommit = new Promise<void>((resolve) => {
      commitUpdate = resolve;
    });
    let updated!: () => void;
    const updateMade = new Promise<void>((resolve) => {
      updated = resolve;
    });
    const update = db.transaction(async (tx) => {
      await tx.query('UPDATE budget_windows SET spent_credits = spent_credits + 1 WHERE id = $1', [target]);
      updated();
      await updateMayCommit;
    });
    await updateMade;
    let lockPid = 0;
    const lock = db.transaction(async (tx: Transaction) => {
      for (const s of settings) await tx.query(`SET LOCAL ${s}`);
      lockPid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]!.pid;
      return lockCounters(tx, byKeys ? keys : [], releasing);
    });
    // Bounded wait until the lock waits for the update's transaction, then let that commit.
    for (let i = 0; i < 500; i++) {
      const waiting = lockPid
        ? await db.query<{ n: number }>('SELECT cardinality(pg_blocking_pids($1)) AS n', [lockPid])
        : [{ n: 0 }];
      if (Number(waiting[0]!.n) > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    commitUpdate();
    await update;
    return lock;
  }

  for (const [plan, settings] of Object.entries(PLANS)) {
    it(`returns every window asked for by key, one updated while it waited (${plan})`, async () => {
      for (let target = 0; target < ids.length; target++) {
        const before = await db.query<{ id: string; spent_credits: number }>('SELECT id, spent_credits FROM budget_windows WHERE id = ANY($1::uuid[])', [ids]);
        const { byKey, byId } = await lockWhileUpdated(settings, ids[target]!, true, []);
        expect([...byId.keys()].sort()).toEqual([...ids].sort());
        for (const k of keys) expect(byKey.get(counterKey(k))).toBeDefined();
        const spentBefore = before.find((r) => r.id === ids[target])!.spent_credits;
        expect(byId.get(ids[target]!)!.spentCredits).toBe(Number(spentBefore) + 1);
      }
    });

    it(`returns every window given back to by id, one updated while it waited (${plan})`, async () => {
      for (let target = 0; target < ids.length; target++) {
        const { byId } = await lockWhileUpdated(settings, ids[target]!, false, ids);
        expect([...byId.keys()].sort()).toEqual([...ids].sort());
      }
    });

    it(`returns every window asked for by key and by id at once, one updated while it waited (${plan})`, async () => {
      for (let target = 0; target < ids.length; target++) {
        const { byId } = await lockWhileUpdated(settings, ids[target]!, true, [ids[ids.length - 1 - target]!]);
        expect([...byId.keys()].sort()).toEqual([...ids].sort());
      }
    });
  }
});
