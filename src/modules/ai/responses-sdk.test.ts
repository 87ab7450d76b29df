import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replyText, type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { createHarness, createTenant, type Harness, type Tenant } from '../../../test/harness.js';

/**
 * docs/ai-proxy.md, Responses API: the official `openai` SDK (`client.responses.create`, plain and
 * streamed, `client.models.retrieve`) and the Vercel AI SDK (`generateText`, `streamText` with the
 * default `openai(model)`, which calls the Responses API) pointed at creditgate in front of the stand-in.
 * Quota used grows by exactly the tokens the provider reported. (trial: 1,000 AI tokens a period.)
 */
let standIn: StandIn;
let h: Harness;
let base: string;
const MODELS = ['gpt-4o-mini', 'gpt-4o', 'ft:gpt-4o:acme::abc123', 'openai/o3'];

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream', models: MODELS });
  h = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiModels: MODELS });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const client = (t: Tenant) => new OpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey, maxRetries: 0 });
const last = <T>(list: T[]): T => list[list.length - 1]!;

async function used(t: Tenant): Promise<{ ai_tokens_used: number; ai_tokens_reserved: number }> {
  const rows = await h.deps.db.query<{ ai_tokens_used: number; ai_tokens_reserved: number }>(
    'SELECT ai_tokens_used, ai_tokens_reserved FROM credit_balances WHERE deployment_id = $1',
    [t.deploymentId],
  );
  return rows[0]!;
}

async function records(t: Tenant) {
  return h.deps.db.query<{ metadata: { input_tokens: number; output_tokens: number; estimated: boolean } }>(
    `SELECT metadata FROM usage_records WHERE deployment_id = $1 AND metric = 'ai_tokens' ORDER BY "timestamp", id`,
    [t.deploymentId],
  );
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

describe('the openai SDK: client.responses.create', () => {
  it('plain: the response as the provider wrote it; quota used grows by exactly the reported tokens', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const response = await client(t).responses.create({ model: 'gpt-4o-mini', instructions: 'Be brief', input: 'Say hello', max_output_tokens: 50 });
    const reported = last(standIn.usages);
    expect(response.output_text).toBe(replyText(20));
    expect(response.usage).toMatchObject({ input_tokens: reported.prompt_tokens, output_tokens: 20 });
    expect(await used(t)).toEqual({ ai_tokens_used: reported.prompt_tokens + 20, ai_tokens_reserved: 0 });
    const upstream = last(standIn.requests);
    expect(upstream.path).toBe('/v1/responses');
    expect(upstream.body).toMatchObject({ max_output_tokens: 50, store: false });
    expect(upstream.body).not.toHaveProperty('max_tokens');
    expect(await records(t)).toEqual([{ metadata: expect.objectContaining({ input_tokens: reported.prompt_tokens, output_tokens: 20, estimated: false }) }]);
  });

  it('stream: the typed events in order as they come; the quota is counted when the last event arrives', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const stream = await client(t).responses.create({ model: 'gpt-4o-mini', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Count' }] }], max_output_tokens: 10, stream: true });
    const types: string[] = [];
    let text = '';
    let usage: OpenAI.Responses.ResponseUsage | null | undefined;
    let usedAtEnd = -1;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.incomplete' || event.type === 'response.completed') {
        usage = event.response.usage;
        usedAtEnd = (await used(t)).ai_tokens_used;
      }
    }
    expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    expect(types.filter((type) => type === 'response.output_text.delta')).toHaveLength(10);
    // max_output_tokens 10 < the stand-in's 20 pieces: OpenAI's own incomplete ending, handed on.
    expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    expect(text).toBe(replyText(10));
    const reported = last(standIn.usages);
    expect(usage).toMatchObject({ input_tokens: reported.prompt_tokens, output_tokens: 10 });
    expect(usedAtEnd).toBe(reported.prompt_tokens + 10);
    expect(last(standIn.requests).body).toMatchObject({ stream: true, store: false, max_output_tokens: 10 });
  });

  it('a client that disconnects mid-stream aborts the upstream call; the call settles as estimated', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    standIn.setOptions({ replyTokens: 400, chunkDelayMs: 5 });
    try {
      const controller = new AbortController();
      const stream = await client(t).responses.create({ model: 'gpt-4o-mini', input: 'long', stream: true, max_output_tokens: 400 }, { signal: controller.signal });
      const abortedBefore = standIn.aborted;
      let deltas = 0;
      await (async () => {
        for await (const event of stream) {
          if (event.type === 'response.output_text.delta' && ++deltas === 5) controller.abort();
        }
      })().catch(() => undefined);
      await until('the upstream call to be aborted', async () => standIn.aborted > abortedBefore);
      const [record] = await until('the call to be settled', async () => {
        const rows = await records(t);
        return rows.length > 0 && rows;
      });
      expect(record!.metadata.estimated).toBe(true);
      expect(record!.metadata.output_tokens).toBeGreaterThanOrEqual(5);
      expect(record!.metadata.output_tokens).toBeLessThan(400);
      expect(await used(t)).toEqual({ ai_tokens_used: record!.metadata.input_tokens + record!.metadata.output_tokens, ai_tokens_reserved: 0 });
    } finally {
      standIn.setOptions({ replyTokens: 20, chunkDelayMs: 0 });
    }
  });
});

describe('the openai SDK: client.models.retrieve', () => {
  it('a listed model in the OpenAI model shape, ids with ":" and "/" included; an unlisted one is NotFoundError model_not_found', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    for (const id of MODELS) {
      const model = await client(t).models.retrieve(id);
      expect(model, id).toMatchObject({ id, object: 'model', created: 0, owned_by: 'creditgate' });
    }
    const err = await client(t)
      .models.retrieve('gpt-nope')
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toEqual({
      message: expect.stringContaining('gpt-nope'),
      type: 'invalid_request_error',
      param: null,
      code: 'model_not_found',
    });
    // Answered from configuration: nothing went upstream for it.
    expect(standIn.requests.some((r) => r.path.startsWith('/v1/models/'))).toBe(false);
  });
});

describe('the Vercel AI SDK (createOpenAI, default model: the Responses API)', () => {
  const provider = (t: Tenant) => createOpenAI({ baseURL: `${base}/api/v1/ai`, apiKey: t.apiKey });

  it('generateText: the text, the usage, and the quota counted exactly', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const result = await generateText({ model: provider(t)('gpt-4o-mini'), prompt: 'Say hello', maxOutputTokens: 30, maxRetries: 0 });
    const reported = last(standIn.usages);
    expect(last(standIn.requests).path).toBe('/v1/responses');
    expect(result.text).toBe(replyText(20));
    expect(result.usage).toMatchObject({ inputTokens: reported.prompt_tokens, outputTokens: 20 });
    expect((await used(t)).ai_tokens_used).toBe(reported.prompt_tokens + 20);
  });

  it('streamText: the text streamed, finished for its length, and the quota counted exactly', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const result = streamText({ model: provider(t)('gpt-4o-mini'), prompt: 'Count', maxOutputTokens: 7, maxRetries: 0 });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    expect(text).toBe(replyText(7));
    expect(await result.finishReason).toBe('length');
    const reported = last(standIn.usages);
    expect(await result.usage).toMatchObject({ inputTokens: reported.prompt_tokens, outputTokens: 7 });
    expect((await used(t)).ai_tokens_used).toBe(reported.prompt_tokens + 7);
  });
});
