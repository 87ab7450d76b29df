import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batcherFixtures, resultOf } from '../../../test/batcher-fixtures.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, type Harness, type Tenant } from '../../../test/harness.js';
import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';

/**
 * Group commit (docs/adr/0004-group-commit.md): requests submitted together are applied in one transaction, each deployment's
 * in arrival order, and answered after the commit. These tests submit in one tick to a batcher with a
 * window, so the requests form one batch, and look at what it wrote. Here: money changes that are not deductions (ops) in a batch.
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
const { batcher, request } = batcherFixtures(() => h);

describe('money changes that are not deductions (ops) in a batch', () => {
  const addPurchased = (t: Tenant, amount: number) => (tx: Queryable) =>
    tx.query('UPDATE credit_balances SET purchased_balance = purchased_balance + $2 WHERE deployment_id = $1', [t.deploymentId, amount]);

  it('an op commits with the deductions of its batch and answers with its value', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    const [deducted, value] = await Promise.all([
      b.submit(request(t, 4)),
      b.within(t.deploymentId, async (tx) => {
        // Runs after the batch's writes, on the row the batch locked: it sees the deduction.
        const [row] = await tx.query<{ monthly_used: number }>('SELECT monthly_used FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
        return row!.monthly_used;
      }),
    ]);
    expect(b.stats).toMatchObject({ batches: 1, requests: 2, ops: 1, fallbacks: 0 });
    expect(resultOf(deducted).deducted).toBe(true);
    expect(value).toBe(4);
  });

  it('an op that fails is undone alone: the deductions and the other ops of its batch commit', async () => {
    const t = await f.tenantWith(10);
    const other = await f.tenantWith(10);
    const b = batcher();
    const outcomes = await Promise.allSettled([
      b.submit(request(t, 3)),
      b.within(t.deploymentId, async (tx) => {
        await addPurchased(t, 1000)(tx);
        throw new AppError('CONFLICT', 'refused after writing');
      }),
      b.within(other.deploymentId, async (tx) => {
        await addPurchased(other, 5)(tx);
        await tx.query('SELECT no_such_column FROM credit_balances');
      }),
      b.within(other.deploymentId, async (tx) => {
        await addPurchased(other, 7)(tx);
        return 'granted';
      }),
      b.submit(request(other, 2)),
    ]);
    expect(b.stats).toMatchObject({ batches: 1, ops: 3, fallbacks: 0 });
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'fulfilled', 'fulfilled']);
    expect((outcomes[1] as PromiseRejectedResult).reason).toMatchObject({ code: 'CONFLICT' });
    expect(outcomes[3]).toEqual({ status: 'fulfilled', value: 'granted' });
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 3, purchased_balance: 0 });
    expect(await f.balanceOf(other.deploymentId)).toMatchObject({ monthly_used: 2, purchased_balance: 7 });
  });

  it('when its batch fails as a whole, an op runs in a transaction of its own', async () => {
    const t = await f.tenantWith(10);
    const b = batcher();
    const outcomes = await Promise.allSettled([
      b.within(t.deploymentId, async (tx) => {
        await addPurchased(t, 5)(tx);
        return 'alone';
      }),
      b.submit(request(t, 1, { metadata: { note: 'bad\u0000value' } })),
    ]);
    expect(b.stats).toMatchObject({ batches: 0, fallbacks: 1 });
    expect(outcomes[0]).toEqual({ status: 'fulfilled', value: 'alone' });
    expect(outcomes[1]!.status).toBe('rejected');
    expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, purchased_balance: 5 });
  });
});
