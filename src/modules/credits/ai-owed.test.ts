import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, serviceHeaders, type Tenant } from '../../../test/harness.js';
import { findLedgerMismatches } from './ledger.js';
import { findOwedMismatches } from './owed.js';

/**
 * docs/ai-proxy.md, "What a provider's over-report costs", replayed through the real proxy route with
 * the official `openai` SDK against a lying provider: one that reports 100,000 prompt tokens whatever
 * it was asked. Before, a deployment with a 300-token quota and no credits ended at 100,008 tokens
 * used and 0 credits charged, free to start the next call. Now what cannot be paid is owed, no AI
 * call starts while it is, MCP spending goes on, and the next credits added pay it first.
 * (trial tier; gpt-4o-mini is `standard`: 1 credit per 1,000 tokens, so one lie owes 100 credits.)
 */

interface Liar {
  url: string;
  /** Chat requests that reached the provider. */
  requests: number;
  /** Report 100,000 prompt tokens (true) or 5 (an honest provider). */
  lying: boolean;
  /** Hold answers until this many requests wait (or a bounded wait passes), so calls are in flight together. */
  gather: number;
  close(): Promise<void>;
}

async function startLyingProvider(): Promise<Liar> {
  let waiting: Array<() => void> = [];
  let timer: NodeJS.Timeout | undefined;
  const flush = () => {
    clearTimeout(timer);
    timer = undefined;
    const ready = waiting;
    waiting = [];
    for (const answer of ready) answer();
  };
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => {
      body += chunk.toString();
    });
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'not found', type: 'invalid_request_error', param: null, code: null } }));
        return;
      }
      liar.requests++;
      const model = (JSON.parse(body) as { model: string }).model;
      const usage = liar.lying ? { prompt_tokens: 100_000, completion_tokens: 8 } : { prompt_tokens: 5, completion_tokens: 3 };
      const answer = () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: `chatcmpl-${randomBytes(6).toString('hex')}`,
            object: 'chat.completion',
            created: 1_700_000_000,
            model,
            choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop', logprobs: null }],
            usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
          }),
        );
      };
      waiting.push(answer);
      if (waiting.length >= liar.gather) flush();
      // Calls the hold refused never arrive: answer whoever came after a bounded wait.
      else timer ??= setTimeout(flush, 3_000);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const liar: Liar = {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`,
    requests: 0,
    lying: true,
    gather: 1,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return liar;
}

let liar: Liar;
let h: Harness;
let base: string;

beforeAll(async () => {
  liar = await startLyingProvider();
  h = await createHarness({ aiBaseUrl: liar.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini'] });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await h?.close();
  await liar?.close();
});

const client = (t: Tenant) => new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0 });
const ask = (t: Tenant) => client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });

async function admin(method: 'PUT' | 'POST' | 'GET', url: string, payload?: Record<string, unknown>) {
  const res = await h.request({ method, url, headers: adminHeaders(h), ...(payload ? { payload } : {}) });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

/** A trial deployment with an AI quota of 300 tokens, `monthly` monthly credits and `purchased` purchased ones. */
async function tenant(monthly: number, purchased = 0): Promise<Tenant> {
  const t = await createTenant(h, { tier: 'trial' });
  await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/overrides`, { ai_tokens_limit: 300, monthly_credits: monthly });
  if (purchased > 0) await admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, { amount: purchased, reason: 'test' });
  return t;
}

async function balance(t: Tenant) {
  const rows = await h.deps.db.query<{ credits_owed: number; purchased_balance: number; monthly_used: number; reserved: number; ai_tokens_used: number }>(
    'SELECT credits_owed, purchased_balance, monthly_used, reserved, ai_tokens_used FROM credit_balances WHERE deployment_id = $1',
    [t.deploymentId],
  );
  return rows[0]!;
}

const owedPayments = (t: Tenant) =>
  h.deps.db.query<{ amount: number; monthly_delta: number; purchased_delta: number; usage_id: string }>(
    "SELECT amount, monthly_delta, purchased_delta, usage_id FROM credit_ledger WHERE deployment_id = $1 AND reason = 'owed' ORDER BY id",
    [t.deploymentId],
  );

const owingRecords = (t: Tenant) =>
  h.deps.db.query<{ id: string; credits_short: number }>(
    `SELECT id, credits_short FROM usage_records WHERE deployment_id = $1 AND credits_short > 0 ORDER BY "timestamp", id`,
    [t.deploymentId],
  );

/** ledger = balances = usage, and credits_owed = the records' shortfall less what was paid. */
async function expectBooksBalance(t: Tenant): Promise<void> {
  expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  expect(await findOwedMismatches(h.deps.db, t.organizationId)).toEqual([]);
}

/** One lying call: it goes through (the provider answered) and leaves `owed` credits owed. */
async function lieOnce(t: Tenant): Promise<void> {
  liar.lying = true;
  await ask(t);
}

async function refusedBody(t: Tenant): Promise<Record<string, unknown>> {
  const before = liar.requests;
  const res = await fetch(`${base}/api/v1/ai/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
  });
  expect(res.status).toBe(429);
  expect(liar.requests).toBe(before);
  return (await res.json()) as Record<string, unknown>;
}

describe('a provider that reports far more than was held', () => {
  it('20 concurrent lying calls on a 300-token quota with no credits: what is owed is bounded by the calls in flight, and no AI call starts after', async () => {
    const t = await tenant(0);
    const counted = async () => (await h.deps.metrics.aiCreditsOwed.get()).values.reduce((n, v) => n + v.value, 0);
    const metricBefore = await counted();
    liar.lying = true;
    liar.gather = 20;
    const reachedBefore = liar.requests;
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => ask(t)));
    liar.gather = 1;
    for (const o of outcomes) {
      if (o.status === 'rejected') expect((o.reason as InstanceType<typeof OpenAI.APIError>).status).toBe(429);
    }
    const reached = liar.requests - reachedBefore;
    expect(reached).toBeGreaterThan(1);
    const owed = (await balance(t)).credits_owed;
    const records = await owingRecords(t);
    // Each call that reached the provider owes at most its 100,008 tokens at 1 credit per 1,000, rounded up.
    expect(owed).toBeGreaterThan(0);
    expect(owed).toBe(records.reduce((n, r) => n + r.credits_short, 0));
    expect(owed).toBeLessThanOrEqual(reached * 101);
    expect(await counted()).toBe(metricBefore + owed);
    // Every later call: 429 AI_QUOTA_EXCEEDED naming what is owed, before the provider is asked.
    for (let i = 0; i < 3; i++) {
      const err = (await ask(t).then(
        () => null,
        (e: unknown) => e,
      )) as InstanceType<typeof OpenAI.APIError>;
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(err.status).toBe(429);
    }
    expect(await refusedBody(t)).toMatchObject({ error: 'quota_exceeded', code: 'AI_QUOTA_EXCEEDED', quota_exceeded: true, credits_owed: owed });
    expect(liar.requests).toBe(reachedBefore + reached);
    // Shown where the deployment and its operator look.
    const quota = await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    });
    expect(quota.statusCode, quota.body).toBe(200);
    expect(json(quota).credits_owed).toBe(owed);
    expect((await admin('GET', `/api/v1/admin/deployments/${t.deploymentId}`)).credits_owed).toBe(owed);
    expect(await balance(t)).toMatchObject({ purchased_balance: 0, reserved: 0, credits_owed: owed });
    await expectBooksBalance(t);
    // A new period gives 300 fresh quota tokens but no credits (monthly 0): still owed, still closed.
    h.clock.advance(32 * 24 * 60 * 60 * 1000);
    expect(await refusedBody(t)).toMatchObject({ code: 'AI_QUOTA_EXCEEDED', credits_owed: owed });
    const fresh = await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    });
    expect(json(fresh)).toMatchObject({ used: 0, remaining: 300, credits_owed: owed });
    expect(await refusedBody(t)).toMatchObject({ credits_owed: owed });
    await expectBooksBalance(t);
  });

  it('MCP spending goes on while AI is owed: a reservation of purchased credits is spent, and a refund pays what is owed first', async () => {
    const t = await tenant(0, 5);
    // An MCP call holds 1 of the 5 purchased credits; the lie takes the other 4 and owes the rest.
    const held = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { tool_name: 'x', reserve: true, invocation_id: 'mcp-1' },
    });
    expect(held.statusCode, held.body).toBe(200);
    expect(json(held).allowed).toBe(true);
    await lieOnce(t);
    expect(await balance(t)).toMatchObject({ purchased_balance: 1, reserved: 1, credits_owed: 96 });
    expect((await refusedBody(t)).credits_owed).toBe(96);
    const recorded = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/record-usage',
      headers: bearer(t.apiKey),
      payload: { tool_name: 'x', invocation_id: 'mcp-1' },
    });
    expect(recorded.statusCode, recorded.body).toBe(200);
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 1 });
    expect(await balance(t)).toMatchObject({ purchased_balance: 0, reserved: 0, credits_owed: 96 });
    // The platform refunds that MCP call: the credit comes back and pays what is owed first.
    const refund = await admin('POST', `/api/v1/admin/usage/${json(recorded).usage_id as string}/refund`, { reason: 'tool failed' });
    expect(refund.credits_remaining).toBe(0);
    expect(await balance(t)).toMatchObject({ purchased_balance: 0, credits_owed: 95 });
    const [record] = await owingRecords(t);
    expect(await owedPayments(t)).toEqual([{ amount: -1, monthly_delta: 0, purchased_delta: -1, usage_id: record!.id }]);
    await expectBooksBalance(t);
  });

  it('purchased credits a released hold frees pay what is owed before the next AI call starts', async () => {
    const t = await tenant(0, 10);
    // Five MCP reservations hold 5 of the 10 purchased credits; the lie takes the other 5 and owes 95.
    for (let i = 0; i < 5; i++) {
      const held = await h.request({
        method: 'POST',
        url: '/api/v1/mcp/stdio/check-entitlement',
        headers: bearer(t.apiKey),
        payload: { tool_name: 'x', reserve: true, invocation_id: `free-${i}` },
      });
      expect(json(held).allowed, held.body).toBe(true);
    }
    await lieOnce(t);
    expect(await balance(t)).toMatchObject({ purchased_balance: 5, reserved: 5, credits_owed: 95 });
    for (let i = 0; i < 5; i++) {
      const released = await h.request({ method: 'POST', url: `/api/v1/mcp/reservations/free-${i}/release`, headers: bearer(t.apiKey) });
      expect(released.statusCode, released.body).toBe(200);
    }
    // Nothing was added, so nothing paid yet; the next AI call's hold pays 5 from the freed credits and is still refused.
    expect(await balance(t)).toMatchObject({ purchased_balance: 5, reserved: 0, credits_owed: 95 });
    expect((await refusedBody(t)).credits_owed).toBe(90);
    expect(await balance(t)).toMatchObject({ purchased_balance: 0, reserved: 0, credits_owed: 90 });
    const [record] = await owingRecords(t);
    expect(await owedPayments(t)).toEqual([{ amount: -5, monthly_delta: 0, purchased_delta: -5, usage_id: record!.id }]);
    await expectBooksBalance(t);
  });

  it('an operator grant pays what is owed first, as deduct rows with reason `owed` naming the oldest unpaid usage record', async () => {
    const t = await tenant(0);
    await lieOnce(t);
    await lieOnce(t).catch(() => undefined);
    // The second call was refused: the first left a debt.
    const [first, ...rest] = await owingRecords(t);
    expect(rest).toEqual([]);
    expect(first!.credits_short).toBe(100);
    let view = await admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, { amount: 60, reason: 'goodwill' });
    expect(view.credits_owed).toBe(40);
    expect((view.balance as { purchased: number }).purchased).toBe(0);
    expect((await refusedBody(t)).credits_owed).toBe(40);
    view = await admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, { amount: 100, reason: 'pack' });
    expect(view.credits_owed).toBe(0);
    expect((view.balance as { purchased: number }).purchased).toBe(60);
    const kinds = await h.deps.db.query<{ kind: string; amount: number; reason: string | null }>(
      "SELECT kind, amount, reason FROM credit_ledger WHERE deployment_id = $1 AND kind IN ('grant', 'deduct') ORDER BY id",
      [t.deploymentId],
    );
    expect(kinds).toEqual([
      { kind: 'grant', amount: 60, reason: 'goodwill' },
      { kind: 'deduct', amount: -60, reason: 'owed' },
      { kind: 'grant', amount: 100, reason: 'pack' },
      { kind: 'deduct', amount: -40, reason: 'owed' },
    ]);
    expect((await owedPayments(t)).map((p) => p.usage_id)).toEqual([first!.id, first!.id]);
    await expectBooksBalance(t);
    // Paid: AI calls start again.
    liar.lying = false;
    await ask(t);
    expect((await balance(t)).credits_owed).toBe(0);
    await expectBooksBalance(t);
  });

  it('the other additions pay first too: an operator reset of monthly usage, a larger allocation', async () => {
    const t = await tenant(10);
    await lieOnce(t);
    for (let i = 0; i < 5; i++) {
      await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
    }
    expect(await balance(t)).toMatchObject({ monthly_used: 5, credits_owed: 100 });
    // The reset gives the 5 used credits back to the bucket; they pay what is owed.
    await admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/usage/reset`, { monthly_credits: true });
    expect(await balance(t)).toMatchObject({ monthly_used: 5, credits_owed: 95 });
    // 10 → 50 monthly credits: the 40 added pay.
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/overrides`, { monthly_credits: 50 });
    expect(await balance(t)).toMatchObject({ monthly_used: 45, credits_owed: 55 });
    const [record] = await owingRecords(t);
    expect(await owedPayments(t)).toEqual([
      { amount: -5, monthly_delta: -5, purchased_delta: 0, usage_id: record!.id },
      { amount: -40, monthly_delta: -40, purchased_delta: 0, usage_id: record!.id },
    ]);
    await expectBooksBalance(t);
  });

  it('the period reset pays what is owed from the new allocation, whichever path rolls the period (a deduction batch or a read)', async () => {
    const viaBatch = await tenant(100);
    const viaRead = await tenant(100);
    await lieOnce(viaBatch);
    await lieOnce(viaRead);
    expect((await balance(viaBatch)).credits_owed).toBe(100);
    expect((await balance(viaRead)).credits_owed).toBe(100);
    // Monthly credits are not what AI spends: MCP goes on with them while AI is owed.
    const spent = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(viaBatch.apiKey), payload: { tool_name: 'x' } });
    expect(json(spent)).toMatchObject({ success: true });
    await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(viaRead.apiKey), payload: { tool_name: 'x' } });
    h.clock.advance(32 * 24 * 60 * 60 * 1000);
    // The batch path: record-usage finds the row past its sync_before and rolls it in its batch; the
    // new allocation pays the 100 owed first, so this very call finds nothing left.
    const afterReset = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: viaBatch.deploymentId, tool_name: 'x' } });
    expect(afterReset.statusCode, afterReset.body).toBe(200);
    expect(json(afterReset)).toMatchObject({ success: false, error: 'insufficient_credits' });
    // The read path: GET /api/v1/ai/quota brings the row up to date in its own transaction.
    const quota = await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': viaRead.deploymentId, 'x-deployment-secret': viaRead.deploymentSecret },
    });
    expect(json(quota)).toMatchObject({ credits_owed: 0, used: 0 });
    const tail = (t: Tenant) =>
      h.deps.db.query<{ kind: string; amount: number; monthly_delta: number; purchased_delta: number; reason: string | null }>(
        `SELECT kind, amount, monthly_delta, purchased_delta, CASE WHEN kind = 'period_reset' THEN 'period' ELSE reason END AS reason
         FROM credit_ledger WHERE deployment_id = $1 ORDER BY id DESC LIMIT 2`,
        [t.deploymentId],
      );
    const expected = [
      { kind: 'deduct', amount: -100, monthly_delta: -100, purchased_delta: 0, reason: 'owed' },
      { kind: 'period_reset', amount: 100, monthly_delta: 1, purchased_delta: 0, reason: 'period' },
    ];
    expect(await tail(viaBatch)).toEqual(expected);
    expect(await tail(viaRead)).toEqual(expected);
    for (const t of [viaBatch, viaRead]) {
      expect(await balance(t)).toMatchObject({ credits_owed: 0, monthly_used: 100, ai_tokens_used: 0 });
      const [record] = await owingRecords(t);
      expect((await owedPayments(t)).map((p) => p.usage_id)).toEqual([record!.id]);
      await expectBooksBalance(t);
    }
  });
});
