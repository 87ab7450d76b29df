import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { adminHeaders, bearer, createHarness, createTenant, dbKind, grant, type Harness, isolatedDatabase, json, serviceHeaders, setAiLimit, type Tenant, unique } from '../../../test/harness.js';
import type { Database } from '../../db/client.js';
import { expireAiHolds, expireReservations, holdAiTokens, pruneEachBudgetWindows } from './index.js';
import { followSubscriptionPeriod } from './subscription-period.js';
import { findLedgerMismatches } from './ledger.js';

/**
 * Budgets (docs/budgets.md) replayed through the HTTP API where a window's count must follow its
 * charges: a changed window kind, an AI hold that lapsed while its call ran, a limit lowered below what
 * is spent. The clock only moves forward: each test sets a later time than the one before it.
 */
let h: Harness;
let db: Database;
let standIn: StandIn;
beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  // A database of its own: the sweeps of holds and of ended windows run here at days-later clocks and
  // would expire every other test file's holds in the shared one.
  db = await isolatedDatabase();
  h = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini'] }, undefined, db);
});
afterAll(async () => {
  await h?.close();
  await db?.close();
  await standIn?.close();
});
const b = budgetFixtures(() => h);

const serviceUsage = (t: Tenant, extra: Record<string, unknown> = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x', ...extra } });
const reserve = (t: Tenant, invocationId: string) =>
  h.request({
    method: 'POST',
    url: '/api/v1/mcp/stdio/check-entitlement',
    headers: bearer(t.apiKey),
    payload: { tool_name: 'x', reserve: true, invocation_id: invocationId },
  });
const release = (t: Tenant, invocationId: string) =>
  h.request({ method: 'POST', url: `/api/v1/mcp/reservations/${invocationId}/release`, headers: bearer(t.apiKey), payload: {} });
const refund = (usageId: string) =>
  h.request({ method: 'POST', url: `/api/v1/mcp/usage/${usageId}/refund`, headers: serviceHeaders(h), payload: { reason: 'tool failed' } });
const chat = (t: Tenant, body: Record<string, unknown> = {}) =>
  h.request({
    method: 'POST',
    url: '/api/v1/ai/chat/completions',
    headers: bearer(t.apiKey),
    payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }], max_tokens: 20, ...body },
  });

async function richTenant(): Promise<Tenant> {
  const t = await createTenant(h, { tier: 'launch' });
  await grant(h, t.deploymentId, 10_000);
  return t;
}

/** A budget made through the operator's budgets API. */
async function createBudget(t: Tenant, body: Record<string, unknown>): Promise<string> {
  const res = await h.request({ method: 'POST', url: `/api/v1/admin/organizations/${t.organizationId}/budgets`, headers: adminHeaders(h), payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return json<{ id: string }>(res).id;
}

async function changeBudget(t: Tenant, budgetId: string, body: Record<string, unknown>): Promise<void> {
  const res = await h.request({
    method: 'PUT',
    url: `/api/v1/admin/organizations/${t.organizationId}/budgets/${budgetId}`,
    headers: adminHeaders(h),
    payload: body,
  });
  expect(res.statusCode, res.body).toBe(200);
}

async function readBudget(t: Tenant, budgetId: string): Promise<Record<string, unknown>> {
  const res = await h.request({ method: 'GET', url: `/api/v1/admin/organizations/${t.organizationId}/budgets/${budgetId}`, headers: adminHeaders(h) });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

describe('a window kind that changes starts new windows', () => {
  it('hour changed to day at 00:20: a refund at 01:30 of a charge made at 01:10 gives the day window its room back', async () => {
    h.clock.set('2026-02-02T00:10:00.000Z');
    const t = await richTenant();
    const budgetId = await createBudget(t, { scope: 'organization', limit_credits: 10, window: 'hour' });
    expect(json(await serviceUsage(t)).success).toBe(true);
    h.clock.set('2026-02-02T00:20:00.000Z');
    await changeBudget(t, budgetId, { window: 'day' });
    h.clock.set('2026-02-02T01:10:00.000Z');
    const charged = json(await serviceUsage(t));
    expect(charged.success).toBe(true);
    const before = (await readBudget(t, budgetId)).spent_credits as number;
    h.clock.set('2026-02-02T01:30:00.000Z');
    expect((await refund(charged.usage_id as string)).statusCode).toBe(200);
    // The day window [00:00, next day) is in progress: the refund gives its credit back.
    expect((await readBudget(t, budgetId)).spent_credits).toBe(before - 1);
    // The day window it was counted in ends with the day, not with the hour the budget had before.
    const day = (await b.windowsOf(budgetId)).find((w) => w.window_start.toISOString() === '2026-02-02T00:00:00.000Z');
    expect(day?.window_end.toISOString()).toBe('2026-02-03T00:00:00.000Z');
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a "*" budget changed from hour to day at 00:20 keeps refusing for the rest of the day (its day window is not pruned at 01:00)', async () => {
    h.clock.set('2026-02-03T00:05:00.000Z');
    const t = await richTenant();
    const budgetId = await createBudget(t, { scope: 'end_user', end_user_id: '*', limit_credits: 2, window: 'hour' });
    expect(json(await serviceUsage(t, { mcp_user_id: 'u1' })).success).toBe(true);
    h.clock.set('2026-02-03T00:20:00.000Z');
    await changeBudget(t, budgetId, { window: 'day' });
    expect(json(await serviceUsage(t, { mcp_user_id: 'u1' })).success).toBe(true);
    h.clock.set('2026-02-03T01:30:00.000Z');
    // The budget-window-retention worker deletes ended windows of "*" budgets.
    await pruneEachBudgetWindows(h.deps.db, h.clock.now());
    const results = [];
    for (let i = 0; i < 3; i++) results.push(json(await serviceUsage(t, { mcp_user_id: 'u1' })));
    // Whatever the day counted from 00:20 on (at least the charge made then), a limit of 2 a day leaves
    // room for at most one more today.
    expect(results.filter((r) => r.success === true).length).toBeLessThanOrEqual(1);
    expect(results.at(-1)).toMatchObject({ success: false, error: 'budget_exceeded' });
  });
});

describe('AI calls', () => {
  it.each([
    ['day', '2026-02-04T12:00:00.000Z', 'the hold\'s day window, still in progress'],
    ['hour', '2026-02-04T14:00:00.000Z', 'the hold\'s hour, ended, keeps what the hold counted'],
  ] as const)('a call whose hold lapsed (the ai-holds worker gave it back) while the provider answered is still counted in its %s budget at the settle: %s', async (window, at, _what) => {
    h.clock.set(at);
    const t = await createTenant(h, { tier: 'launch' });
    await setAiLimit(h, t, 1_000_000);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: 100_000, window });
    standIn.failNext({ kind: 'slow_first_byte', ms: 1500 });
    const call = chat(t);
    // The hold is made and counted; the provider has not answered yet.
    for (let i = 0; i < 100; i++) {
      const held = await h.deps.db.query("SELECT 1 FROM ai_reservations WHERE deployment_id = $1 AND status = 'held'", [t.deploymentId]);
      if (held.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    const held = Number((await b.windowsOf(budgetId))[0]!.spent_ai_tokens);
    expect(held).toBeGreaterThan(0);
    h.clock.advance(61 * 60 * 1000);
    expect(await expireAiHolds(h.deps.db, h.clock.now())).toBeGreaterThanOrEqual(1);
    expect((await b.windowsOf(budgetId)).map((w) => Number(w.spent_ai_tokens))).toEqual([window === 'day' ? 0 : held]);
    const res = await call;
    expect(res.statusCode, res.body).toBe(200);
    const used = (json(res).usage as { total_tokens: number }).total_tokens;
    expect(used).toBeGreaterThan(0);
    // Counted once, where its hold was (docs/budgets.md, AI calls): a day window still in progress got
    // the hold back at the expiry and now counts the call; an hour window that had ended by then was
    // given nothing back and keeps what the hold counted.
    expect((await b.windowsOf(budgetId)).map((w) => Number(w.spent_ai_tokens))).toEqual([window === 'day' ? used : held]);
    if (window === 'hour') expect(used).toBeLessThanOrEqual(held);
  });

  it('a credit budget lowered below what is spent refuses an AI call, even one the token quota pays for', async () => {
    h.clock.set('2026-02-05T12:00:00.000Z');
    const t = await richTenant();
    await setAiLimit(h, t, 1_000_000);
    const budgetId = await createBudget(t, { scope: 'organization', limit_credits: 10, window: 'day' });
    for (let i = 0; i < 10; i++) expect(json(await serviceUsage(t)).success).toBe(true);
    await changeBudget(t, budgetId, { limit_credits: 5 });
    // The MCP path refuses a charge once the limit is below what is spent.
    expect(json(await serviceUsage(t))).toMatchObject({ success: false, error: 'budget_exceeded' });
    const res = await chat(t);
    expect(res.statusCode, res.body).toBe(429);
    expect(json(res)).toMatchObject({ code: 'BUDGET_EXCEEDED', budget_id: budgetId });
  });
});

describe.runIf(dbKind === 'postgres')('the ai-holds sweep beside a settle (PostgreSQL)', () => {
  it('a sweep of a due hold waits for the balance row a batch holds, and the batch settles that hold: no deadlock', async () => {
    h.clock.set('2026-02-05T18:00:00.000Z');
    const t = await createTenant(h, { tier: 'launch' });
    await setAiLimit(h, t, 1_000_000);
    const now = h.clock.now();
    const held = await holdAiTokens(h.ctx, { id: t.deploymentId, organization_id: t.organizationId }, {
      model: 'gpt-4o-mini',
      modelClass: 'standard',
      promptTokens: 10,
      outputPerChoice: 10,
      choices: 1,
      expiresAt: new Date(now.getTime() + 60_000),
    });
    // As a deduction batch settling the hold: its balance row first, then (below) the hold's row.
    let sweep: Promise<number> | undefined;
    const settled = db.transaction(async (tx) => {
      await tx.query('SELECT 1 FROM credit_balances WHERE deployment_id = $1 FOR UPDATE', [t.deploymentId]);
      sweep = expireAiHolds(db, new Date(now.getTime() + 61_000));
      // The sweep is waiting for a lock before the batch goes on.
      for (let i = 0; i < 500; i++) {
        const waiting = await h.deps.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        );
        if (waiting[0]!.n > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      return tx.query("UPDATE ai_reservations SET status = 'settled', updated_at = $2 WHERE id = $1 AND status = 'held' RETURNING id", [held.id, now]);
    });
    expect(await settled).toHaveLength(1);
    // The hold was settled under the sweep's feet: nothing left to expire.
    expect(await sweep).toBe(0);
  });
});

describe('give-backs after the window rolled over, or after the budget went', () => {
  it('a release and a refund after their hour ended give nothing to the ended hour or to the next one', async () => {
    h.clock.set('2026-02-06T10:58:00.000Z');
    const t = await richTenant();
    const budgetId = await createBudget(t, { scope: 'organization', limit_credits: 2, window: 'hour' });
    expect(json(await reserve(t, 'late-1')).allowed).toBe(true);
    const charged = json(await serviceUsage(t));
    expect(charged.success).toBe(true);
    h.clock.set('2026-02-06T11:01:00.000Z');
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(json(await release(t, 'late-1')).released_credits).toBe(1);
    expect((await refund(charged.usage_id as string)).statusCode).toBe(200);
    expect((await b.windowsOf(budgetId)).map((w) => [w.window_start.toISOString(), w.spent_credits])).toEqual([
      ['2026-02-06T10:00:00.000Z', 2],
      ['2026-02-06T11:00:00.000Z', 1],
    ]);
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(json(await serviceUsage(t))).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a hold released and then past its expiry is given back once', async () => {
    h.clock.set('2026-02-06T12:00:00.000Z');
    const t = await richTenant();
    const budgetId = await createBudget(t, { scope: 'organization', limit_credits: 3, window: 'day' });
    expect(json(await reserve(t, 'once-1')).allowed).toBe(true);
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(json(await release(t, 'once-1')).released_credits).toBe(1);
    expect(json(await release(t, 'once-1')).released_credits).toBe(0);
    h.clock.advance(6 * 60 * 1000);
    await expireReservations(h.deps.db, h.clock.now());
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
  });

  it('a hold whose budget was deleted, or whose budget was made after it, is spent and released without touching any window', async () => {
    h.clock.set('2026-02-06T13:00:00.000Z');
    const t = await richTenant();
    const gone = await createBudget(t, { scope: 'organization', limit_credits: 5, window: 'day' });
    expect(json(await reserve(t, 'orphan-1')).allowed).toBe(true);
    expect(json(await reserve(t, 'orphan-2')).allowed).toBe(true);
    const del = await h.request({ method: 'DELETE', url: `/api/v1/admin/organizations/${t.organizationId}/budgets/${gone}`, headers: adminHeaders(h) });
    expect(del.statusCode, del.body).toBe(200);
    expect(json(await reserve(t, 'before-1')).allowed).toBe(true);
    const later = await createBudget(t, { scope: 'organization', limit_credits: 5, window: 'day' });
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(json(await release(t, 'orphan-1')).released_credits).toBe(1);
    const spent = json(await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x', invocation_id: 'orphan-2' } }));
    expect(spent.success).toBe(true);
    expect(json(await release(t, 'before-1')).released_credits).toBe(1);
    expect((await refund(spent.usage_id as string)).statusCode).toBe(200);
    // Only the charge made after the new budget existed is counted in it.
    expect((await b.windowsOf(later)).map((w) => w.spent_credits)).toEqual([1]);
    const balance = await h.deps.db.query<{ reserved: number }>('SELECT reserved FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
    expect(Number(balance[0]!.reserved)).toBe(0);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('an id reserved again after its hold lapsed is held anew in the budget window, so its record is not refused', async () => {
    h.clock.set('2026-02-07T10:00:00.000Z');
    const t = await richTenant();
    const budgetId = await createBudget(t, { scope: 'organization', limit_credits: 1, window: 'day' });
    expect(json(await reserve(t, 'again-1')).allowed).toBe(true);
    h.clock.advance(6 * 60 * 1000);
    // Not swept yet: the lapsed hold gives its room back and the id takes it again, in one transaction.
    const again = json<{ allowed: boolean; reservation_expires_at: string }>(await reserve(t, 'again-1'));
    expect(again.allowed).toBe(true);
    expect(new Date(again.reservation_expires_at).getTime()).toBe(h.clock.now().getTime() + 5 * 60 * 1000);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
    expect(json(await reserve(t, 'again-2'))).toMatchObject({ allowed: false, reason: 'budget_exceeded', payment_required: { budget_id: budgetId } });
    expect(json(await serviceUsage(t, { invocation_id: 'again-1' }))).toMatchObject({ success: true, credits_used: 1 });
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('an organization budget of the period window, its primary not touched since its period ended', () => {
  it('anchored on the 31st, untouched through a 30-day month: the first charge counts in the period the row rolls into, so a second cannot open another window', async () => {
    // The deployment's periods: [Mar 31, Apr 30), [Apr 30, May 31), [May 31, Jun 30), [Jun 30, Jul 31)…
    h.clock.set('2026-03-31T10:00:00.000Z');
    const t = await richTenant();
    const budgetId = await createBudget(t, { scope: 'organization', limit_credits: 1, window: 'period' });
    // Nothing touches the row until July 30: its period ended on Apr 30. The monthly anniversaries of that
    // end would put the first charge in [Jul 30, Aug 30), while the row rolls into [Jun 30, Jul 31), which
    // every later charge reads: two windows for one period, each with its own limit.
    h.clock.set('2026-07-30T12:00:00.000Z');
    // A read before any charge shows the period the row will roll into.
    expect(await readBudget(t, budgetId)).toMatchObject({ spent_credits: 0, window_start: '2026-06-30T10:00:00.000Z', resets_at: '2026-07-31T10:00:00.000Z' });
    expect(json(await serviceUsage(t)).success).toBe(true);
    expect(await readBudget(t, budgetId)).toMatchObject({ spent_credits: 1, window_start: '2026-06-30T10:00:00.000Z', resets_at: '2026-07-31T10:00:00.000Z' });
    h.clock.set('2026-07-30T12:30:00.000Z');
    expect(json(await serviceUsage(t))).toMatchObject({ success: false, error: 'budget_exceeded' });
    const windows = await db.query<{ window_start: Date; window_end: Date; spent_credits: number }>(
      'SELECT window_start, window_end, spent_credits FROM budget_windows WHERE budget_id = $1',
      [budgetId],
    );
    expect(windows.map((w) => [w.window_start.toISOString(), w.window_end.toISOString(), Number(w.spent_credits)])).toEqual([
      ['2026-06-30T10:00:00.000Z', '2026-07-31T10:00:00.000Z', 1],
    ]);
  });

  it('an AI call on such a deployment is held in the period its row rolls into', async () => {
    h.clock.set('2027-03-31T10:00:00.000Z');
    const t = await richTenant();
    await setAiLimit(h, t, 0);
    const budgetId = await createBudget(t, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 1000, window: 'period' });
    h.clock.set('2027-07-30T12:00:00.000Z');
    const res = await chat(t);
    expect(res.statusCode, res.body).toBe(200);
    const windows = await db.query<{ window_start: Date; window_end: Date }>('SELECT window_start, window_end FROM budget_windows WHERE budget_id = $1', [budgetId]);
    expect(windows.map((w) => [w.window_start.toISOString(), w.window_end.toISOString()])).toEqual([['2027-06-30T10:00:00.000Z', '2027-07-31T10:00:00.000Z']]);
  });
});

describe("a subscription period whose end moves: its budgets' period windows end with it", () => {
  /** The subscription reports its period (as billing/subscriptions.ts does on Stripe's events): the row, then the balance. */
  async function report(t: Tenant, subscription: string, start: string, end: string): Promise<void> {
    await h.deps.db.transaction(async (tx) => {
      await tx.query(
        `INSERT INTO subscriptions (organization_id, stripe_subscription_id, stripe_customer_id, status, current_period_start, current_period_end)
         VALUES ($1, $2, $3, 'active', $4, $5)
         ON CONFLICT (stripe_subscription_id) DO UPDATE SET current_period_start = EXCLUDED.current_period_start, current_period_end = EXCLUDED.current_period_end`,
        [t.organizationId, subscription, `cus_${subscription}`, start, end],
      );
      await followSubscriptionPeriod(tx, { deploymentId: t.deploymentId, start: new Date(start), end: new Date(end), now: h.clock.now(), actor: 'stripe' });
    });
  }
  const windowsOfBudget = async (budgetId: string) =>
    (
      await db.query<{ subject: string; window_start: Date; window_end: Date; spent_credits: number }>(
        'SELECT subject, window_start, window_end, spent_credits FROM budget_windows WHERE budget_id = $1 AND spent_credits > 0 ORDER BY window_start',
        [budgetId],
      )
    ).map((w) => [w.subject, w.window_start.toISOString(), w.window_end.toISOString(), Number(w.spent_credits)]);

  it('a renewal reported after the row rolled onto its own guess: the "*" window is not pruned at the guessed end', async () => {
    h.clock.set('2029-01-31T00:00:00.000Z');
    const t = await richTenant();
    const sub = unique('sub');
    await report(t, sub, '2029-01-31T00:00:00.000Z', '2029-02-28T00:00:00.000Z');
    const budgetId = await createBudget(t, { scope: 'tool', tool_name: '*', limit_credits: 5, window: 'period' });
    const deploymentBudget = await createBudget(t, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 100, window: 'period' });
    // A second past the unreported end: the row rolls onto its guess, the next anniversary of the
    // cycle (Mar 31: the end Feb 28 was clamped, the start's day is the 31st).
    h.clock.set('2029-02-28T00:00:01.000Z');
    for (let i = 0; i < 5; i++) expect(json(await serviceUsage(t)).success).toBe(true);
    expect(await windowsOfBudget(budgetId)).toEqual([['x', '2029-02-28T00:00:00.000Z', '2029-03-31T00:00:00.000Z', 5]]);
    // Stripe's renewal: the same start, another end (the billing cycle's anchor moved to the 5th).
    h.clock.set('2029-02-28T00:00:05.000Z');
    await report(t, sub, '2029-02-28T00:00:00.000Z', '2029-04-05T00:00:00.000Z');
    expect(await windowsOfBudget(budgetId)).toEqual([['x', '2029-02-28T00:00:00.000Z', '2029-04-05T00:00:00.000Z', 5]]);
    expect(await windowsOfBudget(deploymentBudget)).toEqual([['', '2029-02-28T00:00:00.000Z', '2029-04-05T00:00:00.000Z', 5]]);
    // Past the guessed end, still in the period: the window stays, with what it counted.
    h.clock.set('2029-04-01T00:00:00.000Z');
    await pruneEachBudgetWindows(h.deps.db, h.clock.now());
    expect(json(await serviceUsage(t))).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect(await windowsOfBudget(budgetId)).toEqual([['x', '2029-02-28T00:00:00.000Z', '2029-04-05T00:00:00.000Z', 5]]);
  });

  it("a trial extended: an end user's window keeps its count past the old end, and a refund then gives its room back", async () => {
    h.clock.set('2029-05-15T12:00:00.000Z');
    const t = await richTenant();
    const sub = unique('sub');
    await report(t, sub, '2029-05-10T00:00:00.000Z', '2029-06-10T00:00:00.000Z');
    const budgetId = await createBudget(t, { scope: 'end_user', end_user_id: '*', limit_credits: 5, window: 'period' });
    const charged: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = json<{ success: boolean; usage_id: string }>(await serviceUsage(t, { mcp_user_id: 'dave' }));
      expect(res.success).toBe(true);
      charged.push(res.usage_id);
    }
    // The trial is extended by a month: the same period start, a later end.
    h.clock.set('2029-05-20T00:00:00.000Z');
    await report(t, sub, '2029-05-10T00:00:00.000Z', '2029-07-10T00:00:00.000Z');
    h.clock.set('2029-06-20T00:00:00.000Z');
    await pruneEachBudgetWindows(h.deps.db, h.clock.now());
    expect(json(await serviceUsage(t, { mcp_user_id: 'dave' }))).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect(await windowsOfBudget(budgetId)).toEqual([['dave', '2029-05-15T12:00:00.000Z', '2029-07-10T00:00:00.000Z', 5]]);
    // The window is in progress: a refund gives its room back, and the room is spent once.
    expect((await refund(charged[0]!)).statusCode).toBe(200);
    expect(json(await serviceUsage(t, { mcp_user_id: 'dave' })).success).toBe(true);
    expect(json(await serviceUsage(t, { mcp_user_id: 'dave' }))).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
