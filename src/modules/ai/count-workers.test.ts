import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { createHarness, createTenant, type Harness, type Tenant } from '../../../test/harness.js';
import { COUNTS_PER_ORGANIZATION, largeCounts, SYNC_COUNT_BYTES } from './count-workers.js';
import { countChatPromptBound } from './prompt.js';

/**
 * A large prompt is counted off the event loop (docs/ai-proxy.md, Bounds: counting), through the
 * proxy as the `openai` SDK calls it: every other request is answered while it is counted, its count
 * is the event loop's, and past the queue of large counts a prompt is refused before anything is held.
 */
let standIn: StandIn;
let h: Harness;
let base: string;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  h = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini'] });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const client = (t: Tenant) => new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0 });
const model = 'gpt-4o-mini';

async function expectNothingSpent(t: Tenant) {
  const [balance] = await h.deps.db.query<{ ai_tokens_used: number; ai_tokens_reserved: number; ai_credits_reserved: number; reserved: number }>(
    'SELECT ai_tokens_used, ai_tokens_reserved, ai_credits_reserved, reserved FROM credit_balances WHERE deployment_id = $1',
    [t.deploymentId],
  );
  expect(balance).toMatchObject({ ai_tokens_used: 0, ai_tokens_reserved: 0, ai_credits_reserved: 0, reserved: 0 });
  expect(await h.deps.db.query('SELECT id FROM ai_reservations WHERE deployment_id = $1', [t.deploymentId])).toEqual([]);
  expect(await h.deps.db.query("SELECT id FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens'", [t.deploymentId])).toEqual([]);
}

async function until(what: string, done: () => boolean): Promise<void> {
  for (const deadline = Date.now() + 10_000; !done(); ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
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

describe('large prompts are counted off the event loop', () => {
  it('while a caller with no quota left sends a prompt of almost 1 MiB, other tenants are answered before its count ends', async () => {
    // The worst text measured for the tokenizer (CJK, some 2 µs a byte): on the event loop its count
    // would hold every request of the instance for seconds, before the hold is refused.
    const prompt = '東京は晴れ。明日は雨が降るでしょう。'.repeat(18_000);
    expect(Buffer.byteLength(prompt)).toBeGreaterThan(900_000);
    const attacker = await createTenant(h, { tier: 'trial' });
    const other = await createTenant(h, { tier: 'trial' });
    const upstreamCalls = standIn.requests.length;
    let answered = false;
    const large = caught(client(attacker).chat.completions.create({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 10 })).finally(() => {
      answered = true;
    });
    await until('the large prompt is being counted', () => largeCounts.load.running > 0);

    const health = await fetch(`${base}/healthz`);
    expect(health.status).toBe(200);
    const small = await client(other).chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 5 });
    expect(small.usage?.completion_tokens).toBe(5);
    // Both were answered while the large prompt was still being counted: the event loop was free.
    expect(answered).toBe(false);
    expect(largeCounts.load.running).toBe(1);

    // Counted, the prompt is far past the trial's 1,000 tokens: refused before any upstream call.
    const err = await large;
    expect(err.status).toBe(429);
    expect(err.error).toBe('quota_exceeded');
    expect(standIn.requests.length).toBe(upstreamCalls + 1);
    await expectNothingSpent(attacker);
  });

  it('holds what the event loop would count: the prompt of a call the provider reports no usage for is settled at it', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const body: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming = {
      model,
      messages: [
        { role: 'system', content: 'You are terse. '.repeat(300) },
        { role: 'user', content: [{ type: 'text', text: `${'Donaudampfschiffahrt naïve café 東京は晴れ。 '.repeat(200)}${'a\u0301'.repeat(700)}` }] },
      ],
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string', description: '='.repeat(500) } } } } }],
      max_tokens: 5,
    };
    const held = countChatPromptBound(h.deps.config, model, body as unknown as Record<string, unknown>);
    expect(Buffer.byteLength(JSON.stringify(body))).toBeGreaterThan(SYNC_COUNT_BYTES);
    standIn.failNext({ kind: 'no_usage_json' });
    await client(t).chat.completions.create(body);
    const [record] = await h.deps.db.query<{ metadata: { input_tokens: number; estimated: boolean } }>(
      "SELECT metadata FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens'",
      [t.deploymentId],
    );
    expect(record?.metadata).toMatchObject({ input_tokens: held, estimated: true });
  });

  it('past the queue of large counts a prompt is refused with 429 RATE_LIMITED and Retry-After: nothing held, nothing charged, nothing sent', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'launch' });
    // Every worker busy and every place in the queue taken.
    let open = () => {};
    const busy = new Promise<void>((resolve) => {
      open = resolve;
    });
    const taken = Array.from({ length: largeCounts.concurrency + largeCounts.queue }, () => largeCounts.run(() => busy));
    await until('the queue is full', () => largeCounts.load.waiting === largeCounts.queue);
    const upstreamCalls = standIn.requests.length;
    try {
      const prompt = 'The quick brown fox jumps over the lazy dog. '.repeat(200);
      expect(prompt.length).toBeGreaterThan(SYNC_COUNT_BYTES);
      const refused = await fetch(`${base}/api/v1/ai/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 5 }),
      });
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(await refused.json()).toMatchObject({ error: 'rate_limit_exceeded', code: 'RATE_LIMITED', message: expect.stringMatching(/large prompts being counted/) });
      expect(standIn.requests.length).toBe(upstreamCalls);
      await expectNothingSpent(t);
      // A small prompt waits for no worker: it is answered.
      const small = await client(other).chat.completions.create({ model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 5 });
      expect(small.usage?.completion_tokens).toBe(5);
    } finally {
      open();
      await Promise.all(taken);
    }
    // The queue drained, the same prompt goes through.
    await client(t).chat.completions.create({ model, messages: [{ role: 'user', content: 'The quick brown fox jumps over the lazy dog. '.repeat(200) }], max_tokens: 5 });
    expect(standIn.requests.length).toBe(upstreamCalls + 2);
  });
  it('one organization holds at most two places in the queue: its third large prompt is refused, another organization’s is queued', async () => {
    const greedy = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'launch' });
    let open = () => {};
    const busy = new Promise<void>((resolve) => {
      open = resolve;
    });
    // Every worker busy: large counts wait in the queue.
    const taken = Array.from({ length: largeCounts.concurrency }, () => largeCounts.run(() => busy));
    const prompt = 'The quick brown fox jumps over the lazy dog. '.repeat(200);
    const send = (t: Tenant) =>
      fetch(`${base}/api/v1/ai/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 5 }),
      });
    const queued: Promise<Response>[] = [];
    try {
      await until('the workers are busy', () => largeCounts.load.running === largeCounts.concurrency);
      for (let i = 0; i < COUNTS_PER_ORGANIZATION; i++) queued.push(send(greedy));
      await until('its prompts wait', () => largeCounts.load.waiting === COUNTS_PER_ORGANIZATION);
      const refused = await send(greedy);
      expect(refused.status).toBe(429);
      expect(await refused.json()).toMatchObject({ code: 'RATE_LIMITED', message: expect.stringMatching(/of this organization/) });
      queued.push(send(other));
      await until('the other organization’s prompt waits too', () => largeCounts.load.waiting === COUNTS_PER_ORGANIZATION + 1);
    } finally {
      open();
      await Promise.all(taken);
    }
    const answers = await Promise.all(queued);
    expect(answers.map((r) => r.status)).toEqual(Array(COUNTS_PER_ORGANIZATION + 1).fill(200));
  });
});
