import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { createHarness, createTenant, dbKind, type Harness, type Tenant } from '../../../test/harness.js';
import { testPgOptions } from '../../../test/pg-options.js';
import { type PgRelay, startPgRelay } from '../../../test/pg-relay.js';
import { buildApp } from '../../app.js';
import { testConfig } from '../../config.js';
import { type Database, openDatabase } from '../../db/client.js';
import { holdAiTokens, releaseAiHold } from '../credits/index.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import { findOwedMismatches } from '../credits/owed.js';

/**
 * docs/ai-proxy.md, Database faults: an AI call whose hold, settle or release meets a lost connection.
 * A settle whose COMMIT answer is lost has committed: the answer is delivered, charged once (before, a
 * 503 "delivered nothing" for a charged call, which the SDKs retry: paid twice). A hold whose COMMIT
 * answer is lost, or a release that meets a dead connection, is given back in the background (before,
 * the quota stayed held for the hour of AI_HOLD_TTL_MS). A quota only held by calls in progress is
 * refused as such, without `x-should-retry: false`.
 */
const ai = { aiModels: ['gpt-4o-mini', 'gpt-4o'], aiApiKey: 'sk-upstream' };
const hello = [{ role: 'user', content: 'Say hello' }];
/** Background give-backs try for about 30 s; these polls wait well within that. */
const POLL = { timeout: 20_000, interval: 100 };

let standIn: StandIn;
let h: Harness;
beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  h = await createHarness({ ...ai, aiBaseUrl: standIn.url });
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

async function state(t: Tenant) {
  expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  expect(await findOwedMismatches(h.deps.db, t.organizationId)).toEqual([]);
  const [b] = await h.deps.db.query<{ ai_tokens_used: number; ai_tokens_reserved: number }>(
    'SELECT ai_tokens_used, ai_tokens_reserved FROM credit_balances WHERE deployment_id = $1',
    [t.deploymentId],
  );
  const records = await h.deps.db.query<{ id: string }>("SELECT id FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens'", [t.deploymentId]);
  const holds = await h.deps.db.query<{ status: string }>('SELECT status FROM ai_reservations WHERE deployment_id = $1', [t.deploymentId]);
  return { used: b!.ai_tokens_used, reserved: b!.ai_tokens_reserved, records: records.length, held: holds.filter((x) => x.status === 'held').length };
}

// Not through a pooler (scripts/test-pgbouncer.ts sets CG_TEST_POOLER): the relay finds the statement to
// cut by its prepared statement's name, and the pooler's run sends every statement unnamed.
describe.runIf(dbKind === 'postgres' && !process.env.CG_TEST_POOLER)('AI hold, settle and release under database faults (PostgreSQL, through a relay that loses connections)', () => {
  let relay: PgRelay;
  let db: Database;
  let app: FastifyInstance;
  beforeAll(async () => {
    relay = await startPgRelay(inject('postgresUrl'));
    db = await openDatabase({ databaseUrl: relay.url, dataDir: '', poolSize: 4, ...testPgOptions });
    app = await buildApp({ config: testConfig({ ...ai, aiBaseUrl: standIn.url }), db, clock: h.clock });
    await app.ready();
  });
  afterAll(async () => {
    relay?.refuseConnections(false);
    await app?.close();
    await db?.close();
    await relay?.close();
  });

  const post = (t: Tenant, url: string, payload: Record<string, unknown>) =>
    app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${t.apiKey}` }, payload });
  const chat = (t: Tenant, extra: Record<string, unknown> = { max_tokens: 20 }) =>
    post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o-mini', messages: hello, ...extra });

  /** A tenant whose first call warmed the app's connections and caches. */
  async function warmTenant(tier: 'trial' | 'enterprise' = 'trial'): Promise<Tenant> {
    const t = await createTenant(h, { tier });
    expect((await chat(t, { max_tokens: 5 })).statusCode).toBe(200);
    return t;
  }

  /** One call whose settle meets `fault`: the answer, and what the database counted for it. */
  async function settleMeets(t: Tenant, fault: Promise<void>, call: () => ReturnType<typeof chat>) {
    const before = await state(t);
    const res = await call();
    await fault;
    const after = await state(t);
    return { res, records: after.records - before.records, tokens: after.used - before.used, held: after.held, reserved: after.reserved };
  }

  it('a non-streamed chat call whose settle COMMIT answer is lost: settled, so its answer is delivered (200), charged once', async () => {
    const t = await warmTenant();
    const r = await settleMeets(t, relay.cutNextCommit('ai_hold_settle'), () => chat(t));
    expect(r.res.statusCode, r.res.body).toBe(200);
    const usage = r.res.json<{ usage: { prompt_tokens: number; completion_tokens: number } }>().usage;
    expect({ records: r.records, tokens: r.tokens, held: r.held, reserved: r.reserved }).toEqual({
      records: 1,
      tokens: usage.prompt_tokens + usage.completion_tokens,
      held: 0,
      reserved: 0,
    });
  });

  it('a settle whose COMMIT never reached the database: still held, so it is settled again once (200, charged once)', async () => {
    const t = await warmTenant();
    const r = await settleMeets(t, relay.cutNextCommitSent('ai_hold_settle'), () => chat(t));
    expect(r.res.statusCode, r.res.body).toBe(200);
    expect({ records: r.records, held: r.held, reserved: r.reserved }).toEqual({ records: 1, held: 0, reserved: 0 });
    expect(r.tokens).toBeGreaterThan(0);
  });

  it('/api/ai/generate, the Responses API and a call without a hold (no AI token limit) deliver a settle whose COMMIT answer is lost', async () => {
    const t = await warmTenant();
    const gen = await settleMeets(t, relay.cutNextCommit('ai_hold_settle'), () => post(t, '/api/ai/generate', { prompt: 'hi', max_tokens: 5 }));
    expect(gen.res.statusCode, gen.res.body).toBe(200);
    const generated = gen.res.json<{ data: { usage: { input_tokens: number; output_tokens: number } } }>().data;
    expect({ records: gen.records, tokens: gen.tokens, held: gen.held }).toEqual({
      records: 1,
      tokens: generated.usage.input_tokens + generated.usage.output_tokens,
      held: 0,
    });

    const resp = await settleMeets(t, relay.cutNextCommit('ai_hold_settle'), () =>
      post(t, '/api/v1/ai/responses', { model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 16 }),
    );
    expect(resp.res.statusCode, resp.res.body).toBe(200);
    expect({ records: resp.records, held: resp.held }).toEqual({ records: 1, held: 0 });

    const unlimited = await warmTenant('enterprise');
    const free = await settleMeets(unlimited, relay.cutNextCommit('ai_usage_request'), () => chat(unlimited));
    expect(free.res.statusCode, free.res.body).toBe(200);
    expect(free.records).toBe(1);
  });

  it('a settle whose COMMIT answer is lost with the database then unreachable: 503 as before, after bounded tries', async () => {
    const t = await warmTenant();
    const cut = relay.cutNextCommit('ai_hold_settle').then(() => relay.refuseConnections(true));
    let res: Awaited<ReturnType<typeof chat>>;
    try {
      res = await chat(t);
      await cut;
    } finally {
      relay.refuseConnections(false);
    }
    expect(res.statusCode, res.body).toBe(503);
    expect((await chat(t)).statusCode).toBe(200);
  });

  it('a hold whose COMMIT answer is lost: 503, nothing sent upstream, and the hold is given back (not left for an hour)', async () => {
    const t = await warmTenant();
    const upstreamBefore = standIn.requests.length;
    const cut = relay.cutNextCommit('INSERT INTO ai_reservations');
    // No max_tokens: the hold is everything the trial's 1,000 tokens can pay for.
    const first = await chat(t, {});
    await cut;
    expect(first.statusCode, first.body).toBe(503);
    expect(standIn.requests.length).toBe(upstreamBefore);
    await expect.poll(async () => ({ held: (await state(t)).held, reserved: (await state(t)).reserved }), POLL).toEqual({ held: 0, reserved: 0 });
    const statuses = await h.deps.db.query<{ status: string }>('SELECT status FROM ai_reservations WHERE deployment_id = $1 ORDER BY status', [t.deploymentId]);
    expect(statuses.map((x) => x.status)).toEqual(['released', 'settled']);
    expect((await chat(t)).statusCode).toBe(200);
  });

  it('an upstream 500 whose release meets a lost connection: 502, and the release is tried again until the hold is given back', async () => {
    const t = await warmTenant();
    standIn.failNext({ kind: 'status', status: 500 });
    const cut = relay.cutNextBefore('ai_hold_release');
    const first = await chat(t, {});
    await cut;
    expect(first.statusCode, first.body).toBe(502);
    await expect.poll(async () => (await state(t)).held, POLL).toBe(0);
    expect((await state(t)).reserved).toBe(0);
    expect((await chat(t)).statusCode).toBe(200);
  });
});

describe('a quota held by AI calls in progress is refused as held, not used up', () => {
  const chat = (t: Tenant, content = 'Say hello') =>
    h.request({
      method: 'POST',
      url: '/api/v1/ai/chat/completions',
      headers: { authorization: `Bearer ${t.apiKey}` },
      payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content }], max_tokens: 20 },
    });
  /** A call in progress elsewhere holding `tokens` of the deployment's quota. */
  const holdFor = (t: Tenant, tokens: number) =>
    holdAiTokens(h.ctx, { id: t.deploymentId, organization_id: t.organizationId }, {
      model: 'gpt-4o-mini',
      modelClass: 'standard',
      promptTokens: 10,
      outputPerChoice: tokens - 10,
      choices: 1,
      expiresAt: new Date(h.clock.now().getTime() + 60 * 60 * 1000),
    });

  it('429 AI_QUOTA_EXCEEDED saying the tokens are held by calls in progress, without x-should-retry: false; 200 once they finish', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    // 5 tokens left free: not enough for the prompt and one output token.
    const inProgress = await holdFor(t, 995);
    expect(inProgress.tokensHeld).toBe(995);
    const refused = await chat(t);
    expect(refused.statusCode, refused.body).toBe(429);
    const body = refused.json<Record<string, unknown>>();
    expect(Object.keys(body).sort()).toEqual(['code', 'error', 'message', 'quota_exceeded', 'resets_at', 'upgrade_url']);
    expect(body).toMatchObject({ error: 'quota_exceeded', code: 'AI_QUOTA_EXCEEDED', quota_exceeded: true });
    expect(body.message).toMatch(/995 tokens are held by AI calls in progress .*; retry when they finish/);
    expect(body.message).not.toMatch(/used up/);
    expect(refused.headers['x-should-retry']).toBeUndefined();
    expect(refused.headers['retry-after']).toBeUndefined();

    expect(await releaseAiHold(h.deps.db, t.deploymentId, inProgress.id, h.clock.now())).toBe(true);
    expect((await chat(t)).statusCode).toBe(200);
  });

  it('a call the quota could not pay even with nothing held is still refused as used up, with x-should-retry: false', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const inProgress = await holdFor(t, 500);
    // A prompt of more than the trial's 1,000 tokens: no call finishing makes room for it.
    const refused = await chat(t, 'hello '.repeat(1_200));
    expect(refused.statusCode, refused.body).toBe(429);
    expect(refused.json<{ message: string }>().message).toMatch(/is used up and no purchased credits are left/);
    expect(refused.headers['x-should-retry']).toBe('false');
    // No hold left for the expiry worker of another test file sharing the database.
    expect(await releaseAiHold(h.deps.db, t.deploymentId, inProgress.id, h.clock.now())).toBe(true);
  });
});
