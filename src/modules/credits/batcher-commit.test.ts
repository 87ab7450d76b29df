import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batcherFixtures, resultOf } from '../../../test/batcher-fixtures.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createPassesHarness, dbKind, type Harness, unique } from '../../../test/harness.js';
import { ServiceUnavailableError } from '../../errors.js';

/**
 * Group commit (docs/adr/0004-group-commit.md): requests submitted together are applied in one transaction, each deployment's
 * in arrival order, and answered after the commit. These tests submit in one tick to a batcher with a
 * window, so the requests form one batch, and look at what it wrote. Here: the commit.
 * Shared helpers: test/batcher-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  // A database of its own on PostgreSQL: these tests add and drop triggers on usage_records, and DDL on
  // the run's shared database deadlocked with another file's writes to the same table in CI.
  h = await createPassesHarness();
});
afterAll(async () => {
  await h.close();
});
const f = creditFixtures(() => h);
const { batcher, request, usageOf } = batcherFixtures(() => h);

describe('commit', () => {
  // A batch's writes travel with its COMMIT (docs/adr/0004-group-commit.md, "Round trips"). An error
  // the database answers means nothing was committed, so the requests can run again one by one; a
  // connection lost meanwhile leaves it unknown, so none of them is run again by the server.
  it('a batch whose COMMIT is refused commits nothing and runs one by one: only the refused request fails', async () => {
    const t = await f.tenantWith(10);
    const tool = unique('refused-at-commit');
    const fn = `refuse_${tool.replace(/-/g, '_')}`;
    await h.deps.db.query(`CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'refused at commit' USING ERRCODE = '23514'; END $$`);
    await h.deps.db.query(`CREATE CONSTRAINT TRIGGER ${fn} AFTER INSERT ON usage_records DEFERRABLE INITIALLY DEFERRED
      FOR EACH ROW WHEN (NEW.tool_name = '${tool}') EXECUTE FUNCTION ${fn}()`);
    try {
      const b = batcher();
      const outcomes = await Promise.allSettled([
        b.submit(request(t, 1, { invocationId: `${tool}-1`, claimInvocation: { requestHash: 'h' } })),
        b.submit(request(t, 1, { toolName: tool })),
        b.submit(request(t, 1)),
      ]);
      expect(b.stats).toMatchObject({ batches: 0, fallbacks: 1 });
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((outcomes[1] as PromiseRejectedResult).reason).toMatchObject({ code: '23514' });
      expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2 });
      expect((await usageOf(t)).filter((u) => u.success)).toHaveLength(2);
      await f.expectLedgerConsistent(t);
    } finally {
      await h.deps.db.query(`DROP TRIGGER ${fn} ON usage_records`);
      await h.deps.db.query(`DROP FUNCTION ${fn}()`);
    }
  });

  it.runIf(dbKind === 'postgres')(
    'a batch whose connection is lost while its writes and COMMIT are in flight: every request is refused, none run again',
    async () => {
      const t = await f.tenantWith(10);
      const tool = unique('lost-at-commit');
      const fn = `stall_${tool.replace(/-/g, '_')}`;
      // The batch's write statement stalls on this tool's usage row until its backend is terminated.
      await h.deps.db.query(`CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$`);
      await h.deps.db.query(`CREATE TRIGGER ${fn} BEFORE INSERT ON usage_records FOR EACH ROW WHEN (NEW.tool_name = '${tool}') EXECUTE FUNCTION ${fn}()`);
      try {
        const b = batcher();
        const settled = Promise.allSettled([
          b.submit(request(t, 1, { toolName: tool })),
          b.submit(request(t, 1, { invocationId: `${tool}-1`, claimInvocation: { requestHash: 'h' } })),
        ]);
        let pid: number | undefined;
        for (let attempt = 0; attempt < 200 && pid === undefined; attempt++) {
          const [row] = await h.deps.db.query<{ pid: number }>(
            `SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%WITH bal AS%' AND datname = current_database()`,
          );
          pid = row?.pid;
          if (pid === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
        }
        expect(pid).toBeDefined();
        await h.deps.db.query('SELECT pg_terminate_backend($1)', [pid]);
        const outcomes = await settled;
        expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
        for (const o of outcomes) expect((o as PromiseRejectedResult).reason).toBeInstanceOf(ServiceUnavailableError);
        expect(b.stats).toMatchObject({ batches: 0, fallbacks: 0 });
        // Terminated before its COMMIT ran: nothing of the batch stays.
        expect(await f.balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0 });
        expect(await usageOf(t)).toEqual([]);
        // The batcher goes on with a fresh connection.
        expect(resultOf(await b.submit(request(t, 1))).deducted).toBe(true);
        await f.expectLedgerConsistent(t);
      } finally {
        await h.deps.db.query(`DROP TRIGGER ${fn} ON usage_records`);
        await h.deps.db.query(`DROP FUNCTION ${fn}()`);
      }
    },
  );
});
