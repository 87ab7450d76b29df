import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { createPassesHarness, createTenant, type Harness, json, setAiLimit, type Tenant } from '../../../test/harness.js';
import { delta, scrape } from '../../../test/metrics.js';
import { creditsForTokens, expireAiHolds, holdAiTokens } from '../credits/index.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import { countChatPromptBound } from './prompt.js';

/**
 * AI calls under budgets (docs/budgets.md, AI calls), through the official `openai` SDK and the
 * OpenAI stand-in: a call's hold counts its tokens (and the credits it may spend past the token quota)
 * in every budget it falls under while held, a block budget it would cross refuses it with 429
 * BUDGET_EXCEEDED before anything reaches the provider, and the settle, a release or an expiry puts
 * the windows at what was actually used.
 */
let h: Harness;
let standIn: StandIn;
let base: string;
beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  // Enough upstream connections for the 50 calls held open at the provider at once.
  // expireAiHolds below sweeps every tenant's holds a minute on: a database of its own (createPassesHarness).
  h = await createPassesHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini', 'gpt-4o'], aiMaxConnections: 64 });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const b = budgetFixtures(() => h);
const client = (t: Tenant, headers: Record<string, string> = {}) =>
  new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0, defaultHeaders: headers });
const messages = [{ role: 'user' as const, content: 'x' }];
/** What our hold counts for `messages` with `max_tokens` output tokens. */
const holdOf = (maxTokens: number) => countChatPromptBound(h.deps.config, 'gpt-4o-mini', { model: 'gpt-4o-mini', messages }) + maxTokens;

async function caught(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

/** One chat completion through the service (its answer's status, headers and parsed body). */
async function chat(t: Tenant, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  const res = await h.request({
    method: 'POST',
    url: '/api/v1/ai/chat/completions',
    headers: { authorization: `Bearer ${t.apiKey}`, ...headers },
    payload: { model: 'gpt-4o-mini', messages, ...body },
  });
  return { status: res.statusCode, headers: res.headers, body: json(res) as Record<string, unknown> };
}

async function nothingHeld(t: Tenant) {
  const held = await h.deps.db.query("SELECT id FROM ai_reservations WHERE deployment_id = $1 AND status = 'held'", [t.deploymentId]);
  expect(held).toEqual([]);
}

async function tokensUsed(t: Tenant): Promise<number> {
  const rows = await h.deps.db.query<{ n: number }>(
    "SELECT COALESCE(SUM((metadata->>'tokens')::bigint), 0)::bigint AS n FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens'",
    [t.deploymentId],
  );
  return Number(rows[0]!.n);
}

async function eventsOf(t: Tenant, type: string) {
  return h.deps.db.query<{ data: Record<string, unknown> }>('SELECT data FROM outbox_events WHERE organization_id = $1 AND type = $2 ORDER BY created_at, id', [
    t.organizationId,
    type,
  ]);
}

describe('AI calls under a block budget', () => {
  it('200 parallel calls against a token budget that holds 50 of them: exactly 50 reach the provider, 150 are 429 BUDGET_EXCEEDED', async () => {
    // Enterprise: no AI token limit, so nothing but the budget holds the calls back (budgets bind every tier).
    const t = await createTenant(h, { tier: 'enterprise' });
    const perCall = holdOf(30);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'deployment', deploymentId: t.deploymentId, limitCredits: null, limitAiTokens: 50 * perCall, window: 'day' });
    const before = standIn.requests.length;
    // The admitted calls stay in the provider until resumed: every hold is counted at once.
    standIn.failNext({ kind: 'pause', afterChunks: 1 }, 50);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 200 }, () =>
        client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 30, stream: true, stream_options: { include_usage: true } }),
      ),
    );
    const admitted = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as InstanceType<typeof OpenAI.APIError>] : []));
    expect(admitted).toHaveLength(50);
    expect(refused).toHaveLength(150);
    for (const err of refused) {
      expect(err.status).toBe(429);
      expect(err.error).toBe('budget_exceeded');
      expect(err.headers?.get('x-should-retry')).toBe('false');
    }
    expect(standIn.requests.length - before).toBe(50);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([50 * perCall]);
    const one = await chat(t, { max_tokens: 30 });
    expect(one.status).toBe(429);
    expect(one.body).toMatchObject({ error: 'budget_exceeded', code: 'BUDGET_EXCEEDED', message: expect.any(String), budget_id: budgetId, resets_at: expect.any(String) });
    standIn.resume();
    for (const o of admitted) for await (const _ of o.value) void _;
    await standIn.idle();
    // Settled: the window holds what the provider reported, not the holds.
    const used = await tokensUsed(t);
    expect(used).toBeLessThan(50 * perCall);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([used]);
    await nothingHeld(t);
  });

  it('credits past the token quota count in a credit budget; the balance refuses before the budget (AI_QUOTA_EXCEEDED)', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 1000 });
    // No quota tokens: every token is paid from purchased credits.
    await setAiLimit(h, t, 0);
    const perCall = creditsForTokens(holdOf(40), 'premium');
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 2 * perCall, window: 'hour' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 40 });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 40 });
    const [window] = await b.windowsOf(budgetId);
    const charged = await h.deps.db.query<{ n: number }>(
      "SELECT COALESCE(SUM(quantity), 0)::int AS n FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens'",
      [t.deploymentId],
    );
    expect(window!.spent_credits).toBe(charged[0]!.n);
    // The window has room for less than a full call: the allowance shrinks to fit it, or, without
    // room for the prompt and one token, the budget refuses.
    const room = 2 * perCall - window!.spent_credits;
    const err = await chat(t, { messages: [{ role: 'user', content: 'x '.repeat(2000) }], max_tokens: 40 });
    expect(room).toBeLessThan(creditsForTokens(2000, 'premium'));
    expect(err.status).toBe(429);
    expect(err.body).toMatchObject({ code: 'BUDGET_EXCEEDED', budget_id: budgetId });
    // A deployment with nothing left is refused by its balance first, whatever its budgets say.
    const poor = await createTenant(h, { tier: 'trial' });
    await setAiLimit(h, poor, 0);
    await b.addBudget({ organizationId: poor.organizationId, scope: 'organization', limitCredits: 1, window: 'hour' });
    const first = await chat(poor, { max_tokens: 40 });
    expect(first.body).toMatchObject({ code: 'AI_QUOTA_EXCEEDED' });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    await nothingHeld(t);
  });

  it('Retry-After comes with a budget refusal only within the hour before the window resets; the refusal is counted', async () => {
    // 10:00 UTC of the next day: a day window resets in 14 hours, an hour window in one.
    const now = h.clock.now();
    h.clock.set(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1, 10)));
    for (const [window, retryAfter] of [
      ['hour', '3600'],
      ['day', undefined],
    ] as const) {
      const t = await createTenant(h, { tier: 'enterprise' });
      // Room for the prompt but not one token of output: refused.
      const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: holdOf(0), window });
      const before = await scrape(h);
      const refused = await chat(t, { max_tokens: 30 });
      const after = await scrape(h);
      expect(delta(before, after, 'creditgate_deduction_refusals_total', { source: 'ai', reason: 'budget_exceeded' })).toBe(1);
      expect(refused.status).toBe(429);
      expect(refused.body).toMatchObject({ code: 'BUDGET_EXCEEDED', budget_id: budgetId });
      expect(refused.headers['x-should-retry']).toBe('false');
      expect(refused.headers['retry-after'], window).toBe(retryAfter);
    }
  });

  it('a hold shrinks its allowance to the room a token budget leaves', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const prompt = holdOf(0);
    await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: prompt + 5, window: 'day' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 100 });
    expect(standIn.requests.at(-1)!.body.max_tokens).toBe(5);
  });
});

describe('end users and keys of AI calls', () => {
  it('the `user` field and X-End-User-Id name the end user: a "*" budget keeps a window per end user', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const perCall = holdOf(20);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: null, limitAiTokens: perCall, window: 'day' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20, user: 'alice' });
    // alice's window was settled to what she used (20 output tokens of 20): no room for another call.
    const refused = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20, user: 'alice' }));
    expect(refused.status).toBe(429);
    expect(refused.error).toBe('budget_exceeded');
    // The header names her too.
    const byHeader = await chat(t, { max_tokens: 20 }, { 'x-end-user-id': 'alice' });
    expect(byHeader.status).toBe(429);
    expect(byHeader.body).toMatchObject({ code: 'BUDGET_EXCEEDED', budget_id: budgetId });
    await client(t, { 'x-end-user-id': 'bob' }).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20 });
    // No end user: not under an end-user budget.
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20 });
    // (The '' row counts the budget's events: docs/budgets.md, Events.)
    expect((await b.windowsOf(budgetId)).filter((w) => w.subject !== '').map((w) => [w.subject, w.spent_ai_tokens])).toEqual([
      ['alice', perCall],
      ['bob', perCall],
    ]);
    const differ = await chat(t, { user: 'alice' }, { 'x-end-user-id': 'bob' });
    expect(differ.status).toBe(400);
    expect(differ.body).toMatchObject({ code: 'INVALID_REQUEST', param: 'user' });
    const star = await chat(t, { user: '*' });
    expect(star.status).toBe(400);
    expect(star.body).toMatchObject({ code: 'INVALID_REQUEST', param: 'user' });
  });

  it('an api_key budget holds the calls of that key only', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const keys = await h.deps.db.query<{ id: string }>('SELECT id FROM api_keys WHERE organization_id = $1', [t.organizationId]);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'api_key', apiKeyId: keys[0]!.id, limitCredits: null, limitAiTokens: 1, window: 'day' });
    const err = await chat(t, { max_tokens: 5 });
    expect(err.body).toMatchObject({ code: 'BUDGET_EXCEEDED', budget_id: budgetId });
    // The deployment's own credentials are no key: the budget does not hold them.
    const res = await h.request({
      method: 'POST',
      url: '/api/v1/ai/chat/completions',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
      payload: { model: 'gpt-4o-mini', messages, max_tokens: 5 },
    });
    expect(res.statusCode, res.body).toBe(200);
  });
});

describe('what gives room back, and windows', () => {
  it('an upstream fault releases the hold: the window goes back to what it was', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: 10_000, window: 'day' });
    standIn.failNext({ kind: 'status', status: 500 });
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 30 }));
    expect(err.status).toBe(502);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([0]);
    await nothingHeld(t);
  });

  it('a hold left by a process that died is given back to its window when it expires', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: 10_000, window: 'day' });
    const now = h.clock.now();
    const held = await holdAiTokens(h.ctx, { id: t.deploymentId, organization_id: t.organizationId }, {
      model: 'gpt-4o-mini',
      modelClass: 'premium',
      promptTokens: 12,
      outputPerChoice: 30,
      choices: 1,
      expiresAt: new Date(now.getTime() + 60_000),
    });
    expect(held.budgetWindows).toHaveLength(1);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([42]);
    // At least this one: another test file sharing the database may have left a hold due by then.
    expect(await expireAiHolds(h.deps.db, new Date(now.getTime() + 61_000))).toBeGreaterThanOrEqual(1);
    const [row] = await h.deps.db.query<{ status: string }>('SELECT status FROM ai_reservations WHERE id = $1', [held.id]);
    expect(row!.status).not.toBe('held');
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([0]);
  });

  it('a provider that reports more than was held counts in full, past the limit; the next call is refused', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const limit = holdOf(10) + 5;
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'deployment', deploymentId: t.deploymentId, limitCredits: null, limitAiTokens: limit, window: 'day' });
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 50, completion_tokens: 500, total_tokens: 550 } });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 10 });
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([550]);
    const err = await chat(t, { max_tokens: 1 });
    expect(err.body).toMatchObject({ code: 'BUDGET_EXCEEDED' });
  });

  it('an hourly token budget refuses until the hour ends, then admits again (fake clock)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: holdOf(20), window: 'hour' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20 });
    const err = await chat(t, { max_tokens: 20 });
    expect(err.status).toBe(429);
    const resetsAt = new Date(err.body.resets_at as string);
    expect(resetsAt.getTime() % 3_600_000).toBe(0);
    h.clock.set(resetsAt);
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20 });
    const windows = await b.windowsOf(budgetId);
    expect(windows).toHaveLength(2);
    expect(windows[1]!.window_start.getTime()).toBe(resetsAt.getTime());
  });
});

describe('events and the envelope', () => {
  it('budget.threshold (metric ai_tokens) once per threshold, budget.exceeded once, in the window', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const perCall = holdOf(20);
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: perCall * 2, window: 'day' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20 });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 20 });
    for (let i = 0; i < 2; i++) expect((await chat(t, { max_tokens: 20 })).status).toBe(429);
    const thresholds = await eventsOf(t, 'budget.threshold');
    // Written at one fake-clock instant: ordered by threshold here.
    expect(thresholds.map((e) => [e.data.metric, e.data.threshold]).sort((x, y) => Number(x[1]) - Number(y[1]))).toEqual([
      ['ai_tokens', 80],
      ['ai_tokens', 100],
    ]);
    const exceeded = await eventsOf(t, 'budget.exceeded');
    expect(exceeded).toHaveLength(1);
    expect(exceeded[0]!.data).toMatchObject({ budget_id: budgetId, metric: 'ai_tokens', threshold: 100, limit: perCall * 2 });
  });

  it('/api/ai/generate answers a budget refusal in the envelope: 429 BUDGET_EXCEEDED with details.budget_id and resets_at', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: 1, window: 'day' });
    const res = await h.request({
      method: 'POST',
      url: '/api/ai/generate',
      headers: { authorization: `Bearer ${t.apiKey}` },
      payload: { prompt: 'hi', max_tokens: 5 },
    });
    expect(res.statusCode, res.body).toBe(429);
    expect(res.headers['x-should-retry']).toBe('false');
    expect(json(res)).toMatchObject({ success: false, error: { code: 'BUDGET_EXCEEDED' }, details: { budget_id: budgetId, resets_at: expect.any(String) } });
  });
});
