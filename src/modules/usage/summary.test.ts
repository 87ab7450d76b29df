import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, unique } from '../../../test/harness.js';
import { sumGroups, usageFixtures } from '../../../test/usage-fixtures.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/** GET /organizations/{id}/usage/summary over usage recorded at chosen clock times (docs/usage-analytics.md). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const f = usageFixtures(() => h);
const key = (apiKey: string) => ({ 'x-api-key': apiKey });
const pick = (groups: Array<{ key: string | null; calls: number; credits: number }>) => groups.map((g) => [g.key, g.calls, g.credits]);

describe('GET /organizations/{id}/usage/summary by time', () => {
  it('UTC day and hour buckets, empty ones included, and offsets normalised to UTC', async () => {
    h.clock.set('2026-02-01T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    const rag = await f.toolFor('rag_query');
    for (const at of ['2026-02-03T23:59:59.000Z', '2026-02-04T00:00:00.000Z', '2026-02-04T10:15:00.000Z', '2026-02-04T10:45:00.000Z', '2026-02-04T12:00:00.000Z', '2026-02-06T08:00:00.000Z']) {
      await f.record(t.deploymentId, rag, { at });
    }
    h.clock.set('2026-02-07T00:00:00.000Z');
    const days = await f.summary(key(t.apiKey), t.organizationId, '?group_by=day&from=2026-02-03T00:00:00Z&to=2026-02-08T00:00:00Z');
    expect(days).toMatchObject({ organization_id: t.organizationId, deployment_id: null, group_by: 'day', from: '2026-02-03T00:00:00.000Z', to: '2026-02-08T00:00:00.000Z' });
    expect(pick(days.groups)).toEqual([
      ['2026-02-03T00:00:00.000Z', 1, 2],
      ['2026-02-04T00:00:00.000Z', 4, 8],
      ['2026-02-05T00:00:00.000Z', 0, 0],
      ['2026-02-06T00:00:00.000Z', 1, 2],
      ['2026-02-07T00:00:00.000Z', 0, 0],
    ]);
    expect(days.totals).toEqual({ calls: 6, successful: 6, failed: 0, credits: 12, credits_refunded: 0, input_tokens: 0, output_tokens: 0 });
    expect(sumGroups(days.groups)).toEqual(days.totals);

    // +02:00 midnight is 22:00Z the day before: the 23:59:59Z record is inside, in its own UTC day.
    const offset = await f.summary(key(t.apiKey), t.organizationId, `?from=${encodeURIComponent('2026-02-04T00:00:00+02:00')}&to=${encodeURIComponent('2026-02-05T00:00:00+00:00')}`);
    expect(offset.from).toBe('2026-02-03T22:00:00.000Z');
    expect(offset.to).toBe('2026-02-05T00:00:00.000Z');
    expect(pick(offset.groups)).toEqual([
      ['2026-02-03T00:00:00.000Z', 1, 2],
      ['2026-02-04T00:00:00.000Z', 4, 8],
    ]);
    // …and 02:00+02:00 is midnight UTC: from is inclusive, so the 00:00:00Z record counts and 23:59:59Z does not.
    const midnight = await f.summary(key(t.apiKey), t.organizationId, `?from=${encodeURIComponent('2026-02-04T02:00:00+02:00')}&to=2026-02-05T00:00:00Z`);
    expect(pick(midnight.groups)).toEqual([['2026-02-04T00:00:00.000Z', 4, 8]]);
    // to is exclusive.
    const before = await f.summary(key(t.apiKey), t.organizationId, '?from=2026-02-03T00:00:00Z&to=2026-02-04T00:00:00Z');
    expect(before.totals.calls).toBe(1);

    const hours = await f.summary(key(t.apiKey), t.organizationId, '?group_by=hour&from=2026-02-04T10:00:00Z&to=2026-02-04T13:00:00Z');
    expect(pick(hours.groups)).toEqual([
      ['2026-02-04T10:00:00.000Z', 2, 4],
      ['2026-02-04T11:00:00.000Z', 0, 0],
      ['2026-02-04T12:00:00.000Z', 1, 2],
    ]);
    // An unaligned range is widened to whole hours, the rollups' grain (docs/usage-analytics.md, Rollups).
    const partial = await f.summary(key(t.apiKey), t.organizationId, '?group_by=hour&from=2026-02-04T10:30:00Z&to=2026-02-04T11:59:00Z');
    expect(partial).toMatchObject({ from: '2026-02-04T10:00:00.000Z', to: '2026-02-04T12:00:00.000Z' });
    expect(pick(partial.groups)).toEqual([
      ['2026-02-04T10:00:00.000Z', 2, 4],
      ['2026-02-04T11:00:00.000Z', 0, 0],
    ]);

    // Defaults: the last 30 days ending now, by day.
    const recent = await f.summary(key(t.apiKey), t.organizationId);
    expect(recent).toMatchObject({ group_by: 'day', from: '2026-01-08T00:00:00.000Z', to: '2026-02-07T00:00:00.000Z' });
    expect(recent.groups).toHaveLength(30);
    expect(recent.totals.calls).toBe(6);
    expect(recent.groups.filter((g) => g.calls === 0)).toHaveLength(27);
  });

  it('across a monthly period reset: credits are the deductions net of refunds, as in the ledger and the balance', async () => {
    h.clock.set('2026-04-10T12:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    const rag = await f.toolFor('rag_query');
    const advanced = await f.toolFor('task_advanced');
    await f.record(t.deploymentId, rag, { at: '2026-05-10T11:59:59.000Z' }); // the first period's last second
    const late = await f.record(t.deploymentId, advanced, { at: '2026-05-10T12:00:01.000Z' }); // the second period
    await f.record(t.deploymentId, rag, { at: '2026-05-11T00:00:00.000Z' });
    const all = await f.summary(key(t.apiKey), t.organizationId, '?from=2026-04-10T00:00:00Z&to=2026-05-12T00:00:00Z');
    expect(all.totals).toEqual({ calls: 3, successful: 3, failed: 0, credits: 7, credits_refunded: 0, input_tokens: 0, output_tokens: 0 });
    expect(pick(all.groups.filter((g) => g.calls > 0))).toEqual([
      ['2026-05-10T00:00:00.000Z', 2, 5],
      ['2026-05-11T00:00:00.000Z', 1, 2],
    ]);

    const balance = await h.deps.db.query<{ period_start: Date; period_end: Date; monthly_used: number }>(
      'SELECT period_start, period_end, monthly_used FROM credit_balances WHERE deployment_id = $1',
      [t.deploymentId],
    );
    const b = balance[0]!;
    expect(b.period_start.toISOString()).toBe('2026-05-10T12:00:00.000Z');
    const period = await f.summary(key(t.apiKey), t.organizationId, `?from=${b.period_start.toISOString()}&to=${b.period_end.toISOString()}`);
    expect(period.totals.credits).toBe(b.monthly_used);
    expect(period.totals.credits).toBe(5);

    await f.refund(late.usage_id!, 1);
    const refunded = await f.summary(key(t.apiKey), t.organizationId, '?group_by=tool&from=2026-04-10T00:00:00Z&to=2026-05-12T00:00:00Z');
    expect(refunded.totals).toEqual({ calls: 3, successful: 3, failed: 0, credits: 6, credits_refunded: 1, input_tokens: 0, output_tokens: 0 });
    expect(refunded.groups.find((g) => g.key === advanced)).toMatchObject({ calls: 1, credits: 2, credits_refunded: 1 });
    const ledger = await h.deps.db.query<{ net: number }>(
      `SELECT COALESCE(-sum(amount), 0)::bigint AS net FROM credit_ledger
       WHERE organization_id = $1 AND kind IN ('deduct', 'refund') AND usage_id IS NOT NULL`,
      [t.organizationId],
    );
    expect(ledger[0]!.net).toBe(refunded.totals.credits);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('GET /organizations/{id}/usage/summary by tool, action and end user', () => {
  it('groups by what was recorded, largest first, and filters by deployment', async () => {
    h.clock.set('2026-06-01T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    const second = await f.addDeployment(t.organizationId);
    const rag = await f.toolFor('rag_query');
    const advanced = await f.toolFor('task_advanced');
    const plain = unique('unmapped'); // no mapping: platform_basic, 1 credit
    h.clock.set('2026-06-02T09:00:00.000Z');
    await f.record(t.deploymentId, rag, { mcpUserId: 'alice' });
    await f.record(t.deploymentId, rag, { mcpUserId: 'alice' });
    await f.record(t.deploymentId, advanced, { mcpUserId: 'bob' });
    for (let i = 0; i < 3; i++) await f.record(second, plain);
    await f.record(second, rag, { mcpUserId: 'bob' });
    const q = '&from=2026-06-01T00:00:00Z&to=2026-06-03T00:00:00Z';

    const byTool = await f.summary(key(t.apiKey), t.organizationId, `?group_by=tool${q}`);
    expect(pick(byTool.groups)).toEqual([
      [rag, 3, 6],
      [plain, 3, 3],
      [advanced, 1, 3],
    ]);
    expect(byTool.totals).toEqual({ calls: 7, successful: 7, failed: 0, credits: 12, credits_refunded: 0, input_tokens: 0, output_tokens: 0 });
    expect(byTool.truncated).toBe(false);

    const byAction = await f.summary(key(t.apiKey), t.organizationId, `?group_by=action${q}`);
    expect(pick(byAction.groups)).toEqual([
      ['rag_query', 3, 6],
      ['platform_basic', 3, 3],
      ['task_advanced', 1, 3],
    ]);
    // The action is the one recorded: mapping the tool elsewhere later does not rewrite history.
    await f.toolFor('crew_execute', rag);
    expect(pick((await f.summary(key(t.apiKey), t.organizationId, `?group_by=action${q}`)).groups)).toEqual(pick(byAction.groups));

    const byUser = await f.summary(key(t.apiKey), t.organizationId, `?group_by=mcp_user${q}`);
    expect(pick(byUser.groups)).toEqual([
      ['bob', 2, 5],
      ['alice', 2, 4],
      [null, 3, 3],
    ]);

    const onlySecond = await f.summary(key(t.apiKey), t.organizationId, `?group_by=tool&deployment_id=${second}${q}`);
    expect(onlySecond.deployment_id).toBe(second);
    expect(pick(onlySecond.groups)).toEqual([
      [plain, 3, 3],
      [rag, 1, 2],
    ]);
  });

  it('counts refused calls as failed, with no credits', async () => {
    h.clock.set('2026-07-01T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'trial' });
    const res = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload: { monthly_credits: 3 } });
    expect(res.statusCode, res.body).toBe(200);
    const rag = await f.toolFor('rag_query');
    expect((await f.record(t.deploymentId, rag, { mcpUserId: 'carol' })).success).toBe(true);
    expect(await f.record(t.deploymentId, rag, { mcpUserId: 'carol' })).toMatchObject({ success: false, error: 'insufficient_credits' });
    h.clock.advance(1000); // the default range ends now, exclusive
    const s = await f.summary(key(t.apiKey), t.organizationId, '?group_by=mcp_user');
    expect(s.groups).toEqual([{ key: 'carol', calls: 2, successful: 1, failed: 1, credits: 2, credits_refunded: 0, input_tokens: 0, output_tokens: 0 }]);
  });
});

describe('GET /organizations/{id}/usage/summary split_by (a stacked chart)', () => {
  it('splits every bucket by the largest keys of the range, the rest as "other", and the parts add up to the buckets and totals', async () => {
    h.clock.set('2026-08-01T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    await h.request({ method: 'POST', url: `/api/v1/admin/deployments/${t.deploymentId}/credits`, headers: adminHeaders(h), payload: { amount: 500, reason: 'split test' } });
    // 12 tools: tool i gets i+1 calls of 1 credit on day 1 (plain tools: platform_basic), so tools 11 and 10 … 2 are the largest ten.
    const tools = Array.from({ length: 12 }, (_, i) => `${unique('split')}-${String(i).padStart(2, '0')}`);
    for (const [i, tool] of tools.entries()) {
      for (let n = 0; n <= i; n++) await f.record(t.deploymentId, tool, { at: '2026-08-02T10:00:00.000Z', mcpUserId: n % 2 === 0 ? 'erin' : undefined });
    }
    // Day 3: only the smallest tool (part of "other") and the largest.
    await f.record(t.deploymentId, tools[0]!, { at: '2026-08-04T01:00:00.000Z' });
    await f.record(t.deploymentId, tools[11]!, { at: '2026-08-04T02:00:00.000Z' });
    h.clock.set('2026-08-05T00:00:00.000Z');
    const q = '?group_by=day&split_by=tool&from=2026-08-02T00:00:00Z&to=2026-08-05T00:00:00Z';
    const s = await f.summary(key(t.apiKey), t.organizationId, q);

    expect(s.split_by).toBe('tool');
    expect(s.split_keys).toEqual(tools.slice(2).reverse()); // 13, 12 … 3 calls: the ten largest, largest first
    expect(s.split_other).toBe(true);
    expect(s.groups.map((g) => g.key)).toEqual(['2026-08-02T00:00:00.000Z', '2026-08-03T00:00:00.000Z', '2026-08-04T00:00:00.000Z']);
    const [day1, day2, day3] = s.groups;
    expect(day1!.split!.map((p) => [p.key, p.other, p.calls])).toEqual([
      ...tools.slice(2).reverse().map((tool) => [tool, false, Number(tool.slice(-2)) + 1]),
      [null, true, 1 + 2], // tools 0 and 1
    ]);
    expect(day2).toMatchObject({ calls: 0, split: [] });
    expect(day3!.split!.map((p) => [p.key, p.other, p.calls, p.credits])).toEqual([
      [tools[11], false, 1, 1],
      [null, true, 1, 1],
    ]);
    // The parts sum to their bucket, the buckets to the totals, and the totals match the unsplit summary.
    for (const g of s.groups) expect(sumGroups(g.split!)).toEqual({ calls: g.calls, successful: g.successful, failed: g.failed, credits: g.credits, credits_refunded: g.credits_refunded, input_tokens: g.input_tokens, output_tokens: g.output_tokens });
    expect(sumGroups(s.groups)).toEqual(s.totals);
    const plain = await f.summary(key(t.apiKey), t.organizationId, q.replace('&split_by=tool', ''));
    expect(s.totals).toEqual(plain.totals);
    expect(s.groups.map(({ split: _s, ...g }) => g)).toEqual(plain.groups);

    // By end user: calls without one are a key of their own (null, other: false), not "other".
    const byUser = await f.summary(key(t.apiKey), t.organizationId, q.replace('split_by=tool', 'split_by=mcp_user'));
    expect(byUser.split_other).toBe(false);
    expect(new Set(byUser.split_keys)).toEqual(new Set(['erin', null]));
    expect(byUser.groups[0]!.split!.every((p) => !p.other)).toBe(true);
    expect(sumGroups(byUser.groups[0]!.split!).calls).toBe(day1!.calls);
  });

  it('refuses split_by without a time grouping, and an unknown split_by, naming the parameter', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const query of ['?group_by=tool&split_by=tool', '?split_by=model']) {
      const res = await h.request({ method: 'GET', url: `/organizations/${t.organizationId}/usage/summary${query}`, headers: key(t.apiKey) });
      expect(res.statusCode, query).toBe(400);
      expect(res.json(), query).toMatchObject({ error: { code: 'VALIDATION_ERROR', message: expect.stringContaining('split_by') } });
    }
  });
});

describe('GET /organizations/{id}/usage/summary under concurrent writes', () => {
  it('every summary lies between the totals before and after, agrees with itself, and the last one is exact', async () => {
    h.clock.set('2026-08-01T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    const rag = await f.toolFor('rag_query');
    h.clock.set('2026-08-02T00:00:00.000Z');
    for (let i = 0; i < 5; i++) await f.record(t.deploymentId, rag, { mcpUserId: `u${i % 2}` });
    const query = '?group_by=mcp_user&from=2026-08-01T00:00:00Z&to=2026-08-03T00:00:00Z';
    const before = await f.summary(key(t.apiKey), t.organizationId, query);
    expect(before.totals).toMatchObject({ calls: 5, credits: 10 });

    const writes = Array.from({ length: 60 }, (_, i) => f.record(t.deploymentId, rag, { mcpUserId: `u${i % 3}` }));
    const reads = Array.from({ length: 12 }, () => f.summary(key(t.apiKey), t.organizationId, query));
    const [written, seen] = await Promise.all([Promise.all(writes), Promise.all(reads)]);
    expect(written.every((w) => w.success)).toBe(true);
    for (const s of seen) {
      expect(s.totals.calls).toBeGreaterThanOrEqual(5);
      expect(s.totals.calls).toBeLessThanOrEqual(65);
      expect(s.totals.credits).toBe(2 * s.totals.calls);
      expect(sumGroups(s.groups)).toEqual(s.totals);
    }
    const after = await f.summary(key(t.apiKey), t.organizationId, query);
    expect(after.totals).toEqual({ calls: 65, successful: 65, failed: 0, credits: 130, credits_refunded: 0, input_tokens: 0, output_tokens: 0 });
    expect(after.groups.map((g) => g.key).sort()).toEqual(['u0', 'u1', 'u2']);
    const ledger = await h.deps.db.query<{ deducted: number }>(
      "SELECT COALESCE(-sum(amount), 0)::bigint AS deducted FROM credit_ledger WHERE organization_id = $1 AND kind = 'deduct'",
      [t.organizationId],
    );
    expect(ledger[0]!.deducted).toBe(130);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('GET /organizations/{id}/usage/summary: zones, models, deployments, freshness', () => {
  it('tz gives day buckets of that zone (23 hours on the day clocks go forward), built from the hour rollups', async () => {
    h.clock.set('2026-03-06T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    const rag = await f.toolFor('rag_query');
    // New York: UTC−5 until 2026-03-08 07:00Z, then UTC−4.
    for (const at of ['2026-03-07T04:30:00.000Z', '2026-03-07T05:30:00.000Z', '2026-03-08T04:30:00.000Z', '2026-03-08T06:30:00.000Z', '2026-03-09T03:30:00.000Z']) {
      await f.record(t.deploymentId, rag, { at });
    }
    h.clock.set('2026-03-10T00:00:00.000Z');
    const q = `?group_by=day&tz=America%2FNew_York&from=2026-03-07T05:00:00Z&to=2026-03-09T04:00:00Z`;
    const s = await f.summary(key(t.apiKey), t.organizationId, q);
    expect(s).toMatchObject({ tz: 'America/New_York', from: '2026-03-07T05:00:00.000Z', to: '2026-03-09T04:00:00.000Z', lag_seconds: 0, as_of: '2026-03-10T00:00:00.000Z' });
    // Local days 03-07 (from 05:00Z) and 03-08 (from 05:00Z, 23 hours long, to 04:00Z on 03-09): 04:30Z on
    // 03-08 is 23:30 of the 7th there, 03:30Z on 03-09 is 23:30 of the 8th; 04:30Z on 03-07 is before from.
    expect(pick(s.groups)).toEqual([
      ['2026-03-07T05:00:00.000Z', 2, 4],
      ['2026-03-08T05:00:00.000Z', 2, 4],
    ]);
    expect(s.totals.calls).toBe(4);
    // The same range in UTC days.
    const utc = await f.summary(key(t.apiKey), t.organizationId, '?group_by=day&from=2026-03-07T05:00:00Z&to=2026-03-09T04:00:00Z');
    expect(utc.tz).toBe('UTC');
    expect(pick(utc.groups)).toEqual([
      ['2026-03-07T00:00:00.000Z', 1, 2],
      ['2026-03-08T00:00:00.000Z', 2, 4],
      ['2026-03-09T00:00:00.000Z', 1, 2],
    ]);
  });

  it('an unknown zone, one with a half-hour offset, or end users by zone are 400 naming the parameter', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const [q, field] of [
      ['?tz=Mars%2FOlympus', 'tz'],
      ['?tz=Asia%2FKolkata', 'tz'],
      ['?group_by=day&split_by=mcp_user&tz=Europe%2FBerlin', 'tz'],
      ['?group_by=hour&split_by=mcp_user', 'split_by'],
    ] as const) {
      const res = await f.summaryRes(key(t.apiKey), t.organizationId, q);
      expect(res.statusCode, `${q}: ${res.body}`).toBe(400);
      expect(res.body).toContain(field);
    }
  });

  it('group_by deployment and model; end users are counted per UTC day (the range widened to whole days)', async () => {
    h.clock.set('2026-04-01T10:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    const second = await f.addDeployment(t.organizationId);
    const rag = await f.toolFor('rag_query');
    await f.record(t.deploymentId, rag, { mcpUserId: 'ann' });
    await f.record(second, rag, { mcpUserId: 'ann' });
    await f.record(second, rag);
    h.clock.set('2026-04-02T00:00:00.000Z');
    const byDeployment = await f.summary(key(t.apiKey), t.organizationId, '?group_by=deployment');
    expect(pick(byDeployment.groups).sort()).toEqual([
      [second, 2, 4],
      [t.deploymentId, 1, 2],
    ].sort());
    const byModel = await f.summary(key(t.apiKey), t.organizationId, '?group_by=model');
    expect(pick(byModel.groups)).toEqual([[null, 3, 6]]);
    const users = await f.summary(key(t.apiKey), t.organizationId, '?group_by=mcp_user&from=2026-04-01T09:00:00Z&to=2026-04-01T11:00:00Z');
    expect(users).toMatchObject({ from: '2026-04-01T00:00:00.000Z', to: '2026-04-02T00:00:00.000Z' });
    expect(pick(users.groups)).toEqual([
      ['ann', 2, 4],
      [null, 1, 2],
    ]);
  });
});
