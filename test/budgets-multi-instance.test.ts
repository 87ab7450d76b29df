import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { countChatPromptBound } from '../src/modules/ai/prompt.js';
import { type StandIn, startOpenAiStandIn } from './ai-stand-in/index.js';
import { budgetFixtures } from './budget-fixtures.js';
import { createHarness, createTenant, grant, type Harness, json, serviceHeaders, testDatabase } from './harness.js';
import { usageFixtures } from './usage-fixtures.js';

/**
 * A block budget across two instances on one database (docs/budgets.md, Enforcement): an organization
 * budget shared by two deployments is charged by batches of both instances at once — several batches in
 * flight per instance, on different deployments — and is never exceeded.
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

describe('a block budget across two instances', () => {
  it('200 parallel records on two deployments through two instances against an organization budget of 50: exactly 50 charged', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const second = await usage.addDeployment(t.organizationId);
    for (const id of [t.deploymentId, second]) await grant(h, id, 1_000);
    const budgetId = await budgets.addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 50, window: 'day' });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        (i % 2 === 0 ? a : b).inject({
          method: 'POST',
          url: '/api/v1/mcp/usage',
          headers: serviceHeaders(h),
          payload: { deployment_id: i % 4 < 2 ? t.deploymentId : second, tool_name: 'x', invocation_id: `both-${i}` },
        }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    expect(results.filter((r) => json(r).success === true)).toHaveLength(50);
    expect(results.filter((r) => json(r).error === 'budget_exceeded')).toHaveLength(150);
    expect((await budgets.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([50]);
    const spent = await h.deps.db.query<{ n: number }>(
      'SELECT COALESCE(SUM(quantity), 0)::int AS n FROM usage_records WHERE organization_id = $1 AND success',
      [t.organizationId],
    );
    expect(spent[0]!.n).toBe(50);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
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
