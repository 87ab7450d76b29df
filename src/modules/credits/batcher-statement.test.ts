import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batcherFixtures } from '../../../test/batcher-fixtures.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, dbKind, type Harness } from '../../../test/harness.js';
import { WRITE_COLUMN_NAMES, type WriteShape, writeStatement } from './engine/write.js';

/**
 * Group commit (docs/adr/0004-group-commit.md): requests submitted together are applied in one transaction, each deployment's
 * in arrival order, and answered after the commit. These tests submit in one tick to a batcher with a
 * window, so the requests form one batch, and look at what it wrote. Here: plans, and the write statement of
 * the parts a batch needs.
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

describe('plans', () => {
  it.runIf(dbKind === 'postgres')(
    "plans a batch's statements for their own arrays, and only inside the batch's transaction",
    async () => {
      // A generic plan cached on a pooled connection while `invocations` held a few hundred rows kept
      // scanning the whole table once it had grown (about 12 ms per batch at 27,000 rows, growing):
      // the batch transaction asks PostgreSQL for a plan per execution (docs/adr/0004-group-commit.md, "Plans").
      const t = await f.tenantWith(10);
      const b = batcher();
      const [, mode] = await Promise.all([
        b.submit(request(t, 1, { invocationId: 'plans-1', claimInvocation: { requestHash: 'h' } })),
        b.within(t.deploymentId, async (tx) => (await tx.query<{ plan_cache_mode: string }>('SHOW plan_cache_mode'))[0]!.plan_cache_mode),
      ]);
      expect(mode).toBe('force_custom_plan');
      // SET LOCAL: the connection goes back to the pool with the server's default.
      const after = await h.deps.db.transaction(async (tx) => (await tx.query<{ plan_cache_mode: string }>('SHOW plan_cache_mode'))[0]!.plan_cache_mode);
      expect(after).toBe('auto');
    },
  );
});

describe('the write statement, of the parts a batch needs', () => {
  // Every combination of the optional parts (unchanged rows only with remembered ones; holds counted in
  // budget windows only on the locking path, which makes holds).
  const shapes: WriteShape[] = [];
  for (let bits = 0; bits < 512; bits++) {
    const [remembered, unchanged, refused, released, metered, alerts, counted, windowed, heldCounted] = [0, 1, 2, 3, 4, 5, 6, 7, 8].map(
      (i) => (bits & (1 << i)) !== 0,
    ) as [boolean, boolean, boolean, boolean, boolean, boolean, boolean, boolean, boolean];
    if (unchanged && !remembered) continue;
    if (heldCounted && remembered) continue;
    shapes.push({ remembered, unchanged, refused, released, metered, alerts, counted, windowed, heldCounted });
  }

  it('every shape names only arrays the batcher makes, each once per number, and a part only when the shape has it', () => {
    expect(shapes).toHaveLength(256);
    const names = new Set<string>();
    for (const shape of shapes) {
      const statement = writeStatement(shape);
      expect(new Set(statement.names).size).toBe(statement.names.length);
      for (const name of statement.names) expect(WRITE_COLUMN_NAMES).toContain(name);
      expect(statement.text).not.toMatch(/\$[a-z]/);
      const numbers = [...statement.text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]));
      expect(Math.max(...numbers)).toBe(statement.names.length);
      expect(statement.text.includes('unchanged AS')).toBe(shape.unchanged);
      expect(statement.text.includes('refused AS')).toBe(shape.refused);
      expect(statement.text.includes('released AS')).toBe(shape.released);
      expect(statement.text.includes('meter_event_outbox')).toBe(shape.metered);
      expect(statement.text.includes('outbox_events (')).toBe(shape.alerts);
      expect(statement.text.includes('win AS (\n  -- Budget windows')).toBe(shape.counted === true);
      expect(statement.text.includes('heldwin AS')).toBe(shape.heldCounted === true);
      expect(statement.text.includes('$usage_windows') || statement.names.includes('usage_windows')).toBe(shape.windowed === true);
      names.add(statement.name);
    }
    // One prepared statement per shape; every array is named by some shape.
    expect(names.size).toBe(shapes.length);
    expect(new Set(shapes.flatMap((s) => writeStatement(s).names))).toEqual(new Set(WRITE_COLUMN_NAMES));
  });

  it('every shape runs on this database (empty arrays, rolled back)', async () => {
    for (const shape of shapes) {
      const statement = writeStatement(shape);
      const rolledBack = new Error('rolled back');
      const run = h.deps.db.transaction(async (tx) => {
        const [row] = await tx.query<{ usage: number; versions: unknown[]; fresh?: number }>(
          statement.text,
          statement.names.map(() => '{}'),
          statement.name,
        );
        expect(row).toMatchObject({ usage: 0, versions: [] });
        if (shape.remembered) expect(row!.fresh).toBe(1);
        throw rolledBack;
      });
      await expect(run, JSON.stringify(shape)).rejects.toBe(rolledBack);
    }
  });
});
