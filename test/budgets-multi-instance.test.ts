import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { BUDGETS_LOCK, budgetsChanged } from '../src/modules/credits/budgets.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { countChatPromptBound } from '../src/modules/ai/prompt.js';
import { type StandIn, startOpenAiStandIn } from './ai-stand-in/index.js';
import { budgetFixtures } from './budget-fixtures.js';
import { adminHeaders, createHarness, createTenant, dbKind, grant, type Harness, json, serviceHeaders, testDatabase } from './harness.js';
import { usageFixtures } from './usage-fixtures.js';

/**
 * A block budget across two instances on one database (docs/budgets.md, Enforcement): an organization
 * budget shared by two deployments is charged by batches of both instances at once — several batches in
 * flight per instance, on different deployments — and is never exceeded; a budget changed through one
 * instance binds the other at once, whatever it remembers; its events are sent once across both.
 */
let h: Harness;
let a: FastifyInstance;
let b: FastifyInstance;
let standIn: StandIn;
beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  h = await createHarness();
  const db = await testDatabase();
  // Both instances reach the OpenAI stand-in, with upstream connections for every call held open there.
  const ai = { aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini'], aiMaxConnections: 64 };
  a = await buildApp({ config: testConfig({ deductBatchInFlight: 4, ...ai }), db, clock: h.clock });
  b = await buildApp({ config: testConfig({ deductBatchInFlight: 4, ...ai }), db, clock: h.clock });
  await Promise.all([a.listen({ port: 0, host: '127.0.0.1' }), b.listen({ port: 0, host: '127.0.0.1' })]);
});
afterAll(async () => {
  await Promise.all([a.close(), b.close(), h.close()]);
  await standIn.close();
});
const budgets = budgetFixtures(() => h);
const usage = usageFixtures(() => h);

/** An organization with a second deployment, both with credits to spare: only budgets refuse. */
async function twoDeployments() {
  const t = await createTenant(h, { tier: 'launch' });
  const second = await usage.addDeployment(t.organizationId);
  for (const id of [t.deploymentId, second]) await grant(h, id, 1_000);
  return { t, second };
}

/** The organization's successful records add up to `credits`, and its books balance. */
async function expectCharged(organizationId: string, credits: number) {
  const spent = await h.deps.db.query<{ n: number }>(
    'SELECT COALESCE(SUM(quantity), 0)::int AS n FROM usage_records WHERE organization_id = $1 AND success',
    [organizationId],
  );
  expect(spent[0]!.n).toBe(credits);
  expect(await findLedgerMismatches(h.deps.db, organizationId)).toEqual([]);
}

/** `n` service records at once, alternating the two instances, and the two deployments in pairs. */
const recordsAcross = (deployments: [string, string], n: number, prefix: string) =>
  Promise.all(
    Array.from({ length: n }, (_, i) =>
      (i % 2 === 0 ? a : b).inject({
        method: 'POST',
        url: '/api/v1/mcp/usage',
        headers: serviceHeaders(h),
        payload: { deployment_id: deployments[i % 4 < 2 ? 0 : 1], tool_name: 'x', invocation_id: `${prefix}-${i}` },
      }),
    ),
  );

describe('a block budget across two instances', () => {
  it('200 parallel records on two deployments through two instances against an organization budget of 50: exactly 50 charged', async () => {
    const { t, second } = await twoDeployments();
    const budgetId = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 50, window: 'day' });
    const results = await recordsAcross([t.deploymentId, second], 200, 'both');
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(results.filter((r) => json(r).success === true)).toHaveLength(50);
    expect(results.filter((r) => json(r).error === 'budget_exceeded')).toHaveLength(150);
    expect((await budgets.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([50]);
    await expectCharged(t.organizationId, 50);
  });
});

describe('AI holds under a block budget across two instances', () => {
  it('200 parallel calls through two instances against a token budget that holds 50: exactly 50 reach the provider', async () => {
    // Enterprise: no AI token limit, so only the budget holds the calls back.
    const t = await createTenant(h, { tier: 'enterprise' });
    const messages = [{ role: 'user' as const, content: 'x' }];
    const perCall = countChatPromptBound(h.deps.config, 'gpt-4o-mini', { model: 'gpt-4o-mini', messages }) + 30;
    const budgetId = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: null, limitAiTokens: 50 * perCall, window: 'day' });
    const clientOf = (app: FastifyInstance) =>
      new OpenAI({ baseURL: `http://127.0.0.1:${(app.server.address() as { port: number }).port}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0 });
    const clients = [clientOf(a), clientOf(b)];
    // The admitted calls stay at the provider until resumed: every hold is counted at once.
    standIn.failNext({ kind: 'pause', afterChunks: 1 }, 50);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 200 }, (_, i) =>
        clients[i % 2]!.chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 30, stream: true, stream_options: { include_usage: true } }),
      ),
    );
    const admitted = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as InstanceType<typeof OpenAI.APIError>] : []));
    expect(admitted).toHaveLength(50);
    expect(refused.map((e) => [e.status, e.error])).toEqual(Array.from({ length: 150 }, () => [429, 'budget_exceeded']));
    expect(standIn.requests).toHaveLength(50);
    expect((await budgets.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([50 * perCall]);
    standIn.resume();
    for (const o of admitted) for await (const _ of o.value) void _;
    await standIn.idle();
    const used = await h.deps.db.query<{ n: number }>(
      "SELECT COALESCE(SUM((metadata->>'tokens')::bigint), 0)::int AS n FROM usage_records WHERE organization_id = $1 AND metric = 'ai_tokens'",
      [t.organizationId],
    );
    expect((await budgets.windowsOf(budgetId)).map((w) => w.spent_ai_tokens)).toEqual([used[0]!.n]);
  });
});

/** Batches an instance sent in one round trip on remembered rows, by outcome (committed or stale). */
async function remembered(app: FastifyInstance, outcome: 'committed' | 'stale'): Promise<number> {
  const { values } = await app.deps.metrics.deductionBatchRemembered.get();
  return values.find((v) => v.labels.outcome === outcome)?.value ?? 0;
}

describe('a budget changed through one instance while the other remembers the rows', () => {
  it('the other refuses at once past a lowered limit, charges when it is raised, and once the budget is deleted', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    await grant(h, t.deploymentId, 1_000);
    const budgetsUrl = `/api/v1/admin/organizations/${t.organizationId}/budgets`;
    const made = await a.inject({ method: 'POST', url: budgetsUrl, headers: adminHeaders(h), payload: { scope: 'organization', limit_credits: 100, window: 'day' } });
    expect(made.statusCode, made.body).toBe(201);
    const budgetId = json<{ id: string }>(made).id;
    let n = 0;
    const recordOnB = async () =>
      json(await b.inject({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x', invocation_id: `changed-${n++}` } }));
    const changeOnA = async (limit: number) => {
      const res = await a.inject({ method: 'PUT', url: `${budgetsUrl}/${budgetId}`, headers: adminHeaders(h), payload: { limit_credits: limit } });
      expect(res.statusCode, res.body).toBe(200);
    };

    const committed = await remembered(b, 'committed');
    for (let i = 0; i < 5; i++) expect(await recordOnB()).toMatchObject({ success: true });
    // b now charges this deployment in one round trip on the rows and window it remembers.
    expect(await remembered(b, 'committed')).toBeGreaterThan(committed);

    const stale = await remembered(b, 'stale');
    await changeOnA(5);
    expect(await recordOnB()).toMatchObject({ success: false, error: 'budget_exceeded' });
    // What b remembered was refused as a whole (the change gave the balance row a new version).
    expect(await remembered(b, 'stale')).toBe(stale + 1);
    await changeOnA(6);
    expect(await recordOnB()).toMatchObject({ success: true });
    expect(await recordOnB()).toMatchObject({ success: false, error: 'budget_exceeded' });
    expect((await budgets.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([6]);

    const deleted = await a.inject({ method: 'DELETE', url: `${budgetsUrl}/${budgetId}`, headers: adminHeaders(h) });
    expect(deleted.statusCode, deleted.body).toBe(200);
    expect(await recordOnB()).toMatchObject({ success: true });
    await expectCharged(t.organizationId, 7);
  });
});

/** Openings of a balance row of `organizationId` waiting for a change of its budgets (credits/budgets.ts BUDGETS_LOCK). */
async function openingsWaiting(organizationId: string): Promise<number> {
  const rows = await h.deps.db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks
     WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND NOT granted
       AND objid::text::bigint = (hashtext($2)::bigint + 4294967296) % 4294967296`,
    [BUDGETS_LOCK, organizationId],
  );
  return rows[0]!.n;
}

// Two transactions at once: the embedded database has one connection, on which the second would wait for the first.
describe.runIf(dbKind === 'postgres')("a deployment opened while its organization's budgets change", () => {
  it('waits for the change to commit, so neither instance counts on its row with the budgets from before', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    let opening: Promise<string> | undefined;
    await h.deps.db.transaction(async (tx) => {
      // As the budgets API does: the organization's rows get their new version first, then the budget.
      await budgetsChanged(tx, t.organizationId);
      opening = usage.addDeployment(t.organizationId);
      // The new deployment's balance row is not opened (and no instance can count on it) until this commits.
      await expect.poll(() => openingsWaiting(t.organizationId)).toBe(1);
      await tx.query(
        `INSERT INTO budgets (organization_id, scope, limit_credits, window_kind, mode, created_at, updated_at)
         VALUES ($1, 'organization', 3, 'day', 'block', $2, $2)`,
        [t.organizationId, h.clock.now()],
      );
    });
    const second = await opening!;
    await grant(h, second, 1_000);
    // Through both instances, in two rounds (the second on rows each remembers): the limit holds.
    for (const round of ['first', 'second']) await recordsAcross([second, second], 6, `opened-${round}`);
    await expectCharged(t.organizationId, 3);
  });
});

describe('budget events across two instances', () => {
  it('80 parallel records through both instances on two deployments: each threshold once, budget.exceeded once', async () => {
    const { t, second } = await twoDeployments();
    const budgetId = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 10, window: 'day' });
    const results = await recordsAcross([t.deploymentId, second], 80, 'events');
    expect(results.filter((r) => json(r).success === true)).toHaveLength(10);
    const events = await h.deps.db.query<{ type: string; threshold: number; budget_id: string }>(
      `SELECT type, (data->>'threshold')::int AS threshold, data->>'budget_id' AS budget_id FROM outbox_events
       WHERE organization_id = $1 AND type LIKE 'budget.%' ORDER BY type, threshold`,
      [t.organizationId],
    );
    expect(events).toEqual([
      { type: 'budget.exceeded', threshold: 100, budget_id: budgetId },
      { type: 'budget.threshold', threshold: 80, budget_id: budgetId },
      { type: 'budget.threshold', threshold: 100, budget_id: budgetId },
    ]);
  });
});
