import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY, HOUR, systemClock } from '../src/clock.js';
import type { Ctx } from '../src/context.js';
import type { Database } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { settleAiTokens } from '../src/modules/credits/ai-usage.js';
import { deleteExpiredUsage, ensureUsagePartitions, monthPartition, monthStart, usagePartitions } from '../src/modules/credits/index.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { findOwedMismatches } from '../src/modules/credits/owed.js';
import { adminHeaders, createHarness, createTenant, databaseBefore, type Harness, isolatedDatabase, json, type Tenant } from './harness.js';
import { usageFixtures } from './usage-fixtures.js';

/**
 * Monthly partitions of usage_records (docs/usage-analytics.md, "Partitions"): an existing table is
 * attached as it is, records of a month without a partition wait in the default partition and move
 * when it is created, and the retention drops whole months — every summary unchanged throughout, the
 * ledger whole, what an AI call could not pay kept, and a refund of a dropped record 410. These tests
 * change what every tenant of a database sees, so each runs on a database of its own.
 */

const partitionOf = async (db: Database, id: string) =>
  (await db.query<{ part: string }>('SELECT tableoid::regclass::text AS part FROM usage_records WHERE id = $1', [id]))[0]?.part;

const SUMMARIES = ['group_by=tool', 'group_by=day', 'group_by=mcp_user', 'group_by=day&split_by=tool', 'group_by=model'];

/** Every summary of the organization over [from, to), without the moment it was read at. */
async function summaries(h: Harness, t: Tenant, from: Date, to: Date): Promise<unknown[]> {
  const f = usageFixtures(() => h);
  const range = `&from=${from.toISOString()}&to=${to.toISOString()}`;
  const all = await Promise.all(SUMMARIES.map((q) => f.summary({ 'x-api-key': t.apiKey }, t.organizationId, `?${q}${range}`)));
  return all.map(({ as_of: _at, ...rest }) => rest);
}

const ROLLUPS = `SELECT 'h' AS k, deployment_id, hour AS at, tool_name AS key, calls::int, credits::int, refunded::int, input_tokens::int
                 FROM usage_rollup_hours WHERE organization_id = $1
                 UNION ALL
                 SELECT 'd', deployment_id, day, end_user, calls::int, credits::int, refunded::int, 0
                 FROM usage_rollup_days WHERE organization_id = $1 ORDER BY 1, 2, 3, 4`;

const refund = (h: Harness, usageId: string, amount?: number) =>
  h.request({ method: 'POST', url: `/api/v1/admin/usage/${usageId}/refund`, headers: adminHeaders(h), payload: { reason: 'test', ...(amount ? { amount } : {}) } });

const aiCtx = (h: Harness, t: Tenant): Ctx => ({ ...h.ctx, actor: { type: 'deployment', deploymentId: t.deploymentId, organizationId: t.organizationId } });

describe('an existing usage_records is partitioned in place', () => {
  let h: Harness;
  let db: Database;
  beforeAll(async () => {
    // The migrations as they were before the partitions (and before AI request ids had their own table).
    db = await databaseBefore('0028');
    h = await createHarness({}, '2026-01-15T12:00:00.000Z', db);
  });
  afterAll(async () => {
    await h?.close();
    await db?.close();
  });

  it('keeps every record, rollup and summary, and the AI request ids recorded before', async () => {
    expect((await db.query<{ relkind: string }>("SELECT relkind FROM pg_class WHERE oid = 'usage_records'::regclass"))[0]!.relkind).toBe('r');
    const t = await createTenant(h, { tier: 'launch', purchased: 50 });
    const f = usageFixtures(() => h);
    const tool = await f.toolFor('rag_query');
    const ids: string[] = [];
    for (const at of ['2026-01-15T12:00:00Z', '2026-02-03T08:00:00Z', '2026-03-20T23:30:00Z']) {
      ids.push((await f.record(t.deploymentId, tool, { at, mcpUserId: 'ann' })).usage_id!);
    }
    expect((await refund(h, ids[1]!, 1)).statusCode).toBe(200);
    // An AI call as the version before wrote it: its request id on the record itself.
    const [old] = await db.query<{ id: string }>(
      `INSERT INTO usage_records (organization_id, deployment_id, metric, quantity, tool_name, metadata, success, invocation_id, "timestamp")
       VALUES ($1, $2, 'ai_tokens', 0, 'gpt-4o-mini', $3, true, 'chatcmpl-old', '2026-03-21T00:00:00Z') RETURNING id`,
      [
        t.organizationId,
        t.deploymentId,
        JSON.stringify({ input_tokens: 10, output_tokens: 5, tokens: 15, tokens_over_limit: 0, model_class: 'standard', credits_due: 0 }),
      ],
    );
    const records = await db.query('SELECT * FROM usage_records WHERE organization_id = $1 ORDER BY id', [t.organizationId]);
    // What the summary reads (it is not asked here: this code's summary needs the migrations after these).
    const rollups = await db.query(ROLLUPS, [t.organizationId]);

    await runMigrations(db);

    expect((await db.query<{ relkind: string }>("SELECT relkind FROM pg_class WHERE oid = 'usage_records'::regclass"))[0]!.relkind).toBe('p');
    const next = monthStart(systemClock.now(), 1);
    const parts = await usagePartitions(db);
    expect(parts.map((p) => ({ name: p.name, from: p.from, to: p.to, isDefault: p.isDefault }))).toEqual([
      { name: 'usage_records_before', from: null, to: next, isDefault: false },
      { name: monthPartition(next), from: next, to: monthStart(next, 1), isDefault: false },
      { name: 'usage_records_default', from: null, to: null, isDefault: true },
    ]);
    for (const id of [...ids, old!.id]) expect(await partitionOf(db, id)).toBe('usage_records_before');
    expect(await db.query('SELECT * FROM usage_records WHERE organization_id = $1 ORDER BY id', [t.organizationId])).toEqual(records);
    expect(await db.query(ROLLUPS, [t.organizationId])).toEqual(rollups);

    // The old AI request id is still known: the same call again is a replay, nothing counted twice.
    const again = await settleAiTokens(aiCtx(h, t), { id: t.deploymentId, organization_id: t.organizationId }, {
      model: 'gpt-4o-mini',
      modelClass: 'standard',
      inputTokens: 10,
      outputTokens: 5,
      requestId: 'chatcmpl-old',
    });
    expect(again).toMatchObject({ replayed: true, usageId: old!.id });
    // New records, refunds and the ledger check work on the partitioned table.
    h.clock.set('2026-03-22T00:00:00Z');
    const fresh = await f.record(t.deploymentId, tool);
    expect((await refund(h, fresh.usage_id!)).statusCode).toBe(200);
    expect((await refund(h, ids[0]!)).statusCode).toBe(200);
    expect(await findLedgerMismatches(db, t.organizationId)).toEqual([]);
    // Once is enough: a second run changes nothing.
    await runMigrations(db);
    expect((await usagePartitions(db)).map((p) => p.name)).toEqual(parts.map((p) => p.name));
  });
});

describe('monthly partitions and their retention', () => {
  let h: Harness;
  let db: Database;
  /** The first month with a partition of its own (the migrations made it). */
  let first: Date;
  beforeAll(async () => {
    db = await isolatedDatabase();
    first = (await usagePartitions(db)).find((p) => p.name === 'usage_records_before')!.to!;
    h = await createHarness({ usageRetentionDays: 35 }, first.toISOString(), db);
  });
  afterAll(async () => {
    await h?.close();
    await db?.close();
  });
  const f = usageFixtures(() => h);

  it('a month without a partition waits in the default partition and moves when its partition is made', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 50 });
    const tool = await f.toolFor('rag_query');
    const inFirst = await f.record(t.deploymentId, tool, { at: new Date(first.getTime() + DAY).toISOString(), mcpUserId: 'ann' });
    expect(await partitionOf(db, inFirst.usage_id!)).toBe(monthPartition(first));
    const second = monthStart(first, 1);
    const waiting = await f.record(t.deploymentId, tool, { at: new Date(second.getTime() + 2 * DAY + 5 * HOUR).toISOString(), mcpUserId: 'bob' });
    expect(await partitionOf(db, waiting.usage_id!)).toBe('usage_records_default');
    expect((await refund(h, waiting.usage_id!, 1)).statusCode).toBe(200);
    const range = [first, monthStart(first, 3)] as const;
    const before = await summaries(h, t, ...range);
    const rollups = await db.query(ROLLUPS, [t.organizationId]);

    // The worker's pass at this clock: this month and the next.
    expect((await ensureUsagePartitions(db, h.clock.now())).created).toEqual([monthPartition(second), monthPartition(monthStart(first, 2))]);
    expect(await partitionOf(db, waiting.usage_id!)).toBe(monthPartition(second));
    expect(await summaries(h, t, ...range)).toEqual(before);
    expect(await db.query(ROLLUPS, [t.organizationId])).toEqual(rollups);
    expect((await ensureUsagePartitions(db, h.clock.now())).created).toEqual([]);
    expect(await findLedgerMismatches(db, t.organizationId)).toEqual([]);
  });

  type Op =
    | { kind: 'record'; month: 0 | 1 | 2; at: number; user: string | null }
    | { kind: 'refund'; pick: number; whole: boolean }
    | { kind: 'ai'; month: 0 | 1 | 2; at: number; tokens: number };
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('record' as const), month: fc.constantFrom(0 as const, 1 as const, 2 as const), at: fc.integer({ min: 0, max: 27 * 24 }), user: fc.constantFrom(null, 'ann', 'bob') }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('refund' as const), pick: fc.nat(), whole: fc.boolean() }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('ai' as const), month: fc.constantFrom(0 as const, 1 as const, 2 as const), at: fc.integer({ min: 0, max: 27 * 24 }), tokens: fc.integer({ min: 1, max: 3_000_000 }) }) },
  );

  it('dropping whole months leaves every summary and the ledger as they were; what went is 410, what is owed stays', async () => {
    const tools = [await f.toolFor('rag_query'), await f.toolFor('task_basic')];
    let run = 0;
    const seen = { dropped: 0, refunds: 0, defaulted: 0, keptFromDropped: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 20 }), fc.boolean(), async (ops, workerRan) => {
        // Each run its own three months, later than every earlier run's (their partitions are gone).
        const base = monthStart(first, 4 + 4 * run++);
        const months = [0, 1, 2].map((m) => monthStart(base, m));
        h.clock.set(base.toISOString());
        // The worker made the months' partitions, or it did not run and they wait in the default partition.
        if (workerRan) for (const m of months) await ensureUsagePartitions(db, m);
        const t = await createTenant(h, { tier: 'launch', purchased: 20 });
        const spent: string[] = [];
        // An AI call a second deployment cannot pay in full, in the first month: what it owes outlives
        // the month (on its own deployment, so that the debt does not hold back the records below).
        h.clock.set(new Date(base.getTime() + HOUR).toISOString());
        const debtor = { ...t, deploymentId: await f.addDeployment(t.organizationId) };
        const owing = await settleAiTokens(aiCtx(h, debtor), { id: debtor.deploymentId, organization_id: t.organizationId }, {
          model: 'gpt-4o-mini',
          modelClass: 'standard',
          inputTokens: 10,
          outputTokens: 20_000_000,
          requestId: `owing-${run}`,
        });
        expect(owing.creditsShort).toBeGreaterThan(0);
        if (workerRan) seen.keptFromDropped += 1;
        // The clock only moves forward: an op earlier than the one before it happens at the same moment.
        for (const o of ops) {
          if (o.kind === 'record') {
            h.clock.set(new Date(Math.max(h.clock.now().getTime(), months[o.month]!.getTime() + o.at * HOUR)).toISOString());
            const r = await f.record(t.deploymentId, tools[o.at % 2]!, { mcpUserId: o.user });
            if (r.success && r.credits_used > 0) spent.push(r.usage_id!);
          } else if (o.kind === 'ai') {
            h.clock.set(new Date(Math.max(h.clock.now().getTime(), months[o.month]!.getTime() + o.at * HOUR)).toISOString());
            await settleAiTokens(aiCtx(h, t), { id: t.deploymentId, organization_id: t.organizationId }, {
              model: 'gpt-4o-mini',
              modelClass: 'standard',
              inputTokens: 10,
              outputTokens: o.tokens,
              requestId: `req-${run}-${o.at}-${o.tokens}`,
            });
          } else {
            const id = spent.length > 0 ? spent[o.pick % spent.length] : undefined;
            const row = id ? (await db.query<{ quantity: number; refunded: number }>('SELECT quantity, refunded FROM usage_records WHERE id = $1', [id]))[0]! : undefined;
            if (id && row && row.quantity > row.refunded) {
              const res = await refund(h, id, o.whole ? row.quantity - row.refunded : 1);
              expect(res.statusCode, res.body).toBe(200);
              seen.refunds += 1;
            }
          }
        }
        const range = [monthStart(base, -1), monthStart(base, 4)] as const;
        const all = await db.query<{ id: string; timestamp: Date; credits_short: number; part: string }>(
          'SELECT id, "timestamp", credits_short, tableoid::regclass::text AS part FROM usage_records WHERE organization_id = $1',
          [t.organizationId],
        );
        seen.defaulted += all.filter((r) => r.part === 'usage_records_default').length;
        const before = await summaries(h, t, ...range);

        // Past the retention of the first two months: 35 days after the third began.
        h.clock.set(new Date(months[2]!.getTime() + 35 * DAY + HOUR).toISOString());
        const cutoff = new Date(h.clock.now().getTime() - 35 * DAY);
        for (let n = 1; n > 0; ) n = await deleteExpiredUsage(db, h.clock.now(), 35, 1000);
        const names = (await usagePartitions(db)).map((p) => p.name);
        for (const m of months.slice(0, 2)) expect(names).not.toContain(monthPartition(m));
        if (workerRan) expect(names).toContain(monthPartition(months[2]!));

        expect(await summaries(h, t, ...range)).toEqual(before);
        expect(await findLedgerMismatches(db, t.organizationId)).toEqual([]);
        expect(await findOwedMismatches(db, t.organizationId)).toEqual([]);
        // Left: the third month (not past the cutoff as a whole) and what an AI call could not pay.
        const left = new Set((await db.query<{ id: string }>('SELECT id FROM usage_records WHERE organization_id = $1', [t.organizationId])).map((r) => r.id));
        const month3 = monthStart(months[2]!, 0).getTime();
        for (const r of all) {
          const kept = r.credits_short > 0 || r.timestamp.getTime() >= (workerRan ? month3 : cutoff.getTime());
          expect(left.has(r.id), `${r.id} at ${r.timestamp.toISOString()} in ${r.part}`).toBe(kept);
          if (!kept) seen.dropped += 1;
          // A charged record that went (its ledger rows remain) is 410; a refusal left no ledger row to tell by.
          if (!kept && spent.includes(r.id)) {
            const gone = await refund(h, r.id, 1);
            expect(gone.statusCode, gone.body).toBe(410);
            expect(json(gone)).toMatchObject({ code: 'USAGE_RECORD_EXPIRED' });
          }
        }
      }),
      // The first two runs: one with the worker's partitions and a refund, one without and an AI call.
      {
        numRuns: 6,
        examples: [
          [[{ kind: 'record', month: 1, at: 3, user: 'ann' }, { kind: 'refund', pick: 0, whole: false }], true],
          [[{ kind: 'record', month: 0, at: 5, user: null }, { kind: 'ai', month: 0, at: 6, tokens: 3_000_000 }], false],
        ],
      },
    );
    expect(seen.dropped).toBeGreaterThan(0);
    expect(seen.refunds).toBeGreaterThan(0);
    expect(seen.defaulted).toBeGreaterThan(0);
    expect(seen.keptFromDropped).toBeGreaterThan(0);
  });
});
