import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replyText, type StandIn, startOpenAiStandIn, vectorOf } from '../../../test/ai-stand-in/index.js';
import { createHarness, createTenant, type Harness, json, setAiLimit, type Tenant } from '../../../test/harness.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/**
 * The AI proxy (docs/ai-proxy.md) through the official `openai` SDK against an OpenAI-compatible stand-in at AI_BASE_URL:
 * exact accounting (non-stream, stream, embeddings), the allowance sent upstream, spill-over into
 * purchased credits, refusals before any upstream call, every fault releasing its hold, disconnects,
 * and concurrency. (trial: 1,000 AI tokens a period; gpt-4o is `advanced`: 3 credits per 1,000 tokens.)
 */
let standIn: StandIn;
let h: Harness;
let base: string;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  h = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini', 'gpt-4o', 'text-embedding-3-small'] });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const client = (t: Tenant) => new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0 });
const last = <T>(list: T[]): T => list[list.length - 1]!;

async function balance(t: Tenant) {
  const rows = await h.deps.db.query<{
    ai_tokens_used: number;
    ai_tokens_reserved: number;
    ai_credits_reserved: number;
    reserved: number;
    purchased_balance: number;
  }>(
    'SELECT ai_tokens_used, ai_tokens_reserved, ai_credits_reserved, reserved, purchased_balance FROM credit_balances WHERE deployment_id = $1',
    [t.deploymentId],
  );
  return rows[0]!;
}

async function usageRecords(t: Tenant) {
  return h.deps.db.query<{ tool_name: string; quantity: number; metadata: { input_tokens: number; output_tokens: number; estimated: boolean } }>(
    `SELECT tool_name, quantity, metadata FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens' ORDER BY "timestamp", id`,
    [t.deploymentId],
  );
}

async function expectNothingHeld(t: Tenant) {
  expect(await balance(t)).toMatchObject({ ai_tokens_reserved: 0, ai_credits_reserved: 0, reserved: 0 });
  const held = await h.deps.db.query("SELECT id FROM ai_reservations WHERE deployment_id = $1 AND status = 'held'", [t.deploymentId]);
  expect(held).toEqual([]);
}

/** Bounded wait for something asynchronous (a disconnect reaching the stand-in, a settle after it). */
async function until<T>(what: string, probe: () => Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function caught(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

describe('the OpenAI SDK pointed at creditgate', () => {
  it('a completion: the answer as the provider wrote it; quota used grows by exactly the reported tokens', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const answer = await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 50 });
    const reported = last(standIn.usages);
    expect(answer.choices[0]!.message.content).toBe(replyText(20));
    expect(answer.usage).toMatchObject({ prompt_tokens: reported.prompt_tokens, completion_tokens: reported.completion_tokens });
    expect((await balance(t)).ai_tokens_used).toBe(reported.prompt_tokens + reported.completion_tokens);
    const upstream = last(standIn.requests);
    expect(upstream.body.max_tokens).toBe(50);
    // The caller's key is ours to check; the provider sees only AI_API_KEY.
    expect(upstream.headers.authorization).toBe('Bearer sk-upstream');
    expect(await usageRecords(t)).toEqual([
      { tool_name: 'gpt-4o-mini', quantity: 0, metadata: expect.objectContaining({ input_tokens: reported.prompt_tokens, output_tokens: 20, estimated: false }) },
    ]);
    await expectNothingHeld(t);
  });

  it('without max_tokens the allowance is AI_MAX_OUTPUT_TOKENS, shrunk to what the deployment can pay for', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    const prompt = last(standIn.usages).prompt_tokens;
    // 1,000 tokens a period, none used: the allowance is what is left after the prompt (< 4,096).
    expect(last(standIn.requests).body.max_tokens).toBe(1000 - prompt);
    const rich = await createTenant(h, { tier: 'launch' });
    await client(rich).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    expect(last(standIn.requests).body.max_tokens).toBe(4096);
    // A chat model always gets max_tokens (what every backend reads), and max_completion_tokens too when sent.
    await client(rich).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: 7 });
    expect(last(standIn.requests).body).toMatchObject({ max_completion_tokens: 7, max_tokens: 7 });
  });

  it('a stream passes through chunk by chunk; include_usage is asked for upstream; used grows by the reported usage', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const stream = await client(t).chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Count' }],
      stream: true,
      max_tokens: 10,
    });
    const pieces: string[] = [];
    let sawUsage = false;
    for await (const chunk of stream) {
      if (chunk.usage) sawUsage = true;
      pieces.push(chunk.choices[0]?.delta.content ?? '');
    }
    expect(pieces.join('')).toBe(replyText(10));
    // The client did not ask for usage: the chunk the proxy asked for is not handed on.
    expect(sawUsage).toBe(false);
    const upstream = last(standIn.requests);
    expect(upstream.body).toMatchObject({ stream: true, stream_options: { include_usage: true }, max_tokens: 10 });
    const reported = last(standIn.usages);
    expect(reported.reported).toBe(true);
    expect((await balance(t)).ai_tokens_used).toBe(reported.prompt_tokens + 10);
    expect((await usageRecords(t))[0]!.metadata.estimated).toBe(false);
    await expectNothingHeld(t);
  });

  it('never holds a stream back: chunks reach the client while the provider is still answering', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'pause', afterChunks: 3 });
    const stream = await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'go' }], stream: true, max_tokens: 8 });
    const iterator = stream[Symbol.asyncIterator]();
    const pieces: string[] = [];
    // The provider stops after 3 pieces until resumed: were the proxy to buffer, this loop would never end.
    while (pieces.length < 3) {
      const next = await iterator.next();
      expect(next.done).toBe(false);
      const piece = next.value.choices[0]?.delta.content;
      if (piece) pieces.push(piece);
    }
    expect(pieces.join('')).toBe(replyText(3));
    expect(await usageRecords(t)).toEqual([]);
    standIn.resume();
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) pieces.push(next.value.choices[0]?.delta.content ?? '');
    expect(pieces.join('')).toBe(replyText(8));
    expect(await usageRecords(t)).toHaveLength(1);
  });

  it('the per-minute rate limit applies and is announced', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const { response } = await client(t)
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 })
      .withResponse();
    expect(response.headers.get('x-ratelimit-limit')).toBe('500');
    expect(Number(response.headers.get('x-ratelimit-remaining'))).toBeLessThan(500);
  });

  it('a stream whose client asked for usage gets the usage chunk', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const stream = await client(t).chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Count' }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 5,
    });
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    expect(usage).toMatchObject({ completion_tokens: 5, prompt_tokens: last(standIn.usages).prompt_tokens });
    expect((await balance(t)).ai_tokens_used).toBe(usage!.prompt_tokens + 5);
  });

  it('embeddings (base64, as the SDK asks by default, and float) are counted by the provider\'s prompt_tokens', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const result = await client(t).embeddings.create({ model: 'text-embedding-3-small', input: ['alpha beta', 'gamma'] });
    expect(result.data.map((d) => d.embedding)).toEqual([vectorOf(JSON.stringify('alpha beta'), 8), vectorOf(JSON.stringify('gamma'), 8)]);
    const tokens = last(standIn.usages).prompt_tokens;
    expect(result.usage.prompt_tokens).toBe(tokens);
    const float = await client(t).embeddings.create({ model: 'text-embedding-3-small', input: 'gamma', encoding_format: 'float' });
    expect(float.data[0]!.embedding).toEqual(vectorOf(JSON.stringify('gamma'), 8));
    expect((await balance(t)).ai_tokens_used).toBe(tokens + last(standIn.usages).prompt_tokens);
    await expectNothingHeld(t);
  });

  it('/billing/usage shows the period\'s AI tokens by model', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'a' }], max_tokens: 3 });
    const first = last(standIn.usages);
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'b' }], max_tokens: 2 });
    const second = last(standIn.usages);
    await client(t).embeddings.create({ model: 'text-embedding-3-small', input: 'c' });
    const embedded = last(standIn.usages);
    const res = await h.request({ method: 'GET', url: '/billing/usage', headers: { 'x-api-key': t.apiKey } });
    expect(res.statusCode, res.body).toBe(200);
    const usage = json<{ data: { ai_tokens: { used: number; by_model: unknown[] } } }>(res).data.ai_tokens;
    expect(usage.by_model).toEqual([
      { model: 'gpt-4o-mini', calls: 2, input_tokens: first.prompt_tokens + second.prompt_tokens, output_tokens: 5, credits: 0, estimated_calls: 0 },
      { model: 'text-embedding-3-small', calls: 1, input_tokens: embedded.prompt_tokens, output_tokens: 0, credits: 0, estimated_calls: 0 },
    ]);
    expect(usage.used).toBe(first.prompt_tokens + second.prompt_tokens + 5 + embedded.prompt_tokens);
  });

  it('lists the configured models in the OpenAI list shape', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const ids: string[] = [];
    for await (const model of client(t).models.list()) ids.push(model.id);
    expect(ids).toEqual(['gpt-4o-mini', 'gpt-4o', 'text-embedding-3-small']);
  });

  it('a deployment without an AI token limit holds nothing before the call and is still counted', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    expect(last(standIn.requests).body.max_tokens).toBe(4096);
    expect(await h.deps.db.query('SELECT id FROM ai_reservations WHERE deployment_id = $1', [t.deploymentId])).toEqual([]);
    const [record] = await usageRecords(t);
    expect(record!.metadata).toMatchObject({ input_tokens: last(standIn.usages).prompt_tokens, output_tokens: 20, estimated: false });
    expect((await balance(t)).ai_tokens_used).toBe(last(standIn.usages).prompt_tokens + 20);
  });

  it('deployment headers work as well as an API key', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const viaHeaders = new OpenAI({
      baseURL: `${base}/api/v1/ai`,
      apiKey: 'unused',
      maxRetries: 0,
      defaultHeaders: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    });
    await viaHeaders.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect((await balance(t)).ai_tokens_used).toBe(last(standIn.usages).prompt_tokens + 3);
  });
});

describe('past the quota', () => {
  it('tokens past the limit are paid from purchased credits at the model class\'s rate, with a ledger row', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 5 });
    await setAiLimit(h, t, 10);
    await client(t).chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 20 });
    const reported = last(standIn.usages);
    const over = reported.prompt_tokens + reported.completion_tokens - 10;
    const credits = Math.ceil((over * 3) / 1000);
    expect(await balance(t)).toMatchObject({ purchased_balance: 5 - credits, ai_tokens_used: over + 10 });
    expect((await usageRecords(t))[0]!.quantity).toBe(credits);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    await expectNothingHeld(t);
  });

  it('with neither tokens nor credits left: 429 AI_QUOTA_EXCEEDED, x-should-retry: false, before any upstream call', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await setAiLimit(h, t, 0);
    const before = standIn.requests.length;
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }));
    expect(err.status).toBe(429);
    expect(err.error).toBe('quota_exceeded');
    // A month from the reset: no Retry-After (docs/ai-proxy.md, Refusals that waiting cannot cure; credits/ai-refusals.test.ts).
    expect(err.headers?.get('x-should-retry')).toBe('false');
    expect(standIn.requests.length).toBe(before);
    const raw = await fetch(`${base}/api/v1/ai/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(await raw.json()).toMatchObject({ error: 'quota_exceeded', code: 'AI_QUOTA_EXCEEDED', quota_exceeded: true, upgrade_url: expect.any(String) });
    await expectNothingHeld(t);
  });

  it('50 concurrent completions against a quota that covers 10: never more tokens than the limit plus what credits paid', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 2 });
    const messages = [{ role: 'user' as const, content: 'x' }];
    // Each call holds its prompt + 80 output tokens; the stand-in answers 20 of them.
    const outcomes = await Promise.allSettled(
      Array.from({ length: 50 }, () => client(t).chat.completions.create({ model: 'gpt-4o-mini', messages, max_tokens: 80 })),
    );
    const ok = outcomes.filter((o) => o.status === 'fulfilled');
    for (const o of outcomes) {
      if (o.status === 'rejected') expect((o.reason as InstanceType<typeof OpenAI.APIError>).status).toBe(429);
    }
    const records = await usageRecords(t);
    expect(records).toHaveLength(ok.length);
    const tokens = records.reduce((n, r) => n + r.metadata.input_tokens + r.metadata.output_tokens, 0);
    const paid = records.reduce((n, r) => n + r.quantity, 0);
    expect(tokens).toBeLessThanOrEqual(1000 + paid * 1000);
    expect(paid).toBeLessThanOrEqual(2);
    expect(ok.length).toBeGreaterThanOrEqual(10);
    expect(ok.length).toBeLessThan(50);
    expect(await balance(t)).toMatchObject({ ai_tokens_used: tokens, purchased_balance: 2 - paid });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    await expectNothingHeld(t);
  });
});

describe('faults release the hold and charge nothing', () => {
  it('an upstream 500 → 502 AI_UPSTREAM_ERROR', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 3 });
    standIn.failNext({ kind: 'status', status: 500 });
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }));
    expect(err.status).toBe(502);
    expect(err.error).toBe('upstream_error');
    expect(await balance(t)).toMatchObject({ ai_tokens_used: 0, purchased_balance: 3 });
    expect(await usageRecords(t)).toEqual([]);
    await expectNothingHeld(t);
  });

  it('an upstream 429 is handed on with its Retry-After and body', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'status', status: 429, retryAfter: 7, body: { error: { message: 'slow down', type: 'requests', param: null, code: 'rate_limit_exceeded' } } });
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }));
    expect(err.status).toBe(429);
    expect(err.headers?.get('retry-after')).toBe('7');
    expect(err.code).toBe('rate_limit_exceeded');
    await expectNothingHeld(t);
  });

  it('an upstream 400 is handed on in its OpenAI error shape', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'status', status: 400, body: { error: { message: 'bad temperature', type: 'invalid_request_error', param: 'temperature', code: null } } });
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }));
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toBe('temperature');
    await expectNothingHeld(t);
  });

  it('a stream cut in the middle: the client sees an error, the streamed tokens are settled as an estimate', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'cut', afterChunks: 4 });
    const stream = await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'go' }], stream: true, max_tokens: 15 });
    const pieces: string[] = [];
    const err = await caught(
      (async () => {
        for await (const chunk of stream) pieces.push(chunk.choices[0]?.delta.content ?? '');
      })(),
    );
    expect(err.message).toMatch(/stream ended/);
    expect(pieces.join('')).toBe(replyText(4));
    const [record] = await usageRecords(t);
    expect(record!.metadata).toMatchObject({ estimated: true, output_tokens: expect.any(Number) });
    expect(record!.metadata.output_tokens).toBeGreaterThan(0);
    expect(record!.metadata.output_tokens).toBeLessThanOrEqual(15);
    await expectNothingHeld(t);
  });

  it('a stream without a usage chunk is settled as an estimate', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'no_usage' });
    const stream = await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'go' }], stream: true, max_tokens: 6 });
    for await (const _ of stream) {
      // read to the end
    }
    const [record] = await usageRecords(t);
    expect(record!.metadata).toMatchObject({ estimated: true });
    expect(record!.metadata.output_tokens).toBeGreaterThan(0);
    await expectNothingHeld(t);
  });

  it('an answer without usage is settled from our count of the prompt and the answer, marked estimated', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'no_usage_json' });
    const answer = await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    expect(answer.usage).toBeUndefined();
    const [record] = await usageRecords(t);
    // The prompt as our tokenizer counts it (the stand-in uses the same formula); the answer's 4 tokens as counted.
    expect(record!.metadata).toMatchObject({ estimated: true, input_tokens: last(standIn.usages).prompt_tokens, output_tokens: 4 });
    await expectNothingHeld(t);
  });

  it('a slow first byte within the timeout is waited for', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'slow_first_byte', ms: 150 });
    const answer = await client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(answer.usage?.completion_tokens).toBe(2);
  });

  it('a client that disconnects mid-stream stops the upstream call; what was streamed is settled, the rest freed', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.setOptions({ replyTokens: 400, chunkDelayMs: 5 });
    try {
      const controller = new AbortController();
      const stream = await client(t).chat.completions.create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'long' }], stream: true, max_tokens: 400 },
        { signal: controller.signal },
      );
      const abortedBefore = standIn.aborted;
      let chunks = 0;
      await caught(
        (async () => {
          for await (const _ of stream) {
            if (++chunks === 5) controller.abort();
          }
        })(),
      ).catch(() => undefined);
      await until('the upstream call to be aborted', async () => standIn.aborted > abortedBefore);
      const [record] = await until('the call to be settled', async () => {
        const rows = await usageRecords(t);
        return rows.length > 0 && rows;
      });
      expect(record!.metadata.estimated).toBe(true);
      expect(record!.metadata.output_tokens).toBeLessThan(400);
      await until('the hold to be given back', async () => (await balance(t)).ai_tokens_reserved === 0);
      await expectNothingHeld(t);
    } finally {
      standIn.setOptions({ replyTokens: 20, chunkDelayMs: 0 });
    }
  });
});

describe('a client that hangs up before any text', () => {
  it('is charged its prompt (the provider had it), estimated, and the rest of the hold is freed', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.setOptions({ chunkDelayMs: 200 });
    try {
      const controller = new AbortController();
      const stream = await client(t).chat.completions.create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'a prompt of some length to be charged' }], stream: true, max_tokens: 50 },
        { signal: controller.signal },
      );
      await (async () => {
        for await (const chunk of stream) {
          expect(chunk.choices[0]?.delta.content ?? '').toBe('');
          controller.abort();
        }
      })().catch(() => undefined);
      const [record] = await until('the call to be settled', async () => {
        const rows = await usageRecords(t);
        return rows.length > 0 && rows;
      });
      expect(record!.metadata).toMatchObject({ estimated: true, output_tokens: 0, input_tokens: last(standIn.usages).prompt_tokens });
      await until('the hold to be given back', async () => (await balance(t)).ai_tokens_reserved === 0);
    } finally {
      standIn.setOptions({ chunkDelayMs: 0 });
    }
  });
});

describe('refusals that never reach the provider', () => {
  it('bad input: 400 in the OpenAI error shape, nothing held, nothing sent upstream', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const before = standIn.requests.length;
    const c = client(t);
    const bad: unknown[] = [
      { model: 'gpt-4o-mini' },
      { model: 'gpt-4o-mini', messages: [] },
      { model: 'gpt-4o-mini', messages: 'hi' },
      { model: 42, messages: [{ role: 'user', content: 'hi' }] },
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 'ten' },
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 0 },
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: 'yes' },
      { model: 'o3', messages: [{ role: 'user', content: 'hi' }] },
    ];
    for (const body of bad) {
      const err = await caught(c.chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming));
      expect(err, JSON.stringify(body)).toBeInstanceOf(OpenAI.BadRequestError);
      expect(err.type).toBe('invalid_request_error');
    }
    const huge = await caught(c.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x'.repeat(1024 * 1024 + 1) }] }));
    expect(huge).toBeInstanceOf(OpenAI.BadRequestError);
    expect(huge.param).toBe('body');
    const embed = await caught(c.embeddings.create({ model: 'text-embedding-3-small', input: [] as string[] }));
    expect(embed.param).toBe('input');
    expect(standIn.requests.length).toBe(before);
    await expectNothingHeld(t);
  });

  it('the reference\'s fields the proxy does not read are passed through untouched', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await client(t).chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      temperature: 0.3,
      user: 'end-user-7',
      seed: 11,
      response_format: { type: 'text' },
    });
    expect(last(standIn.requests).body).toMatchObject({ temperature: 0.3, user: 'end-user-7', seed: 11, response_format: { type: 'text' } });
  });

  it('a tier without ai_enabled: 403 FEATURE_NOT_AVAILABLE', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const before = standIn.requests.length;
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }));
    expect(err.status).toBe(403);
    expect(err.error).toBe('feature_disabled');
    expect(standIn.requests.length).toBe(before);
  });
});

describe('/api/ai/generate (self-hosted path)', () => {
  it('answers the envelope with the text and the usage, through the same accounting', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const res = await h.request({
      method: 'POST',
      url: '/api/ai/generate',
      headers: { authorization: `Bearer ${t.apiKey}` },
      payload: { prompt: 'Write', max_tokens: 4, temperature: 0.5 },
    });
    expect(res.statusCode, res.body).toBe(200);
    const reported = last(standIn.usages);
    expect(json(res)).toMatchObject({
      success: true,
      data: { text: replyText(4), model: 'gpt-4o-mini', usage: { input_tokens: reported.prompt_tokens, output_tokens: 4 } },
    });
    expect(last(standIn.requests).body).toMatchObject({ model: 'gpt-4o-mini', max_tokens: 4, temperature: 0.5 });
    expect((await balance(t)).ai_tokens_used).toBe(reported.prompt_tokens + 4);
  });

  it('streams text/plain with stream:true', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const res = await fetch(`${base}/api/ai/generate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Write', max_tokens: 3, stream: true }),
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await res.text()).toBe(replyText(3));
    expect((await balance(t)).ai_tokens_used).toBe(last(standIn.usages).prompt_tokens + 3);
  });

  it('an upstream fault is the envelope\'s 502 AI_UPSTREAM_ERROR', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.failNext({ kind: 'status', status: 503 });
    const res = await h.request({ method: 'POST', url: '/api/ai/generate', headers: { authorization: `Bearer ${t.apiKey}` }, payload: { prompt: 'x', max_tokens: 3 } });
    expect(res.statusCode).toBe(502);
    expect(json(res)).toMatchObject({ success: false, error: { code: 'AI_UPSTREAM_ERROR' } });
    await expectNothingHeld(t);
  });
});

describe('an upstream that cannot answer', () => {
  it('one that never answers is cut at AI_TIMEOUT_MS (502); one that is not there is 502; none configured is 503', async () => {
    const hanging = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiTimeoutMs: 300 });
    const closed = await startOpenAiStandIn();
    const closedUrl = closed.url;
    await closed.close();
    const nowhere = await createHarness({ aiBaseUrl: closedUrl });
    const unconfigured = await createHarness();
    try {
      const t = await createTenant(hanging, { tier: 'trial' });
      standIn.failNext({ kind: 'hang' });
      const call = (app: Harness) =>
        app.request({
          method: 'POST',
          url: '/api/v1/ai/chat/completions',
          headers: { authorization: `Bearer ${t.apiKey}` },
          payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
        });
      const timedOut = await call(hanging);
      expect(timedOut.statusCode).toBe(502);
      expect(json(timedOut)).toMatchObject({ error: 'upstream_error', code: 'AI_UPSTREAM_ERROR' });
      const refused = await call(nowhere);
      expect(refused.statusCode).toBe(502);
      const off = await call(unconfigured);
      expect(off.statusCode).toBe(503);
      expect(json(off)).toMatchObject({ error: 'ai_not_configured', code: 'AI_NOT_CONFIGURED' });
      await expectNothingHeld(t);
      expect((await balance(t)).ai_tokens_used).toBe(0);
    } finally {
      await Promise.all([hanging.close(), nowhere.close(), unconfigured.close()]);
    }
  });
});
