import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { type ProxyApp, startProxyApp } from '../../../test/ai-stand-in/proxy-app.js';
import { createHarness, createTenant, type Tenant } from '../../../test/harness.js';

/**
 * docs/ai-proxy.md, Bounds that cannot be talked around: fields and the prompt hold, each attack
 * replayed through the official `openai` SDK against the stand-in, with the AI settings a deployment
 * gets when it sets none. (The output allowance, streams and reported usage: allowance.test.ts.)
 */
const MODELS = ['gpt-4o-mini', 'gpt-4o', 'o3', 'llava', 'gpt-4o-mini-search-preview'];
let standIn: StandIn;
let p: ProxyApp;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream', models: MODELS });
  p = await startProxyApp(standIn, 'sk-upstream');
});
afterAll(async () => {
  await p?.close();
  await standIn?.close();
});

const client = (t: Tenant) => p.client(t);
const tenant = (limit: number) => p.tenant(limit);
const records = (t: Tenant) => p.records(t);
const holds = (t: Tenant) => p.holds(t);
const holdOf = (t: Tenant, call: () => Promise<unknown>) => p.holdOf(t, call);
const last = <T>(list: T[]): T => list[list.length - 1]!;
type Chat = OpenAI.ChatCompletionCreateParamsNonStreaming;

async function expectUntouched(t: Tenant, upstreamBefore: number) {
  expect(standIn.requests.length).toBe(upstreamBefore);
  expect(await holds(t)).toEqual([]);
  expect(await records(t)).toEqual([]);
}

async function caught(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OpenAI.APIError);
  return err as InstanceType<typeof OpenAI.APIError>;
}

async function post(t: Tenant, path: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${p.base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const hi = [{ role: 'user' as const, content: 'hi' }];

describe('fields: only the reference\'s, plus AI_EXTRA_FIELDS', () => {
  it('vendor cost multipliers are 400 INVALID_REQUEST naming the field, before anything is held or sent', async () => {
    const t = await tenant(100_000);
    const before = standIn.requests.length;
    for (const [field, value] of Object.entries({ best_of: 5, min_tokens: 4000, ignore_eos: true, max_new_tokens: 100_000, options: { num_predict: -1 }, use_beam_search: true })) {
      const res = await post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o-mini', messages: hi, max_tokens: 5, [field]: value });
      expect(res.status, field).toBe(400);
      expect(res.body).toEqual({ error: 'invalid_request', code: 'INVALID_REQUEST', message: expect.stringContaining(field), param: field });
    }
    const sdk = await caught(client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, best_of: 3 } as Chat));
    expect(sdk).toBeInstanceOf(OpenAI.BadRequestError);
    const embed = await post(t, '/api/v1/ai/embeddings', { model: 'text-embedding-3-small', input: 'x', truncate_prompt_tokens: 5 });
    expect(embed).toMatchObject({ status: 400, body: { code: 'INVALID_REQUEST', param: 'truncate_prompt_tokens' } });
    const audioOut = await post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o-mini', messages: hi, modalities: ['text', 'audio'] });
    expect(audioOut).toMatchObject({ status: 400, body: { param: 'modalities' } });
    await expectUntouched(t, before);
  });

  it('a model that searches on every call is 400 without AI_MODELS, whatever its spelling; web_search_options in AI_EXTRA_FIELDS lets it through', async () => {
    const t = await tenant(100_000);
    const before = standIn.requests.length;
    for (const model of ['gpt-4o-mini-search-preview', 'openai/GPT-4o-search-preview-2025-03-11', 'gpt-5-search-api', 'openai/gpt-4o-mini:online']) {
      const res = await post(t, '/api/v1/ai/chat/completions', { model, messages: hi, max_tokens: 5 });
      expect(res.status, model).toBe(400);
      expect(res.body, model).toMatchObject({ error: { code: 'INVALID_REQUEST', param: 'model', message: expect.stringContaining('searches the web') } });
    }
    const responses = await post(t, '/api/v1/ai/responses', { model: 'gpt-4o-mini-search-preview', input: 'latest news?', max_output_tokens: 16 });
    expect(responses).toMatchObject({ status: 400, body: { error: { param: 'model' } } });
    await expectUntouched(t, before);
    // Names that only look alike go through.
    expect((await post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o-mini', messages: hi, max_tokens: 2 })).status).toBe(200);
    const extra = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiExtraFields: ['web_search_options'] });
    try {
      const other = await createTenant(extra, { tier: 'trial' });
      const res = await extra.request({
        method: 'POST',
        url: '/api/v1/ai/chat/completions',
        headers: { authorization: `Bearer ${other.apiKey}` },
        payload: { model: 'gpt-4o-mini-search-preview', messages: hi, max_tokens: 2 },
      });
      expect(res.statusCode, res.body).toBe(200);
    } finally {
      await extra.close();
    }
  });

  it('a field an operator lists in AI_EXTRA_FIELDS is forwarded', async () => {
    const extra = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiExtraFields: ['best_of'] });
    try {
      const t = await createTenant(extra, { tier: 'trial' });
      const res = await extra.request({ method: 'POST', url: '/api/v1/ai/chat/completions', headers: { authorization: `Bearer ${t.apiKey}` }, payload: { model: 'gpt-4o-mini', messages: hi, max_tokens: 2, best_of: 2 } });
      expect(res.statusCode, res.body).toBe(200);
      expect(last(standIn.requests).body).toMatchObject({ best_of: 2, max_tokens: 2 });
    } finally {
      await extra.close();
    }
  });
});

/** A PNG's first bytes: enough for its size to be read. */
function pngHeader(width: number, height: number): string {
  const b = Buffer.alloc(33);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(b, 0);
  b.writeUInt32BE(13, 8);
  b.write('IHDR', 12, 'latin1');
  b.writeUInt32BE(width, 16);
  b.writeUInt32BE(height, 20);
  return `data:image/png;base64,${b.toString('base64')}`;
}

describe('the prompt hold is an upper bound of every part', () => {
  const text = { type: 'text' as const, text: 'what is this?' };

  it('audio and inline files are 400 naming the part (they were held as 7–8 tokens and forwarded)', async () => {
    const t = await tenant(100_000);
    const before = standIn.requests.length;
    const data = Buffer.alloc(600 * 1024, 7).toString('base64');
    const audio = await post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: [text, { type: 'input_audio', input_audio: { data, format: 'wav' } }] }] });
    expect(audio).toMatchObject({ status: 400, body: { error: 'invalid_request', code: 'INVALID_REQUEST', param: 'messages[0].content[1]' } });
    const file = await post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: [{ type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${data}` } }] }] });
    expect(file).toMatchObject({ status: 400, body: { param: 'messages[0].content[0]' } });
    const stored = await post(t, '/api/v1/ai/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-abc' } }] }] });
    expect(stored).toMatchObject({ status: 400, body: { param: 'messages[0].content[0].file.file_id' } });
    await expectUntouched(t, before);
  });

  it('a 250 KB prediction is counted: a deployment that cannot pay for it gets 429 before any upstream call', async () => {
    const t = await tenant(1000);
    const before = standIn.requests.length;
    const prediction = { type: 'content' as const, content: 'let value = compute(input);\n'.repeat(9000) };
    const err = await caught(client(t).chat.completions.create({ model: 'gpt-4o', messages: hi, max_tokens: 5, prediction }));
    expect(err.status).toBe(429);
    expect(err.error).toBe('quota_exceeded');
    await expectUntouched(t, before);
  });

  it('images: inline at the family\'s tile rule for their size, by URL at its maximum, unknown families at AI_IMAGE_MAX_TOKENS', async () => {
    const t = await tenant(100_000);
    const image = (url: string, detail?: 'low' | 'high' | 'auto') => ({ role: 'user' as const, content: [text, { type: 'image_url' as const, image_url: { url, ...(detail ? { detail } : {}) } }] });
    const held = async (model: string, message: ReturnType<typeof image>) => {
      const hold = await holdOf(t, () => client(t).chat.completions.create({ model, messages: [message], max_tokens: 1 }));
      // The stand-in counts the text alone: the difference is the image's hold.
      return hold.prompt_tokens - last(standIn.usages).prompt_tokens;
    };
    expect(await held('gpt-4o', image(pngHeader(4000, 1500), 'auto'))).toBe(85 + 8 * 170);
    expect(await held('gpt-4o', image(pngHeader(1024, 1024)))).toBe(765);
    expect(await held('gpt-4o', image(pngHeader(1024, 1024), 'low'))).toBe(85);
    expect(await held('gpt-4o', image('https://example.com/cat.png', 'high'))).toBe(1445);
    expect(await held('gpt-4o-mini', image(pngHeader(64, 64), 'low'))).toBe(2833);
    expect(await held('llava', image('https://example.com/cat.png', 'low'))).toBe(16_384);
    // Where those tokens cannot be paid, the call never starts.
    const poor = await tenant(2000);
    const before = standIn.requests.length;
    const err = await caught(client(poor).chat.completions.create({ model: 'gpt-4o-mini', messages: [image('https://example.com/cat.png')], max_tokens: 1 }));
    expect(err.status).toBe(429);
    await expectUntouched(poor, before);
  });

  it('with AI_BYTES_PER_TOKEN_BOUND audio is held at bytes ÷ bound, and refused with 429 when that cannot be paid', async () => {
    const bounded = await createHarness({ aiBaseUrl: standIn.url, aiApiKey: 'sk-upstream', aiBytesPerTokenBound: 4 });
    try {
      const t = await createTenant(bounded, { tier: 'trial' });
      const call = (bytes: number) =>
        bounded.request({
          method: 'POST',
          url: '/api/v1/ai/chat/completions',
          headers: { authorization: `Bearer ${t.apiKey}` },
          payload: { model: 'gpt-4o', max_tokens: 1, messages: [{ role: 'user', content: [text, { type: 'input_audio', input_audio: { data: Buffer.alloc(bytes, 1).toString('base64'), format: 'wav' } }] }] },
        });
      const hold = await holdOf(t, async () => expect((await call(401)).statusCode).toBe(200));
      expect(hold.prompt_tokens).toBe(last(standIn.usages).prompt_tokens + 101);
      const before = standIn.requests.length;
      const big = await call(600 * 1024);
      expect(big.statusCode).toBe(429);
      expect(standIn.requests.length).toBe(before);
    } finally {
      await bounded.close();
    }
  });
});
