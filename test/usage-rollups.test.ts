import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOUR } from '../src/clock.js';
import type { Ctx } from '../src/context.js';
import { holdAiTokens, settleAiTokens } from '../src/modules/credits/ai-usage.js';
import { creditFixtures } from './credit-fixtures.js';
import { createHarness, createTenant, type Harness } from './harness.js';
import { DAYS_FROM_RECORDS, DAYS_FROM_ROLLUP, HOURS_FROM_RECORDS, HOURS_FROM_ROLLUP, usageFixtures } from './usage-fixtures.js';

/**
 * The rollups (docs/usage-analytics.md, Rollups) against the records they count: after any sequence
 * of records (allowed and refused, on two deployments, with and without end users, over days),
 * refunds (partial and whole) and AI calls settled, both rollup tables equal the same groups computed
 * from usage_records, and the summaries read from them equal the raw records' sums.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness({}, '2026-05-01T00:00:00.000Z');
});
afterAll(async () => {
  await h?.close();
});
const f = usageFixtures(() => h);
const credits = creditFixtures(() => h);

type Op =
  | { kind: 'record'; dep: 0 | 1; tool: 0 | 1 | 2; user: string | null; later: number }
  | { kind: 'refund'; pick: number; whole: boolean }
  | { kind: 'ai'; dep: 0 | 1; tokens: number; later: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('record' as const), dep: fc.constantFrom(0 as const, 1 as const), tool: fc.constantFrom(0 as const, 1 as const, 2 as const), user: fc.constantFrom(null, 'ann', 'bob'), later: fc.integer({ min: 0, max: 7 * 60 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('refund' as const), pick: fc.nat(), whole: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('ai' as const), dep: fc.constantFrom(0 as const, 1 as const), tokens: fc.integer({ min: 1, max: 5000 }), later: fc.integer({ min: 0, max: 120 }) }) },
);

interface Sum {
  key: string | null;
  calls: number;
  credits: number;
  credits_refunded: number;
}

async function rawBy(organizationId: string, keySql: string): Promise<Sum[]> {
  return h.deps.db.query<Sum>(
    `SELECT ${keySql} AS key, count(*)::int AS calls, COALESCE(sum(quantity - refunded) FILTER (WHERE success), 0)::int AS credits,
            COALESCE(sum(refunded) FILTER (WHERE success), 0)::int AS credits_refunded
     FROM usage_records WHERE organization_id = $1 GROUP BY 1 ORDER BY 1`,
    [organizationId],
  );
}

const byKey = (groups: Array<{ key: string | null; calls: number; credits: number; credits_refunded: number }>) =>
  groups
    .filter((g) => g.calls > 0)
    .map((g) => ({ key: g.key, calls: g.calls, credits: g.credits, credits_refunded: g.credits_refunded }))
    .sort((a, b) => String(a.key).localeCompare(String(b.key)));

describe('rollups against the records', () => {
  it('any sequence of records, refunds and AI calls leaves both rollups equal to the records, and the summaries to their sums', async () => {
    const tools = [await f.toolFor('rag_query'), await f.toolFor('task_basic'), await f.toolFor('crew_execute')];
    const seen = { ai: 0, refunds: 0, refused: 0 };
    const errors: string[] = [];
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
        h.clock.set('2026-05-01T00:00:00.000Z');
        const t = await createTenant(h, { tier: 'launch', purchased: 8, scopes: ['read'] });
        const deployments = [t.deploymentId, await f.addDeployment(t.organizationId)];
        // Little to spend, so some calls are refused (and still counted as calls).
        for (const id of deployments) await credits.setMonthly(id, 6);
        const spent: string[] = [];
        for (const o of ops) {
          if (o.kind === 'record') {
            h.clock.advance(o.later * 60_000);
            const r = await f.record(deployments[o.dep]!, tools[o.tool]!, { mcpUserId: o.user });
            if (r.success && r.usage_id && r.credits_used > 0) spent.push(r.usage_id);
            if (!r.success) seen.refused += 1;
          } else if (o.kind === 'refund') {
            const id = spent.length > 0 ? spent[o.pick % spent.length] : undefined;
            if (!id) continue;
            const row = (await h.deps.db.query<{ quantity: number; refunded: number }>('SELECT quantity, refunded FROM usage_records WHERE id = $1', [id]))[0]!;
            const left = row.quantity - row.refunded;
            if (left > 0) {
              await f.refund(id, o.whole ? left : Math.max(1, Math.floor(left / 2)));
              seen.refunds += 1;
            }
          } else {
            h.clock.advance(o.later * 60_000);
            const ctx: Ctx = { ...h.ctx, actor: { type: 'deployment', deploymentId: deployments[o.dep]!, organizationId: t.organizationId } };
            const dep = { id: deployments[o.dep]!, organization_id: t.organizationId };
            const expiresAt = new Date(h.clock.now().getTime() + HOUR);
            const held = await holdAiTokens(ctx, dep, { model: 'gpt-4o-mini', modelClass: 'standard', promptTokens: 10, outputPerChoice: o.tokens, choices: 1, expiresAt }).catch((e: unknown) => { errors.push(String((e as Error).message)); return null; });
            if (held) seen.ai += 1;
            if (held) await settleAiTokens(ctx, dep, { model: 'gpt-4o-mini', modelClass: 'standard', holdId: held.id, inputTokens: 10, outputTokens: o.tokens });
          }
        }
        const org = t.organizationId;
        expect(await h.deps.db.query(HOURS_FROM_ROLLUP, [org])).toEqual(await h.deps.db.query(HOURS_FROM_RECORDS, [org]));
        expect(await h.deps.db.query(DAYS_FROM_ROLLUP, [org])).toEqual(await h.deps.db.query(DAYS_FROM_RECORDS, [org]));

        const headers = { 'x-api-key': t.apiKey };
        const range = `from=2026-04-30T00:00:00Z&to=${encodeURIComponent(new Date(h.clock.now().getTime() + HOUR).toISOString())}`;
        const summary = (groupBy: string) => f.summary(headers, org, `?group_by=${groupBy}&${range}`);
        expect(byKey((await summary('tool')).groups)).toEqual(await rawBy(org, 'tool_name'));
        expect(byKey((await summary('action')).groups)).toEqual(await rawBy(org, 'metric'));
        expect(byKey((await summary('deployment')).groups)).toEqual(await rawBy(org, 'deployment_id::text'));
        expect(byKey((await summary('mcp_user')).groups)).toEqual(
          (await rawBy(org, 'mcp_user_id')).sort((a, b) => String(a.key).localeCompare(String(b.key))),
        );
        const days = await summary('day');
        expect(byKey(days.groups)).toEqual(await rawBy(org, `to_char(date_bin('1 day'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.000"Z"')`));
      }),
      { numRuns: 12 },
    );
    // The runs reached every kind of change the rollups follow.
    expect(seen.ai, errors.slice(0, 3).join(' | ')).toBeGreaterThan(0);
    expect(seen.refunds).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
  });
});
