import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replyText, type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { type ProxyApp, startProxyApp } from '../../../test/ai-stand-in/proxy-app.js';

/**
 * docs/ai-proxy.md, Bounds that cannot be talked around: model classes on the normalised name, the
 * output allowance and the field(s) it goes upstream in, streams stopped at it, reported usage that is
 * not a count, and /api/ai/generate's stream — each attack replayed through the official `openai` SDK
 * against the stand-in, with the AI settings a deployment gets when it sets none.
 */
const SPELLINGS = ['openai/o3', 'azure/o3', 'O3', 'o3:latest', 'chatgpt-4o-latest', 'ft:gpt-4o:acme::abc123'];
let standIn: StandIn;
let p: ProxyApp;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream', models: ['gpt-4o-mini', 'gpt-4o', 'o3', ' o3', 'o3 ', ' gpt-4o-mini', ...SPELLINGS] });
  p = await startProxyApp(standIn, 'sk-upstream');
});
afterAll(async () => {
  await p?.close();
  await standIn?.close();
});

const last = <T>(list: T[]): T => list[list.length - 1]!;
const hi = [{ role: 'user' as const, content: 'hi' }];

async function readAll(stream: AsyncIterable<OpenAI.ChatCompletionChunk>): Promise<{ text: string; finish: Array<string | null> }> {
  let text = '';
  const finish: Array<string | null> = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? '';
      if (choice.finish_reason) finish.push(choice.finish_reason);
    }
  }
  return { text, finish };
}

/** Bounded wait for something asynchronous (an abort reaching the stand-in). */
async function until(what: string, probe: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('model classes are decided on the normalised name', () => {
  it('every spelling of o3 (and an unknown model) is billed premium, a fine-tuned gpt-4o advanced; they were all standard', async () => {
    for (const model of SPELLINGS) {
      const t = await p.tenant(0, 100);
      await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 5 });
      const [record] = await p.records(t);
      const expected = model.startsWith('ft:gpt-4o') ? 'advanced' : 'premium';
      expect(record!.metadata.model_class, model).toBe(expected);
      const tokens = record!.metadata.input_tokens + record!.metadata.output_tokens;
      expect(record!.quantity, model).toBe(Math.ceil((tokens * (expected === 'premium' ? 10 : 3)) / 1000));
    }
  });
});

describe('whitespace around a model name does not make it another model', () => {
  // A provider that trims the name serves o3 for " o3": it was sent max_tokens, and a stream without
  // usage was charged its 20 relayed tokens instead of a reasoning model's full hold.
  it('" o3" and "o3 " are reasoning models: max_completion_tokens upstream, a stream without usage settles at its full hold', async () => {
    for (const model of [' o3', 'o3 ']) {
      const t = await p.tenant(100_000);
      standIn.failNext({ kind: 'no_usage' });
      await readAll(await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 50, stream: true }));
      expect(last(standIn.requests).body, JSON.stringify(model)).toMatchObject({ model, max_completion_tokens: 50 });
      expect(last(standIn.requests).body).not.toHaveProperty('max_tokens');
      const [record] = await p.records(t);
      expect(record!.metadata, JSON.stringify(model)).toMatchObject({ estimated: true, model_class: 'premium', output_tokens: 50 });
    }
  });

  it('" gpt-4o-mini" keeps its class and its image rule', async () => {
    const t = await p.tenant(100_000);
    const image = { type: 'image_url' as const, image_url: { url: 'https://example.com/cat.png', detail: 'low' as const } };
    const hold = await p.holdOf(t, () => p.client(t).chat.completions.create({ model: ' gpt-4o-mini', messages: [{ role: 'user', content: [image] }], max_tokens: 5 }));
    // gpt-4o-mini's low-detail image is 2,833 tokens (docs/ai-proxy.md, The prompt hold), not AI_IMAGE_MAX_TOKENS.
    expect(hold.prompt_tokens).toBeGreaterThanOrEqual(2833);
    expect(hold.prompt_tokens).toBeLessThan(3000);
    expect((await p.records(t))[0]!.metadata.model_class).toBe('standard');
  });
});

describe('the output allowance goes upstream in the fields the backend reads', () => {
  it('a chat model sent only max_completion_tokens gets max_tokens too (a backend reading max_tokens ran uncapped)', async () => {
    const t = await p.tenant(100_000);
    await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_completion_tokens: 7 });
    expect(last(standIn.requests).body).toMatchObject({ max_tokens: 7, max_completion_tokens: 7 });
    await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi });
    expect(last(standIn.requests).body).toMatchObject({ max_tokens: 4096 });
    expect(last(standIn.requests).body).not.toHaveProperty('max_completion_tokens');
  });

  it('a reasoning model gets it only as max_completion_tokens, whatever the caller used', async () => {
    const t = await p.tenant(100_000);
    await p.client(t).chat.completions.create({ model: 'openai/o3', messages: hi, max_tokens: 9 });
    expect(last(standIn.requests).body).toMatchObject({ max_completion_tokens: 9 });
    expect(last(standIn.requests).body).not.toHaveProperty('max_tokens');
  });

  it('n multiplies it in the hold', async () => {
    const t = await p.tenant(100_000);
    const hold = await p.holdOf(t, () => p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 11, n: 3 }));
    expect(hold.output_allowance).toBe(33);
  });
});

describe('a stream is stopped at the allowance', () => {
  it('a provider that ignores max_tokens and streams on: the client gets the allowance, then length; the call is aborted and settled estimated', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'endless' });
    const abortedBefore = standIn.aborted;
    const stream = await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 30, stream: true });
    const { text, finish } = await readAll(stream);
    expect(text).toBe(replyText(30));
    expect(finish).toEqual(['length']);
    await until('the upstream call to be aborted', () => standIn.aborted > abortedBefore);
    const [record] = await p.records(t);
    expect(record!.metadata).toMatchObject({ estimated: true, input_tokens: last(standIn.usages).prompt_tokens, output_tokens: 30 });
    expect(await p.holds(t)).toEqual([expect.objectContaining({ status: 'settled' })]);
  });

  it('the same through /api/ai/generate\'s text stream', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'endless' });
    const res = await fetch(`${p.base}/api/ai/generate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'go', max_tokens: 12, stream: true }),
    });
    expect(await res.text()).toBe(replyText(12));
    const [record] = await p.records(t);
    expect(record!.metadata).toMatchObject({ estimated: true, output_tokens: 12 });
  });

  it('a stream that ends without usage: a reasoning model settles at its full hold, another at prompt + relayed output', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'no_usage' });
    await readAll(await p.client(t).chat.completions.create({ model: 'o3', messages: hi, max_completion_tokens: 50, stream: true }));
    const prompt = last(standIn.usages).prompt_tokens;
    standIn.failNext({ kind: 'no_usage' });
    await readAll(await p.client(t).chat.completions.create({ model: 'gpt-4o', messages: hi, max_tokens: 50, stream: true }));
    // The stand-in answers 20 tokens: the reasoning model may have spent the rest of its 50 unseen.
    // (The fake clock stamps both records alike: order them by what they settled at.)
    const settled = (await p.records(t)).map((r) => r.metadata).sort((a, b) => b.output_tokens - a.output_tokens);
    expect(settled).toEqual([
      expect.objectContaining({ estimated: true, input_tokens: prompt, output_tokens: 50 }),
      expect.objectContaining({ estimated: true, input_tokens: prompt, output_tokens: 20 }),
    ]);
  });
});

describe('reported usage must be integers 0 ≤ n ≤ 2³¹', () => {
  it('-5, 1.5, "10", 2⁴⁰: settled at the hold, marked estimated, and logged', async () => {
    for (const bad of [-5, 1.5, '10', 2 ** 40]) {
      const t = await p.tenant(100_000);
      standIn.failNext({ kind: 'usage', usage: { prompt_tokens: bad, completion_tokens: 3, total_tokens: 3 } });
      const hold = await p.holdOf(t, () => p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 6 }));
      const [record] = await p.records(t);
      expect(record!.metadata, String(bad)).toMatchObject({ estimated: true, input_tokens: hold.prompt_tokens, output_tokens: 6 });
    }
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 4, completion_tokens: -1, total_tokens: 3 } });
    await readAll(await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 8, stream: true }));
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: 8 });
    const warnings = p.logs().split('\n').filter((line) => line.includes('reported usage that is not integer token counts'));
    expect(warnings).toHaveLength(5);
    expect(warnings.join('\n')).toContain('1099511627776');
  });
});

describe('/api/ai/generate with stream: true', () => {
  it('logs no error (it logged a TypeError on every call)', async () => {
    const t = await p.tenant(100_000);
    const before = p.logs();
    const res = await fetch(`${p.base}/api/ai/generate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Write', max_tokens: 3, stream: true }),
    });
    expect(await res.text()).toBe(replyText(3));
    // A second request on the same app: the first one's handler has finished by the time it is answered.
    const again = await p.app.inject({ method: 'POST', url: '/api/ai/generate', headers: { authorization: `Bearer ${t.apiKey}` }, payload: { prompt: 'x', max_tokens: 1 } });
    expect(again.statusCode).toBe(200);
    const added = p.logs().slice(before.length);
    expect(added).not.toContain("Cannot use 'in' operator");
    expect(added.split('\n').filter((line) => /"level":(50|60)/.test(line))).toEqual([]);
  });
});
