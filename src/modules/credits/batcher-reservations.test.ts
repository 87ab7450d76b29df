import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batcherFixtures, resultOf } from '../../../test/batcher-fixtures.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, type Harness, type Tenant } from '../../../test/harness.js';

/**
 * Group commit (docs/adr/0004-group-commit.md): requests submitted together are applied in one transaction, each deployment's
 * in arrival order, and answered after the commit. These tests submit in one tick to a batcher with a
 * window, so the requests form one batch, and look at what it wrote. Here: reservations in a batch.
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
const { batcher, request, usageOf } = batcherFixtures(() => h);

describe('reservations in a batch', () => {
  const expiresAt = () => new Date(h.clock.now().getTime() + 5 * 60 * 1000);
  const hold = (t: Tenant, cost: number, invocationId: string) => request(t, cost, { invocationId, hold: { expiresAt: expiresAt() } });
  const invocationsOf = (t: Tenant) =>
    h.deps.db.query<{ invocation_id: string; status: string; reserved_amount: number }>(
      'SELECT invocation_id, status, reserved_amount FROM invocations WHERE deployment_id = $1 ORDER BY invocation_id',
      [t.deploymentId],
    );

  it('holds and deductions of one deployment are applied in arrival order in one transaction', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    const outcomes = await Promise.all([
      b.submit(hold(t, 4, 'r1')), // 10 spendable → holds 4
      b.submit(request(t, 3)), // 6 → deducts 3
      b.submit(hold(t, 4, 'r2')), // 3 → refused
      b.submit(request(t, 2)), // 3 → deducts 2
      b.submit(hold(t, 1, 'r3')), // 1 → holds 1
      b.submit(request(t, 1)), // 0 → refused
    ]);
    expect(b.stats).toMatchObject({ batches: 1, requests: 6, fallbacks: 0 });
    expect(outcomes.map((o) => resultOf(o).deducted)).toEqual([true, true, false, true, true, false]);
    // A hold's answer carries the balance right after it, like a deduction's.
    expect(resultOf(outcomes[0]!)).toMatchObject({ monthly_used: 0, reserved: 4, usageId: null });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 5, reserved: 5 });
    // A refused hold leaves no invocation behind; holds write no ledger or usage rows.
    expect(await invocationsOf(t)).toEqual([
      { invocation_id: 'r1', status: 'reserved', reserved_amount: 4 },
      { invocation_id: 'r3', status: 'reserved', reserved_amount: 1 },
    ]);
    expect((await usageOf(t)).map((u) => [u.success, u.quantity]).sort()).toEqual([
      [false, 0],
      [true, 2],
      [true, 3],
    ]);
    await f.expectLedgerConsistent(t);
  });

  it('the same reservation id twice in one batch holds once; the second takes the full path', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    const [first, second] = await Promise.all([b.submit(hold(t, 3, 'same')), b.submit(hold(t, 3, 'same'))]);
    expect(resultOf(first!).deducted).toBe(true);
    expect(second).toEqual({ claimed: false });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ reserved: 3 });
  });

  it('a hold in a batch that fails is handed back untouched to its verb (the invocation path)', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    const outcomes = await Promise.allSettled([
      b.submit(hold(t, 3, 'fallback')),
      b.submit(request(t, 1, { metadata: { note: 'bad\u0000value' } })),
    ]);
    expect(b.stats).toMatchObject({ batches: 0, fallbacks: 1 });
    expect(outcomes[0]).toEqual({ status: 'fulfilled', value: { claimed: false } });
    expect(outcomes[1]!.status).toBe('rejected');
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, reserved: 0 });
    expect(await invocationsOf(t)).toEqual([]);
  });

  const record = (t: Tenant, cost: number, invocationId: string, toolName = 'batch-tool') =>
    request(t, cost, { invocationId, toolName, claimInvocation: { requestHash: `h-${invocationId}` } });
  const release = (t: Tenant, invocationId: string) => request(t, 0, { invocationId, release: true, toolName: '' });

  it('a record spends its own reservation at the held price and releases give holds back, in arrival order in one batch', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    await Promise.all([b.submit(hold(t, 4, 'r1')), b.submit(hold(t, 3, 'r2'))]);
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, reserved: 7 });
    const outcomes = await Promise.all([
      b.submit(record(t, 1, 'r1')), // spends r1's hold: 4 credits, the price when it was held
      b.submit(release(t, 'r2')), // gives back 3
      b.submit(request(t, 6)), // 10 − 4 spent, nothing held → 6 spendable: deducted
      b.submit(release(t, 'never-held')), // nothing held
      b.submit(record(t, 1, 'r1')), // the same id again: after the batch, the full path replays it
      b.submit(release(t, 'r2')), // released already: nothing held
    ]);
    expect(b.stats).toMatchObject({ batches: 2, requests: 8, fallbacks: 0 });
    expect(outcomes[0]).toMatchObject({ claimed: true, cost: 4, result: { deducted: true, monthly_used: 4, reserved: 3 } });
    expect(outcomes[1]).toMatchObject({ claimed: true, cost: 3, result: { deducted: true, reserved: 0, usageId: null } });
    expect(outcomes[2]).toMatchObject({ claimed: true, cost: 6, result: { deducted: true, monthly_used: 10, reserved: 0 } });
    expect(outcomes[3]).toMatchObject({ claimed: true, cost: 0, result: { deducted: false } });
    expect(outcomes[4]).toEqual({ claimed: false });
    expect(outcomes[5]).toMatchObject({ claimed: true, cost: 0, result: { deducted: false } });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 10, reserved: 0 });
    const rows = await h.deps.db.query<{ invocation_id: string; status: string; reserved_amount: number; response: { credits_used: number } | null }>(
      'SELECT invocation_id, status, reserved_amount, response FROM invocations WHERE deployment_id = $1 ORDER BY invocation_id',
      [t.deploymentId],
    );
    expect(rows).toMatchObject([
      { invocation_id: 'r1', status: 'recorded', reserved_amount: 0, response: { credits_used: 4 } },
      { invocation_id: 'r2', status: 'released', reserved_amount: 3 },
    ]);
    expect((await usageOf(t)).map((u) => [u.success, u.quantity, u.invocation_id]).sort()).toEqual([
      [true, 4, 'r1'],
      [true, 6, null],
    ]);
    await f.expectLedgerConsistent(t);
  });

  it('an overdue reservation, another tool under a held id, and a release of a hold made in the same batch take the full path', async () => {
    const t = await f.tenantWith(20);
    const b = batcher();
    await Promise.all([b.submit(hold(t, 2, 'overdue'))]);
    h.clock.advance(6 * 60 * 1000);
    await Promise.all([b.submit(hold(t, 2, 'other-tool'))]);
    const outcomes = await Promise.all([
      b.submit(record(t, 1, 'overdue')),
      b.submit(record(t, 1, 'other-tool', 'another-tool')),
      b.submit(hold(t, 2, 'same-batch')),
      b.submit(release(t, 'same-batch')),
    ]);
    expect(outcomes[0]).toEqual({ claimed: false });
    expect(outcomes[1]).toEqual({ claimed: false });
    expect(outcomes[2]).toMatchObject({ claimed: true, result: { deducted: true } });
    expect(outcomes[3]).toEqual({ claimed: false });
    // Nothing was spent or released by the batch: the three holds are still held.
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, reserved: 6 });
    await f.expectLedgerConsistent(t);
  });

  it("a release of an overdue hold is left to a batch of one: the batch's own sweep could free it twice", async () => {
    const t = await f.tenantWith(2);
    const b = batcher();
    await Promise.all([b.submit(hold(t, 1, 'lapsed-1')), b.submit(hold(t, 1, 'lapsed-2'))]);
    h.clock.advance(6 * 60 * 1000);
    // The deduction is short while the lapsed holds count, so the batch sweeps them before refusing.
    const [released, deducted] = await Promise.all([b.submit(release(t, 'lapsed-1')), b.submit(request(t, 2))]);
    expect(b.stats.fallbacks).toBe(0);
    expect(released).toEqual({ claimed: false });
    expect(deducted).toMatchObject({ claimed: true, result: { deducted: true } });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2, reserved: 0 });
    await f.expectLedgerConsistent(t);
  });

  it('a release of an overdue hold alone is a batch of one that settles it: its credits come back once', async () => {
    const t = await f.tenantWith(2);
    const b = batcher();
    await Promise.all([b.submit(hold(t, 2, 'lapsed-alone'))]);
    h.clock.advance(6 * 60 * 1000);
    const [released] = await Promise.all([b.submit(release(t, 'lapsed-alone'))]);
    expect(released).toMatchObject({ claimed: true, cost: 2, result: { deducted: true, reserved: 0 } });
    const [again] = await Promise.all([b.submit(release(t, 'lapsed-alone'))]);
    expect(again).toMatchObject({ claimed: true, cost: 0, result: { deducted: false } });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, reserved: 0 });
    expect(await invocationsOf(t)).toEqual([expect.objectContaining({ status: 'released' })]);
    await f.expectLedgerConsistent(t);
  });

  it('a record whose reservation the balance no longer covers is refused and leaves the reservation held', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    await Promise.all([b.submit(hold(t, 5, 'squeezed'))]);
    // An operator's adjustment took credits away after the hold was granted.
    await h.deps.db.query('UPDATE credit_balances SET monthly_used = 8 WHERE deployment_id = $1', [t.deploymentId]);
    const [spent] = await Promise.all([b.submit(record(t, 1, 'squeezed'))]);
    expect(spent).toMatchObject({ claimed: true, cost: 5, result: { deducted: false } });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 8, reserved: 5 });
    const [row] = await h.deps.db.query<{ status: string }>('SELECT status FROM invocations WHERE deployment_id = $1', [t.deploymentId]);
    expect(row!.status).toBe('reserved');
    expect((await usageOf(t)).map((u) => [u.success, u.quantity])).toEqual([[false, 0]]);
  });
});
