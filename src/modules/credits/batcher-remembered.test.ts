import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batcherFixtures, resultOf } from '../../../test/batcher-fixtures.js';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, dbKind, grant, type Harness, type Tenant } from '../../../test/harness.js';
import { usageFixtures } from '../../../test/usage-fixtures.js';
import { DeductionBatcher } from './engine/queue.js';
import type { BatchOutcome } from './engine/types.js';

/**
 * Group commit (docs/adr/0004-group-commit.md): requests submitted together are applied in one transaction, each deployment's
 * in arrival order, and answered after the commit. These tests submit in one tick to a batcher with a
 * window, so the requests form one batch, and look at what it wrote. Here: one round trip on remembered rows.
 * Shared helpers: test/batcher-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const f = creditFixtures(() => h);
const { request, usageOf } = batcherFixtures(() => h);
const budgets = budgetFixtures(() => h);
const usage = usageFixtures(() => h);

describe('one round trip on remembered rows', () => {
  // A batcher that remembers the rows it committed (DEDUCT_BATCH_REMEMBER_MS; the app's default).
  const remembering = () => new DeductionBatcher(h.deps, { windowMs: 20, maxBatch: 1000, maxInFlight: 1, rememberMs: 60_000 });
  const claimed = (t: Tenant, cost: number, invocationId: string) =>
    request(t, cost, { invocationId, claimInvocation: { requestHash: `h-${invocationId}` } });
  const invocationsOf = (t: Tenant) =>
    h.deps.db.query<{ invocation_id: string; status: string; usage_id: string | null; response: { credits_remaining: number } | null }>(
      'SELECT invocation_id, status, usage_id, response FROM invocations WHERE deployment_id = $1 ORDER BY invocation_id',
      [t.deploymentId],
    );

  it('writes the next batch on the rows the last one committed, in arrival order, with its invocations answered', async () => {
    const t = await f.tenantWith(10);
    const b = remembering();
    await Promise.all([1, 2, 3, 4].map((i) => b.submit(claimed(t, 1, `a${i}`))));
    expect(b.stats).toMatchObject({ batches: 1, optimistic: 0 });
    // 6 credits left: the 7th request of the remembered batch is refused, as on the locking path.
    const second = await Promise.all([1, 2, 3, 4, 5, 6, 7].map((i) => b.submit(claimed(t, 1, `b${i}`))));
    expect(b.stats).toMatchObject({ batches: 2, optimistic: 1, stale: 0, fallbacks: 0 });
    expect(second.map((o) => resultOf(o).deducted)).toEqual([true, true, true, true, true, true, false]);
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 10, reserved: 0 });
    const rows = await invocationsOf(t);
    expect(rows.map((r) => [r.invocation_id, r.status])).toEqual([
      ...[1, 2, 3, 4].map((i) => [`a${i}`, 'recorded']),
      ...[1, 2, 3, 4, 5, 6].map((i) => [`b${i}`, 'recorded']),
      ['b7', 'denied'],
    ]);
    expect(rows.find((r) => r.invocation_id === 'b6')!.response).toMatchObject({ credits_remaining: 0 });
    expect((await usageOf(t)).filter((u) => !u.success)).toHaveLength(1);
    await f.expectLedgerConsistent(t);
  });

  it('a row another instance wrote since is not trusted: the attempt is refused as a whole and the locking path refuses what no longer fits', async () => {
    const t = await f.tenantWith(10);
    const one = remembering();
    const other = remembering();
    await Promise.all([1, 2, 3, 4, 5].map(() => one.submit(request(t, 1))));
    // Another instance spends the other 5; `one` still remembers 5 left.
    await Promise.all([1, 2, 3, 4, 5].map(() => other.submit(request(t, 1))));
    const late = await Promise.all([1, 2, 3].map((i) => one.submit(claimed(t, 1, `late-${i}`))));
    expect(late.map((o) => resultOf(o).deducted)).toEqual([false, false, false]);
    expect(one.stats).toMatchObject({ optimistic: 0, stale: 1, fallbacks: 0, batches: 2 });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 10, reserved: 0 });
    expect((await invocationsOf(t)).map((r) => r.status)).toEqual(['denied', 'denied', 'denied']);
    await f.expectLedgerConsistent(t);
  });

  it('a refusal is not taken from a stale row: credits granted since the row was remembered are spent', async () => {
    const t = await f.tenantWith(3);
    const b = remembering();
    await Promise.all([1, 2, 3].map(() => b.submit(request(t, 1))));
    // Remembered with nothing left; an operator grants 2 purchased credits meanwhile.
    await grant(h, t.deploymentId, 2);
    const after = await Promise.all([b.submit(request(t, 1)), b.submit(request(t, 1))]);
    expect(after.map((o) => resultOf(o).deducted)).toEqual([true, true]);
    expect(b.stats).toMatchObject({ optimistic: 0, stale: 1, fallbacks: 0 });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 3, purchased_balance: 0 });
    await f.expectLedgerConsistent(t);
  });

  it('an invocation id seen before makes the attempt refused as a whole: the replay deducts nothing, the fresh id once', async () => {
    const t = await f.tenantWith(10);
    const b = remembering();
    await Promise.all([b.submit(claimed(t, 1, 'r1')), b.submit(claimed(t, 1, 'r2'))]);
    const [replay, fresh] = await Promise.all([b.submit(claimed(t, 1, 'r2')), b.submit(claimed(t, 1, 'r3'))]);
    // The replay goes back to its caller's full path (which answers the stored answer).
    expect(replay).toEqual({ claimed: false });
    expect(resultOf(fresh).deducted).toBe(true);
    expect(b.stats).toMatchObject({ optimistic: 0, stale: 1, fallbacks: 0 });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 3 });
    expect((await usageOf(t)).map((u) => u.invocation_id).sort()).toEqual(['r1', 'r2', 'r3']);
    await f.expectLedgerConsistent(t);
  });

  it('a deployment holding a reservation takes the locking path, which spends the reservation once', async () => {
    const t = await f.tenantWith(10);
    const b = remembering();
    await Promise.all([b.submit(request(t, 1))]);
    const expiresAt = new Date(h.clock.now().getTime() + 60_000);
    await Promise.all([b.submit(request(t, 4, { invocationId: 'held', hold: { expiresAt } }))]);
    const [spent] = await Promise.all([b.submit(claimed(t, 1, 'held'))]);
    expect(spent).toMatchObject({ claimed: true, cost: 4, result: { deducted: true } });
    expect(b.stats).toMatchObject({ optimistic: 0, stale: 0 });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 5, reserved: 0 });
    await f.expectLedgerConsistent(t);
  });

  it.runIf(dbKind === 'postgres')(
    'a remembered batch does not queue behind a lock: it gives up and takes the locking path, which waits',
    async () => {
      const t = await f.tenantWith(10);
      const b = remembering();
      await Promise.all([b.submit(request(t, 1))]);
      let outcome: Promise<BatchOutcome> | undefined;
      // Another transaction holds the balance row until the remembered attempt has given up on it.
      await h.deps.db.transaction(async (tx) => {
        await tx.query('SELECT 1 FROM credit_balances WHERE deployment_id = $1 FOR UPDATE', [t.deploymentId]);
        outcome = b.submit(request(t, 1));
        for (let i = 0; i < 200 && b.stats.stale === 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
        expect(b.stats.stale).toBe(1);
      });
      expect(resultOf(await outcome!).deducted).toBe(true);
      expect(b.stats).toMatchObject({ optimistic: 0, stale: 1, fallbacks: 0, batches: 2 });
      expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2 });
      await f.expectLedgerConsistent(t);
    },
  );

  it('a remembered row due for its period sync is read again: the new period starts with the batch', async () => {
    const t = await f.tenantWith(10);
    const b = remembering();
    await Promise.all([1, 2, 3].map(() => b.submit(request(t, 1))));
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 3 });
    h.clock.set(h.clock.now().getTime() + 40 * 24 * 3600_000);
    await Promise.all([b.submit(request(t, 1))]);
    expect(b.stats).toMatchObject({ optimistic: 0, stale: 0, batches: 2 });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 1 });
    await f.expectLedgerConsistent(t);
  });
});

describe('one round trip on remembered rows, with budgets (docs/budgets.md)', () => {
  const remembering = () => new DeductionBatcher(h.deps, { windowMs: 20, maxBatch: 1000, maxInFlight: 1, rememberMs: 60_000 });
  const batchOf = (b: DeductionBatcher, t: Tenant | Array<Tenant>, n: number) =>
    Promise.all(Array.from({ length: n }, (_, i) => b.submit(request(Array.isArray(t) ? t[i % t.length]! : t, 1))));
  const deducted = (outcomes: BatchOutcome[]) => outcomes.map((o) => resultOf(o).deducted);
  const spentIn = async (budgetId: string) => (await budgets.windowsOf(budgetId)).map((w) => w.spent_credits);

  it('counts in the remembered windows in one round trip, and the budget refuses exactly there too', async () => {
    const t = await f.tenantWith(100);
    const day = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 5, window: 'day' });
    const eachTool = await budgets.addBudget({ organizationId: t.organizationId, scope: 'tool', toolName: '*', limitCredits: 100, window: 'hour' });
    const b = remembering();
    expect(deducted(await batchOf(b, t, 2))).toEqual([true, true]);
    expect(b.stats).toMatchObject({ batches: 1, optimistic: 0 });
    const second = await batchOf(b, t, 4);
    expect(b.stats).toMatchObject({ batches: 2, optimistic: 1, stale: 0, fallbacks: 0 });
    expect(deducted(second)).toEqual([true, true, true, false]);
    expect(resultOf(second[3]!).budget).toMatchObject({ id: day });
    expect(await spentIn(day)).toEqual([5]);
    expect(await spentIn(eachTool)).toEqual([5]);
    // The third batch counts from what the second left, in one round trip again: nothing fits.
    expect(deducted(await batchOf(b, t, 2))).toEqual([false, false]);
    expect(b.stats).toMatchObject({ batches: 3, optimistic: 2, stale: 0 });
    expect(await spentIn(day)).toEqual([5]);
    const records = await h.deps.db.query<{ success: boolean; error: string | null; budget_windows: string[] | null }>(
      'SELECT success, error, budget_windows FROM usage_records WHERE deployment_id = $1',
      [t.deploymentId],
    );
    expect(records.filter((u) => u.success).map((u) => u.budget_windows?.length)).toEqual([2, 2, 2, 2, 2]);
    expect(records.filter((u) => !u.success).map((u) => u.error)).toEqual(['budget_exceeded', 'budget_exceeded', 'budget_exceeded']);
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 5 });
    await f.expectLedgerConsistent(t);
  });

  it('a window another instance counted in since is not trusted: the attempt is refused and the locking path counts from the row', async () => {
    const t = await f.tenantWith(100);
    const second = { ...t, deploymentId: await usage.addDeployment(t.organizationId) };
    await grant(h, second.deploymentId, 100);
    const day = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 5, window: 'day' });
    const one = remembering();
    const other = remembering();
    expect(deducted(await batchOf(one, t, 2))).toEqual([true, true]);
    // Another instance counts 2 on the organization's other deployment: `one`'s balance row is unchanged, its window is not.
    expect(deducted(await batchOf(other, second, 2))).toEqual([true, true]);
    expect(deducted(await batchOf(one, t, 2))).toEqual([true, false]);
    expect(one.stats).toMatchObject({ optimistic: 0, stale: 1, fallbacks: 0, batches: 2 });
    expect(await spentIn(day)).toEqual([5]);
    await f.expectLedgerConsistent(t);
  });

  it('a limit changed since the rows were remembered applies at once: the attempt is refused as a whole', async () => {
    const t = await f.tenantWith(100);
    const day = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 10, window: 'day' });
    const b = remembering();
    await batchOf(b, t, 3);
    await batchOf(b, t, 1);
    expect(b.stats).toMatchObject({ optimistic: 1, stale: 0 });
    await budgets.setLimit(day, t.organizationId, 5);
    expect(deducted(await batchOf(b, t, 3))).toEqual([true, false, false]);
    expect(b.stats).toMatchObject({ optimistic: 1, stale: 1, fallbacks: 0 });
    expect(await spentIn(day)).toEqual([5]);
  });

  it('a window no batch of this instance has counted in yet (the next hour) is made by the locking path', async () => {
    const t = await f.tenantWith(100);
    const hour = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 3, window: 'hour' });
    const b = remembering();
    await batchOf(b, t, 2);
    h.clock.advance(3600_000);
    expect(deducted(await batchOf(b, t, 4))).toEqual([true, true, true, false]);
    expect(b.stats).toMatchObject({ batches: 2, optimistic: 0, stale: 0 });
    expect(await spentIn(hour)).toEqual([2, 3]);
    // Remembered from there on.
    expect(deducted(await batchOf(b, t, 1))).toEqual([false]);
    expect(b.stats).toMatchObject({ batches: 3, optimistic: 1, stale: 0 });
  });

  it("an organization budget of the primary deployment's period is counted on locked rows", async () => {
    const t = await f.tenantWith(100);
    const period = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 3, window: 'period' });
    const b = remembering();
    await batchOf(b, t, 2);
    expect(deducted(await batchOf(b, t, 2))).toEqual([true, false]);
    expect(b.stats).toMatchObject({ batches: 2, optimistic: 0, stale: 0 });
    expect(await spentIn(period)).toEqual([3]);
  });
});
