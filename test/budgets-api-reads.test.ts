import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetsApi, type BudgetView } from './budgets-api-fixtures.js';
import { bearer, createHarness, type Harness, json } from './harness.js';

/**
 * What a budget read answers after usage (docs/budgets.md, API): spent and remaining in the window in
 * progress, its start and reset, the subjects of a "*" budget, and end users masked for viewers.
 * Spending goes through service usage and stdio record-usage, as the money engine counts it.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const api = budgetsApi(() => h);
const DAY = 24 * 60 * 60 * 1000;

async function periodOf(deploymentId: string): Promise<{ start: string; end: string }> {
  const [row] = await h.deps.db.query<{ period_start: Date; period_end: Date }>('SELECT period_start, period_end FROM credit_balances WHERE deployment_id = $1', [
    deploymentId,
  ]);
  return { start: row!.period_start.toISOString(), end: row!.period_end.toISOString() };
}

describe('spent, remaining and the window in progress', () => {
  it('counts what was spent in the window, never answers remaining below 0, and starts over with the next window', async () => {
    const start = h.clock.now();
    const t = await api.tenant();
    // An admin key, not a person: an access token would expire as the clock moves on.
    const owner = (await api.key(t.organizationId, ['read', 'write', 'admin'])).headers;
    const b = await api.create(owner, t.organizationId, { scope: 'organization', limit_credits: 5, window: 'day' });
    await api.spend(t, 3);
    expect(await api.read(owner, t.organizationId, b.id)).toMatchObject({
      spent_credits: 3,
      remaining_credits: 2,
      spent_ai_tokens: null,
      remaining_ai_tokens: null,
      window_start: '2026-01-15T00:00:00.000Z',
      resets_at: '2026-01-16T00:00:00.000Z',
    });
    await api.spend(t, 2);
    // The sixth is refused by the budget: nothing more is counted.
    const refused = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: { 'x-mcp-service-key': h.config.mcpServiceKey }, payload: { deployment_id: t.deploymentId, tool_name: 'x' } });
    expect(json(refused)).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect(await api.read(owner, t.organizationId, b.id)).toMatchObject({ spent_credits: 5, remaining_credits: 0 });
    // A limit lowered below what is spent: remaining is 0, not negative.
    await api.send('PUT', api.url(t.organizationId, b.id), owner, { limit_credits: 2 });
    expect(await api.read(owner, t.organizationId, b.id)).toMatchObject({ spent_credits: 5, remaining_credits: 0 });
    // The next day is a new window: nothing spent in it yet.
    h.clock.set(new Date(Date.parse('2026-01-16T00:00:00.000Z') + 1000));
    try {
      expect(await api.read(owner, t.organizationId, b.id)).toMatchObject({
        spent_credits: 0,
        remaining_credits: 2,
        window_start: '2026-01-16T00:00:00.000Z',
        resets_at: '2026-01-17T00:00:00.000Z',
      });
    } finally {
      h.clock.set(start);
    }
  });

  it('each window kind answers its start and reset', async () => {
    const t = await api.tenant();
    const owner = api.asUser(t.owner);
    const expected: Record<string, [string, string]> = {
      hour: ['2026-01-15T12:00:00.000Z', '2026-01-15T13:00:00.000Z'],
      day: ['2026-01-15T00:00:00.000Z', '2026-01-16T00:00:00.000Z'],
      week: ['2026-01-12T00:00:00.000Z', '2026-01-19T00:00:00.000Z'],
      month: ['2026-01-01T00:00:00.000Z', '2026-02-01T00:00:00.000Z'],
    };
    for (const [window, [start, end]] of Object.entries(expected)) {
      const b = await api.create(owner, t.organizationId, { scope: 'organization', limit_credits: 100, window });
      expect(b, window).toMatchObject({ window_start: start, resets_at: end });
    }
  });

  it("a period window is the deployment's credit period, an organization's the primary deployment's, brought forward once it has ended", async () => {
    const start = h.clock.now();
    const t = await api.tenant();
    const owner = (await api.key(t.organizationId, ['read', 'write', 'admin'])).headers;
    const period = await periodOf(t.deploymentId);
    const narrowed = await api.create(owner, t.organizationId, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 10, window: 'period' });
    const wide = await api.create(owner, t.organizationId, { scope: 'organization', limit_credits: 10, window: 'period' });
    for (const b of [narrowed, wide]) expect(b).toMatchObject({ window_start: period.start, resets_at: period.end });
    await api.spend(t, 4);
    expect(await api.read(owner, t.organizationId, narrowed.id)).toMatchObject({ spent_credits: 4, remaining_credits: 6 });
    // Past the period's end with the balance row untouched: the next period, by whole months, nothing spent.
    h.clock.set(new Date(Date.parse(period.end) + DAY));
    try {
      for (const id of [narrowed.id, wide.id]) {
        const next = await api.read(owner, t.organizationId, id);
        expect(next).toMatchObject({ window_start: period.end, spent_credits: 0 });
        expect(Date.parse(next.resets_at)).toBeGreaterThan(Date.parse(period.end) + 27 * DAY);
      }
      // A charge brings the row up to date: the engine counts in the window the read announced.
      await api.spend(t, 1);
      const after = await api.read(owner, t.organizationId, narrowed.id);
      expect(after).toMatchObject({ window_start: period.end, spent_credits: 1 });
      expect(after.resets_at).toBe((await periodOf(t.deploymentId)).end);
    } finally {
      h.clock.set(start);
    }
  });

  it("an api_key budget counts its key's charges; an AI token limit answers its own spent and remaining", async () => {
    const t = await api.tenant();
    const owner = api.asUser(t.owner);
    const key = await api.key(t.organizationId, ['read', 'write']);
    const record = (k: string) => h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(k), payload: { tool_name: 'x' } });
    const onKey = await api.create(owner, t.organizationId, { scope: 'api_key', api_key_id: key.id, limit_credits: 10, limit_ai_tokens: 1000, window: 'hour' });
    for (let i = 0; i < 2; i++) expect(json(await record(key.headers['x-api-key']!)).success).toBe(true);
    expect(json(await record(t.apiKey)).success).toBe(true); // another key: not counted
    expect(await api.read(owner, t.organizationId, onKey.id)).toMatchObject({ spent_credits: 2, remaining_credits: 8, spent_ai_tokens: 0, remaining_ai_tokens: 1000 });
  });
});

describe('"*" budgets and masking', () => {
  it('an end_user "*" budget answers its largest end user and its subjects; a viewer sees them as "***"', async () => {
    const t = await api.tenant();
    const owner = api.asUser(t.owner);
    const each = await api.create(owner, t.organizationId, { scope: 'end_user', end_user_id: '*', limit_credits: 10, window: 'day' });
    h.clock.advance(1); // listed oldest first
    const alice = await api.create(owner, t.organizationId, { scope: 'end_user', end_user_id: 'alice', limit_credits: 10, window: 'day' });
    await api.spend(t, 3, { mcp_user_id: 'alice' });
    await api.spend(t, 1, { mcp_user_id: 'bob' });
    await api.spend(t, 2, { mcp_user_id: 'carol' });
    const subjects = [
      { id: 'alice', spent_credits: 3, spent_ai_tokens: 0 },
      { id: 'carol', spent_credits: 2, spent_ai_tokens: 0 },
      { id: 'bob', spent_credits: 1, spent_ai_tokens: 0 },
    ];
    const readers = [owner, api.asUser(t.member), (await api.key(t.organizationId, ['read'])).headers];
    for (const headers of readers) {
      expect(await api.read(headers, t.organizationId, each.id)).toMatchObject({ end_user_id: '*', spent_credits: 3, remaining_credits: 7, subjects });
      expect(await api.read(headers, t.organizationId, alice.id)).toMatchObject({ end_user_id: 'alice', spent_credits: 3, subjects: null });
    }
    const operator = json<BudgetView>(await api.send('GET', api.adminUrl(t.organizationId, each.id), api.operator()));
    expect(operator.subjects).toEqual(subjects);

    const viewer = api.asUser(t.viewer);
    const masked = subjects.map((s) => ({ ...s, id: '***' }));
    expect(await api.read(viewer, t.organizationId, each.id)).toMatchObject({ end_user_id: '*', spent_credits: 3, subjects: masked });
    expect(await api.read(viewer, t.organizationId, alice.id)).toMatchObject({ end_user_id: '***', spent_credits: 3 });
    const list = json<{ data: BudgetView[] }>(await api.send('GET', api.url(t.organizationId), viewer));
    expect(list.data.map((b) => b.end_user_id)).toEqual(['*', '***']);
    expect(JSON.stringify(list)).not.toMatch(/alice|bob|carol/);
  });

  it('a tool "*" budget answers its tools, unmasked for viewers', async () => {
    const t = await api.tenant();
    const b = await api.create(api.asUser(t.owner), t.organizationId, { scope: 'tool', tool_name: '*', limit_credits: 10, window: 'week' });
    await api.spend(t, 2, { tool_name: 'search' });
    await api.spend(t, 1, { tool_name: 'fetch' });
    expect(await api.read(api.asUser(t.viewer), t.organizationId, b.id)).toMatchObject({
      tool_name: '*',
      spent_credits: 2,
      remaining_credits: 8,
      subjects: [
        { id: 'search', spent_credits: 2, spent_ai_tokens: 0 },
        { id: 'fetch', spent_credits: 1, spent_ai_tokens: 0 },
      ],
    });
  });

  it('answers the 100 subjects that spent most, and the largest as spent; other windows are not counted', async () => {
    const t = await api.tenant();
    const b = await api.create(api.asUser(t.owner), t.organizationId, { scope: 'end_user', end_user_id: '*', limit_credits: 1000, window: 'day' });
    // Window rows as the engine leaves them: 120 end users today, one larger yesterday.
    await h.deps.db.query(
      `INSERT INTO budget_windows (budget_id, subject, window_start, window_end, spent_credits)
       SELECT $1::uuid, 'user-' || lpad(n::text, 3, '0'), $2::timestamptz, $3::timestamptz, n FROM generate_series(1, 120) AS n
       UNION ALL SELECT $1::uuid, 'yesterday', $4::timestamptz, $2::timestamptz, 999`,
      [b.id, '2026-01-15T00:00:00.000Z', '2026-01-16T00:00:00.000Z', '2026-01-14T00:00:00.000Z'],
    );
    const read = await api.read(api.asUser(t.owner), t.organizationId, b.id);
    expect(read).toMatchObject({ spent_credits: 120, remaining_credits: 880 });
    expect(read.subjects).toHaveLength(100);
    expect(read.subjects![0]).toEqual({ id: 'user-120', spent_credits: 120, spent_ai_tokens: 0 });
    expect(read.subjects![99]).toEqual({ id: 'user-021', spent_credits: 21, spent_ai_tokens: 0 });
  });
});
