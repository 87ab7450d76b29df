import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { bearer, createPassesHarness, createTenant, dispatchAllPending, grant, type Harness, json, serviceHeaders, setTier, signUpWithOrganization, type Tenant } from '../../../test/harness.js';
import { budgetStandings, pruneEachBudgetWindows } from './budgets.js';
import { findLedgerMismatches } from './ledger.js';
import { expireReservations } from './reservations.js';

/**
 * Budgets in the money engine (docs/budgets.md): a block budget is checked and charged in the charge's
 * own transaction, so no concurrency runs past it; holds count while held; releases, expiries and
 * refunds give the room back; windows roll over on the clock. Budgets are written here as the budgets
 * API writes them (test/budget-fixtures.ts).
 */
let h: Harness;
beforeAll(async () => {
  // An organization webhook on loopback receives the budget events (never delivered here: no worker runs).
  // pruneEachBudgetWindows below prunes every tenant's windows days on: a database of its own (createPassesHarness).
  h = await createPassesHarness({ webhookAllowPrivateNetworks: true });
});
afterAll(async () => {
  await h.close();
});
const b = budgetFixtures(() => h);

const stdioRecord = (t: Tenant, extra: Record<string, unknown> = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x', ...extra } });
const serviceUsage = (t: Tenant, extra: Record<string, unknown> = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x', ...extra } });
const reserve = (t: Tenant, invocationId: string) =>
  h.request({
    method: 'POST',
    url: '/api/v1/mcp/stdio/check-entitlement',
    headers: bearer(t.apiKey),
    payload: { tool_name: 'x', reserve: true, invocation_id: invocationId },
  });

/** A tenant with plenty of credits: what refuses here is the budget, never the balance. */
async function richTenant(): Promise<Tenant> {
  const t = await createTenant(h, { tier: 'launch' });
  await grant(h, t.deploymentId, 10_000);
  return t;
}

async function spentOf(deploymentId: string): Promise<number> {
  const rows = await h.deps.db.query<{ n: number }>(
    'SELECT COALESCE(SUM(quantity - refunded), 0)::int AS n FROM usage_records WHERE deployment_id = $1 AND success',
    [deploymentId],
  );
  return rows[0]!.n;
}

describe('a block budget under concurrency', () => {
  it('200 parallel records against an organization budget of 50: exactly 50 charged, 150 refused with the budget named', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 50, window: 'day' });
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => (i % 2 === 0 ? stdioRecord(t) : serviceUsage(t))));
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    const bodies = results.map((r) => json(r));
    expect(bodies.filter((r) => r.success === true)).toHaveLength(50);
    const refused = bodies.filter((r) => r.success === false);
    expect(refused).toHaveLength(150);
    for (const r of refused) {
      expect(r.error).toBe('budget_exceeded');
      expect(r.payment_required).toMatchObject({ reason: 'budget_exceeded', budget_id: budgetId, credits_required: 1 });
    }
    expect(await spentOf(t.deploymentId)).toBe(50);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([50]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('the same with invocation ids: a refused id is not recorded and stays refused while there is no room', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 30, window: 'hour' });
    const results = await Promise.all(Array.from({ length: 90 }, (_, i) => stdioRecord(t, { invocation_id: `budget-${i}` })));
    expect(results.filter((r) => json(r).success === true)).toHaveLength(30);
    expect(results.filter((r) => json(r).error === 'budget_exceeded')).toHaveLength(60);
    // A refused id is not recorded: once there is room it may be recorded (here: still none).
    expect(json(await stdioRecord(t, { invocation_id: 'budget-89' })).error).toBe('budget_exceeded');
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([30]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('the most restrictive budget wins, and every applicable budget counts the charge', async () => {
    const t = await richTenant();
    const wide = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 100, window: 'month' });
    const narrow = await b.addBudget({ organizationId: t.organizationId, scope: 'deployment', deploymentId: t.deploymentId, limitCredits: 3, window: 'day' });
    const alert = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 1, window: 'day', mode: 'alert' });
    for (let i = 0; i < 3; i++) expect(json(await serviceUsage(t)).success).toBe(true);
    const refused = json(await serviceUsage(t));
    expect(refused).toMatchObject({ success: false, error: 'budget_exceeded', payment_required: { budget_id: narrow } });
    expect((await b.windowsOf(wide)).map((w) => w.spent_credits)).toEqual([3]);
    expect((await b.windowsOf(narrow)).map((w) => w.spent_credits)).toEqual([3]);
    // An alert budget only counts, past its limit too.
    expect((await b.windowsOf(alert)).map((w) => w.spent_credits)).toEqual([3]);
  });

  it('a check (without reserve) answers budget_exceeded once the budget has no room, and allowed again when it has', async () => {
    const t = await richTenant();
    const check = async () =>
      json(await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x' } }));
    expect(await check()).toMatchObject({ allowed: true });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 1, window: 'day' });
    expect(json(await stdioRecord(t)).success).toBe(true);
    // The balance copy a check may use is at most a second old (docs/adr/0005-cached-checks.md).
    h.clock.advance(2_000);
    const refused = await check();
    expect(refused).toMatchObject({ allowed: false, reason: 'budget_exceeded', credit_cost: 0, payment_required: { budget_id: budgetId, reason: 'budget_exceeded' } });
    await b.setLimit(budgetId, t.organizationId, 2);
    expect(await check()).toMatchObject({ allowed: true });
  });

  it('the balance refuses first: a charge neither covers is insufficient_credits', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 1, window: 'day' });
    await h.deps.db.query('UPDATE credit_balances SET monthly_used = monthly_allocation WHERE deployment_id = $1', [t.deploymentId]);
    expect(json(await serviceUsage(t))).toMatchObject({ success: false, error: 'insufficient_credits' });
  });
});

describe('windows', () => {
  const kinds: Array<['hour' | 'day' | 'week' | 'month', number]> = [
    ['hour', 60 * 60 * 1000],
    ['day', 24 * 60 * 60 * 1000],
    ['week', 7 * 24 * 60 * 60 * 1000],
    ['month', 31 * 24 * 60 * 60 * 1000],
  ];
  for (const [kind, length] of kinds) {
    it(`a ${kind} window refuses past its limit and allows again once the next ${kind} begins`, async () => {
      const t = await richTenant();
      const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 2, window: kind });
      expect(json(await serviceUsage(t)).success).toBe(true);
      expect(json(await serviceUsage(t)).success).toBe(true);
      const refused = json(await serviceUsage(t));
      expect(refused.error).toBe('budget_exceeded');
      const resetsAt = new Date((refused.payment_required as { resets_at: string }).resets_at);
      expect(resetsAt.getTime()).toBeGreaterThan(h.clock.now().getTime());
      expect(resetsAt.getTime() - h.clock.now().getTime()).toBeLessThanOrEqual(length);
      h.clock.set(resetsAt);
      expect(json(await serviceUsage(t)).success).toBe(true);
      const windows = await b.windowsOf(budgetId);
      expect(windows.map((w) => w.spent_credits)).toEqual([2, 1]);
      expect(windows[1]!.window_start.getTime()).toBe(resetsAt.getTime());
    });
  }

  it('a period window follows the deployment credit period', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'deployment', deploymentId: t.deploymentId, limitCredits: 1, window: 'period' });
    expect(json(await serviceUsage(t)).success).toBe(true);
    const refused = json(await serviceUsage(t));
    const [balance] = await h.deps.db.query<{ period_end: Date }>('SELECT period_end FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
    expect((refused.payment_required as { resets_at: string }).resets_at).toBe(balance!.period_end.toISOString());
    h.clock.set(balance!.period_end);
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1, 1]);
  });
});

describe('subjects', () => {
  it('an end_user budget for each end user ("*") counts every end user apart', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 2, window: 'day' });
    for (const user of ['alice', 'alice', 'bob']) expect(json(await serviceUsage(t, { mcp_user_id: user })).success).toBe(true);
    expect(json(await serviceUsage(t, { mcp_user_id: 'alice' })).error).toBe('budget_exceeded');
    expect(json(await serviceUsage(t, { mcp_user_id: 'bob' })).success).toBe(true);
    // A call with no end user is not under an end-user budget.
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect((await b.windowsOf(budgetId)).map((w) => [w.subject, w.spent_credits])).toEqual([
      ['alice', 2],
      ['bob', 2],
    ]);
  });

  it('a tool budget for each tool ("*") counts every tool apart', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'tool', toolName: '*', limitCredits: 2, window: 'day' });
    for (const tool of ['search', 'search', 'fetch']) expect(json(await serviceUsage(t, { tool_name: tool })).success).toBe(true);
    expect(json(await serviceUsage(t, { tool_name: 'search' }))).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect(json(await serviceUsage(t, { tool_name: 'fetch' })).success).toBe(true);
    expect(json(await serviceUsage(t, { tool_name: 'fetch' })).error).toBe('budget_exceeded');
    expect(json(await serviceUsage(t, { tool_name: 'other' })).success).toBe(true);
    expect((await b.windowsOf(budgetId)).map((w) => [w.subject, w.spent_credits])).toEqual([
      ['fetch', 2],
      ['other', 1],
      ['search', 2],
    ]);
    expect(await spentOf(t.deploymentId)).toBe(5);
  });

  it('the stdio routes take the end user as end_user_id or X-End-User-Id: counted for it, holds included; both sent must agree', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 2, window: 'day' });
    expect(json(await stdioRecord(t, { end_user_id: 'dave' })).success).toBe(true);
    const byHeader = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: { ...bearer(t.apiKey), 'x-end-user-id': 'dave' },
      payload: { tool_name: 'x', reserve: true, invocation_id: 'dave-1' },
    });
    expect(json(byHeader)).toMatchObject({ allowed: true });
    // dave has 2 counted (one record, one hold): a third is refused, by the check and by the record.
    const check = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x', end_user_id: 'dave' } });
    expect(json(check)).toMatchObject({ allowed: false, reason: 'budget_exceeded' });
    expect(json(await stdioRecord(t, { end_user_id: 'dave' })).error).toBe('budget_exceeded');
    expect(json(await stdioRecord(t, { end_user_id: 'erin' })).success).toBe(true);
    expect((await b.windowsOf(budgetId)).map((w) => [w.subject, w.spent_credits])).toEqual([
      ['dave', 2],
      ['erin', 1],
    ]);
    const differ = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/record-usage',
      headers: { ...bearer(t.apiKey), 'x-end-user-id': 'frank' },
      payload: { tool_name: 'x', end_user_id: 'dave' },
    });
    expect(differ.statusCode).toBe(400);
    expect(json(differ)).toMatchObject({ code: 'INVALID_REQUEST', fields: [expect.objectContaining({ field: 'end_user_id' })] });
    expect((await stdioRecord(t, { end_user_id: '*' })).statusCode).toBe(400);
    // A UTF-8 id in the header (as Node reads its bytes: latin1) is the same end user as in the body.
    const utf8 = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/record-usage',
      headers: { ...bearer(t.apiKey), 'x-end-user-id': Buffer.from('José', 'utf8').toString('latin1') },
      payload: { tool_name: 'x', end_user_id: 'José' },
    });
    expect(utf8.statusCode, utf8.body).toBe(200);
    expect((await b.windowsOf(budgetId)).find((w) => w.subject === 'José')?.spent_credits).toBe(1);
    const usage = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND mcp_user_id = $2', [t.deploymentId, 'erin']);
    expect(usage[0]!.n).toBe(1);
  });

  it("service usage's mcp_user_id of \"\" names no one: no end-user budget counts it, and its window's event row stays empty", async () => {
    const t = await richTenant();
    const each = await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 1, window: 'day' });
    // As a charge with no end user (and as the AI proxy's user of ""): not counted in the "*" budget.
    for (let i = 0; i < 3; i++) expect(json(await serviceUsage(t, { mcp_user_id: '' })).success).toBe(true);
    expect(json(await serviceUsage(t, { mcp_user_id: 'gina' })).success).toBe(true);
    expect(json(await serviceUsage(t, { mcp_user_id: 'gina' })).error).toBe('budget_exceeded');
    // The '' row of a "*" budget is its event cap's (docs/budgets.md), never a charge's.
    expect((await b.windowsOf(each)).filter((w) => w.spent_credits > 0).map((w) => [w.subject, w.spent_credits])).toEqual([['gina', 1]]);
    // The usage records keep the id as it was sent.
    const sent = await h.deps.db.query<{ n: number }>("SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND mcp_user_id = ''", [t.deploymentId]);
    expect(sent[0]!.n).toBe(3);
  });

  it('a tool budget narrowed to a deployment, and an api_key budget, hold only for their own charges', async () => {
    const t = await richTenant();
    await b.addBudget({ organizationId: t.organizationId, scope: 'tool', toolName: 'search', deploymentId: t.deploymentId, limitCredits: 1, window: 'day' });
    expect(json(await serviceUsage(t, { tool_name: 'search' })).success).toBe(true);
    expect(json(await serviceUsage(t, { tool_name: 'search' })).error).toBe('budget_exceeded');
    expect(json(await serviceUsage(t, { tool_name: 'other' })).success).toBe(true);
    const [key] = await h.deps.db.query<{ id: string }>('SELECT id FROM api_keys WHERE organization_id = $1', [t.organizationId]);
    await b.addBudget({ organizationId: t.organizationId, scope: 'api_key', apiKeyId: key!.id, limitCredits: 1, window: 'day' });
    expect(json(await stdioRecord(t)).success).toBe(true);
    expect(json(await stdioRecord(t)).error).toBe('budget_exceeded');
    // The service key is not that API key.
    expect(json(await serviceUsage(t)).success).toBe(true);
  });
});

describe('events', () => {
  const eventsOf = (organizationId: string) =>
    h.deps.db.query<{ type: string; data: { threshold: number; spent: number; limit: number; budget_id: string; end_user_id: string | null } }>(
      // Events of one fake-clock instant tie on created_at: thresholds in order, a threshold before the refusal at 100.
      `SELECT type, data FROM outbox_events WHERE organization_id = $1 AND type LIKE 'budget.%'
       ORDER BY created_at, (data->>'threshold')::int, type DESC`,
      [organizationId],
    );

  it('budget.threshold once per threshold per window, budget.exceeded once when a block budget first refuses; again in the next window', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 5, window: 'hour' });
    for (let i = 0; i < 4; i++) expect(json(await serviceUsage(t)).success).toBe(true);
    expect((await eventsOf(t.organizationId)).map((e) => [e.type, e.data.threshold, e.data.spent])).toEqual([['budget.threshold', 80, 4]]);
    expect(json(await serviceUsage(t)).success).toBe(true);
    for (let i = 0; i < 3; i++) expect(json(await serviceUsage(t)).error).toBe('budget_exceeded');
    const events = await eventsOf(t.organizationId);
    expect(events.map((e) => [e.type, e.data.threshold])).toEqual([
      ['budget.threshold', 80],
      ['budget.threshold', 100],
      ['budget.exceeded', 100],
    ]);
    expect(events[2]!.data).toMatchObject({ budget_id: budgetId, spent: 5, limit: 5, end_user_id: null });
    h.clock.advance(60 * 60 * 1000);
    for (let i = 0; i < 6; i++) await serviceUsage(t);
    expect((await eventsOf(t.organizationId)).map((e) => e.type)).toEqual([
      'budget.threshold',
      'budget.threshold',
      'budget.exceeded',
      'budget.threshold',
      'budget.threshold',
      'budget.exceeded',
    ]);
  });

  it('an alert budget only writes threshold events, and a "*" budget names the end user', async () => {
    const t = await richTenant();
    await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 1, window: 'day', mode: 'alert' });
    for (let i = 0; i < 3; i++) expect(json(await serviceUsage(t, { mcp_user_id: 'carol' })).success).toBe(true);
    expect((await eventsOf(t.organizationId)).map((e) => [e.type, e.data.threshold, e.data.end_user_id])).toEqual([
      ['budget.threshold', 80, 'carol'],
      ['budget.threshold', 100, 'carol'],
    ]);
  });
});

describe('the cap on a "*" budget\'s events', () => {
  it('at most 100 events per budget per window are sent, then one with truncated: true, then none; again in the next window', async () => {
    const owner = await signUpWithOrganization(h);
    const t: Tenant = { organizationId: owner.organizationId, deploymentId: owner.deploymentId, deploymentSecret: owner.deploymentSecret, userId: owner.userId, apiKey: '' };
    await setTier(h, t.deploymentId, 'launch');
    await grant(h, t.deploymentId, 10_000);
    const hook = await h.request({
      method: 'POST',
      url: `/organizations/${t.organizationId}/webhooks`,
      headers: bearer(owner.accessToken),
      payload: { url: 'http://127.0.0.1:9/budgets', events: ['budget.threshold'] },
    });
    expect(hook.statusCode, hook.body).toBe(201);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 1, window: 'day', mode: 'alert' });
    const deliveries = async () => {
      await dispatchAllPending(h.deps.db, h.clock.now());
      return h.deps.db.query<{ payload: { data: { end_user_id: string; truncated?: boolean } } }>(
        "SELECT payload FROM webhook_deliveries WHERE organization_id = $1 AND event_type = 'budget.threshold' ORDER BY created_at, id",
        [t.organizationId],
      );
    };
    // 60 end users each reach 80 % and 100 % of their 1 credit: 120 threshold events written.
    for (let i = 0; i < 60; i++) expect(json(await serviceUsage(t, { mcp_user_id: `user-${i}` })).success).toBe(true);
    const written = await h.deps.db.query<{ n: number }>("SELECT count(*)::int AS n FROM outbox_events WHERE organization_id = $1 AND type = 'budget.threshold'", [
      t.organizationId,
    ]);
    expect(written[0]!.n).toBe(120);
    const sent = await deliveries();
    expect(sent).toHaveLength(101);
    expect(sent.filter((d) => d.payload.data.truncated === true)).toHaveLength(1);
    // The counter row is no end user's: the budget's reads list the 60 end users only.
    const standing = (await budgetStandings(h.deps.db, t.organizationId, [{ ...(await budgetRow(budgetId)) }], h.clock.now())).get(budgetId)!;
    expect(standing.subjects).toHaveLength(60);
    expect(standing.subjects!.every((s) => s.subject.startsWith('user-'))).toBe(true);
    // The next day is a new window: its events are sent again; the ended window's rows are pruned.
    h.clock.advance(24 * 60 * 60 * 1000);
    expect(json(await serviceUsage(t, { mcp_user_id: 'user-0' })).success).toBe(true);
    expect(await deliveries()).toHaveLength(103);
    // This budget's 60 ended windows and its '' row (other tests' "*" budgets share the database).
    expect(await pruneEachBudgetWindows(h.deps.db, h.clock.now())).toBeGreaterThanOrEqual(61);
    expect((await b.windowsOf(budgetId)).map((w) => w.subject)).toEqual(['', 'user-0']);
  });
});

async function budgetRow(id: string) {
  const rows = await h.deps.db.query<import('./budget-rules.js').BudgetRow>(
    `SELECT id, organization_id, scope, deployment_id, api_key_id, end_user_id, tool_name, limit_credits, limit_ai_tokens, window_kind, mode,
            alert_thresholds FROM budgets WHERE id = $1`,
    [id],
  );
  return rows[0]!;
}

describe('holds, releases, expiries and refunds', () => {
  it('a reservation counts while held; its record does not count twice; a release and an expiry give the room back', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 3, window: 'day' });
    for (const id of ['r1', 'r2', 'r3']) expect(json(await reserve(t, id)).allowed).toBe(true);
    const refused = json(await reserve(t, 'r4'));
    expect(refused).toMatchObject({ allowed: false, reason: 'budget_exceeded', payment_required: { budget_id: budgetId } });
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([3]);
    // The record of a held call spends its hold: nothing more is counted.
    expect(json(await stdioRecord(t, { invocation_id: 'r1' })).success).toBe(true);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([3]);
    const released = await h.request({ method: 'POST', url: '/api/v1/mcp/reservations/r2/release', headers: bearer(t.apiKey), payload: {} });
    expect(released.statusCode).toBeLessThan(300);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([2]);
    expect(json(await reserve(t, 'r5')).allowed).toBe(true);
    // r3 and r5 lapse: the sweep gives their credits back to the window.
    h.clock.advance(6 * 60 * 1000);

    expect(await expireReservations(h.deps.db, h.clock.now(), t.deploymentId)).toBe(2);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a refund gives the room back to the window the usage was counted in', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 2, window: 'day' });
    const first = json(await serviceUsage(t));
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(json(await serviceUsage(t)).error).toBe('budget_exceeded');
    const refund = await h.request({
      method: 'POST',
      url: `/api/v1/mcp/usage/${first.usage_id}/refund`,
      headers: serviceHeaders(h),
      payload: { reason: 'tool failed' },
    });
    expect(refund.statusCode).toBe(200);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a refund of a record that spent its hold gives the room back to the windows the hold was counted in', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 2, window: 'day' });
    expect(json(await reserve(t, 'held-1')).allowed).toBe(true);
    // Alone in its batch, the record spends the hold and counts in no window itself.
    const spent = json(await stdioRecord(t, { invocation_id: 'held-1' }));
    expect(spent.success).toBe(true);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
    const refund = await h.request({
      method: 'POST',
      url: `/api/v1/mcp/usage/${spent.usage_id}/refund`,
      headers: serviceHeaders(h),
      payload: { reason: 'tool failed' },
    });
    expect(refund.statusCode).toBe(200);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([0]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('budgets changed while calls are in flight', () => {
  it('a limit lowered below what is spent refuses from then on; a deleted budget stops refusing; nothing half-written', async () => {
    const t = await richTenant();
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 10, window: 'day' });
    const first = await Promise.all(Array.from({ length: 20 }, () => serviceUsage(t)));
    expect(first.filter((r) => json(r).success === true)).toHaveLength(10);
    await b.setLimit(budgetId, t.organizationId, 5);
    expect(json(await serviceUsage(t)).error).toBe('budget_exceeded');
    const racing = Promise.all(Array.from({ length: 20 }, () => serviceUsage(t)));
    await b.removeBudget(budgetId, t.organizationId);
    const raced = await racing;
    expect(raced.every((r) => r.statusCode === 200)).toBe(true);
    expect(json(await serviceUsage(t)).success).toBe(true);
    const succeeded = 10 + raced.filter((r) => json(r).success === true).length + 1;
    expect(await spentOf(t.deploymentId)).toBe(succeeded);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a budget created after batches remembered the balance row is enforced at once (the remembered row is refused)', async () => {
    const t = await richTenant();
    // Sequential records: each batch commits and this instance remembers the row.
    for (let i = 0; i < 3; i++) expect(json(await serviceUsage(t)).success).toBe(true);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 1, window: 'day' });
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(json(await serviceUsage(t)).error).toBe('budget_exceeded');
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
  });
});
