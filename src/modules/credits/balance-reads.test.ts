import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, createTenant, type Harness, json, serviceHeaders, watchStatements } from '../../../test/harness.js';
import type { Database } from '../../db/client.js';
import { BalanceReads } from './balance-reads.js';
import { readBalance } from './service.js';

/**
 * Gathered balance reads (docs/adr/0005-cached-checks.md): the reads asked for in one turn of the event
 * loop go as one statement, those asked for while one is under way go together in the next, and a hot
 * deployment's checks that miss its copy together share one read.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const { setMonthly } = creditFixtures(() => h);

describe('BalanceReads', () => {
  /** h's database, with each statement held until release() (to ask for reads while one is under way). */
  function heldDatabase(): { db: Pick<Database, 'query'>; sent: string[][]; release: () => void } {
    const sent: string[][] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    return {
      sent,
      release: open,
      db: {
        query: (async (text: string, params?: readonly unknown[], name?: string) => {
          sent.push((Array.isArray(params?.[0]) ? params[0] : params) as string[]);
          await gate;
          return h.deps.db.query(text, params, name);
        }) as Database['query'],
      },
    };
  }

  it('reads asked for in one turn go as one statement, each answered with its own row', async () => {
    const tenants = await Promise.all(Array.from({ length: 6 }, () => createTenant(h, { tier: 'trial', purchased: 5 })));
    const reads = new BalanceReads(h.deps.db);
    const missing = randomUUID();
    const ids = [...tenants.map((t) => t.deploymentId), tenants[2]!.deploymentId, missing];
    const rows = await Promise.all(ids.map((id) => reads.read(id)));
    expect(reads.stats).toEqual({ statements: 1, reads: ids.length });
    for (const [i, id] of ids.entries()) {
      if (id === missing) expect(rows[i]).toBeUndefined();
      else expect(rows[i]).toMatchObject({ deployment_id: id, purchased_balance: 5, monthly_used: 0 });
    }
    // The same rows as the one-by-one read of record.
    for (const t of tenants) {
      const one = await readBalance(h.deps.db, t.deploymentId, h.clock.now(), 'test');
      expect(rows[ids.indexOf(t.deploymentId)]).toEqual(one);
    }
  });

  it('reads asked for while a statement is under way wait for it and go together next', async () => {
    const tenants = await Promise.all(Array.from({ length: 4 }, () => createTenant(h, { tier: 'trial' })));
    const held = heldDatabase();
    const reads = new BalanceReads(held.db);
    const first = reads.read(tenants[0]!.deploymentId);
    await vi.waitFor(() => expect(held.sent).toHaveLength(1), { timeout: 15_000 });
    const later = tenants.slice(1).map((t) => reads.read(t.deploymentId));
    await new Promise((resolve) => setImmediate(resolve));
    expect(held.sent).toHaveLength(1); // nothing more is sent while the first is under way
    held.release();
    const rows = await Promise.all([first, ...later]);
    expect(held.sent).toEqual([[tenants[0]!.deploymentId], tenants.slice(1).map((t) => t.deploymentId)]);
    expect(rows.map((r) => r?.deployment_id)).toEqual(tenants.map((t) => t.deploymentId));
  });

  it('sends no more than maxBatch deployments per statement', async () => {
    const tenants = await Promise.all(Array.from({ length: 5 }, () => createTenant(h, { tier: 'trial' })));
    const reads = new BalanceReads(h.deps.db, { maxInFlight: 1, maxBatch: 2 });
    const rows = await Promise.all(tenants.map((t) => reads.read(t.deploymentId)));
    expect(reads.stats).toEqual({ statements: 3, reads: 5 });
    expect(rows.map((r) => r?.deployment_id)).toEqual(tenants.map((t) => t.deploymentId));
  });

  it('a failed statement fails only the reads it carried; the next reads are answered', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    let fail = true;
    const db: Pick<Database, 'query'> = {
      query: (text, params, name) => (fail ? Promise.reject(new Error('connection lost')) : h.deps.db.query(text, params, name)),
    };
    const reads = new BalanceReads(db);
    const failed = await Promise.allSettled([reads.read(t.deploymentId), reads.read(t.deploymentId)]);
    expect(failed.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    // A driver that throws instead of rejecting fails its reads too, and the reader goes on.
    const throwing = new BalanceReads({
      query: () => {
        if (fail) throw new Error('driver bug');
        return h.deps.db.query('SELECT * FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
      },
    } as Pick<Database, 'query'>);
    await expect(throwing.read(t.deploymentId)).rejects.toThrow('driver bug');
    fail = false;
    expect(await throwing.read(t.deploymentId)).toMatchObject({ deployment_id: t.deploymentId });
    expect(await reads.read(t.deploymentId)).toMatchObject({ deployment_id: t.deploymentId });
  });
});

describe('checks whose cached balance expired', () => {
  const check = (deploymentId: string) =>
    h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: deploymentId, tool_name: 'x' },
    });

  it("a hot deployment's checks that miss its copy together make one read", async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expect(json(await check(t.deploymentId)).allowed).toBe(true);
    h.clock.advance(h.config.balanceCacheMs + 1);
    const reads = watchStatements(h.deps.db, /\bFROM\s+credit_balances\b/i);
    const answers = await Promise.all(Array.from({ length: 20 }, () => check(t.deploymentId)));
    const statements = reads.stop();
    for (const res of answers) expect(json(res)).toMatchObject({ allowed: true, credits_available: 100 });
    expect(statements).toHaveLength(1);
  });

  it('a check that would refuse on a shared read reads the row again for itself', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await setMonthly(t.deploymentId, 0);
    expect(json(await check(t.deploymentId))).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    h.clock.advance(h.config.balanceCacheMs + 1);
    // The shared read may have begun before a grant committed: a refusal is judged on a read of its own.
    const reads = watchStatements(h.deps.db, /\bFROM\s+credit_balances\b/i);
    expect(json(await check(t.deploymentId))).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(reads.stop()).toHaveLength(2);
  });
});
