import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replyText, type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { type ProxyApp, startProxyApp } from '../../../test/ai-stand-in/proxy-app.js';

/**
 * docs/ai-proxy.md, Bounds: the output allowance. A provider that sends its text as content parts
 * (Mistral's `[{type:'thinking', …}, {type:'text', text}]`: the stand-in's `contentParts`) is metered,
 * stopped and estimated like one that sends strings: reading only string content let such text pass the
 * allowance, escape a quota, go uncharged when the client left or the stream broke. Content the proxy
 * cannot read at all (the stand-in's `object` shape) counts as the bytes of its JSON.
 */
let standIn: StandIn;
let p: ProxyApp;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream', models: ['mistral-medium'], contentShape: 'parts' });
  p = await startProxyApp(standIn, 'sk-upstream');
});
afterAll(async () => {
  await p?.close();
  await standIn?.close();
});

const hi = [{ role: 'user' as const, content: 'hi' }];
const model = 'mistral-medium';

/** The text of content sent as parts: every string of each part but its type. */
function partsText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!content || typeof content !== 'object') return '';
  return Object.entries(content).map(([k, v]) => (k === 'type' ? '' : partsText(v))).join('');
}

async function readParts(stream: AsyncIterable<OpenAI.ChatCompletionChunk>, stopAt = Number.POSITIVE_INFINITY): Promise<{ text: string; parts: number; finish: string[] }> {
  let text = '';
  let parts = 0;
  const finish: string[] = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      if (Array.isArray(choice.delta.content)) parts++;
      text += partsText(choice.delta.content);
      if (choice.finish_reason) finish.push(choice.finish_reason);
    }
    if (parts >= stopAt) break;
  }
  return { text, parts, finish };
}

async function until(what: string, probe: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('streamed content parts are metered', () => {
  it('a provider that ignores max_tokens is stopped at the allowance, then length; settled at what was relayed', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'endless' });
    const { text, parts, finish } = await readParts(await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 30, stream: true }));
    expect({ text, parts, finish }).toEqual({ text: replyText(30), parts: 30, finish: ['length'] });
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: 30 });
  });

  it('a deployment with a 100-token quota and no credits gets no more than its quota, and owes nothing', async () => {
    const t = await p.tenant(100);
    standIn.failNext({ kind: 'endless' });
    await readParts(await p.client(t).chat.completions.create({ model, messages: hi, stream: true }));
    const [balance] = await p.h.deps.db.query<{ ai_tokens_used: number; credits_owed: number }>('SELECT ai_tokens_used, credits_owed FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
    expect(balance).toEqual({ ai_tokens_used: 100, credits_owed: 0 });
  });

  it('a client that leaves before the usage chunk is charged the output it received', async () => {
    const t = await p.tenant(100_000);
    standIn.setOptions({ replyTokens: 400, chunkDelayMs: 2 });
    try {
      const { parts } = await readParts(await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 400, stream: true }), 100);
      await until('the call to be settled', async () => (await p.records(t)).length > 0);
      const [record] = await p.records(t);
      expect(record!.metadata.estimated).toBe(true);
      expect(record!.metadata.output_tokens).toBeGreaterThanOrEqual(parts);
      expect(record!.metadata.output_tokens).toBeLessThan(400);
    } finally {
      standIn.setOptions({ replyTokens: 20, chunkDelayMs: 0 });
    }
  });

  it('a stream the provider breaks after part content is settled, not released', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'cut', afterChunks: 5 });
    await expect(readParts(await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 50, stream: true }))).rejects.toThrow();
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: 5 });
    expect(await p.holds(t)).toEqual([expect.objectContaining({ status: 'settled' })]);
  });
});

describe('an answer of content parts', () => {
  it('without usage is estimated at its text', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'no_usage_json' });
    const answer = await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 50 });
    expect(partsText(answer.choices[0]!.message.content)).toBe(replyText(20));
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: 20 });
  });

  it('with usage that reports no output is charged the text it carried', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 8, completion_tokens: 0, total_tokens: 8 } });
    await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 50 });
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: false, output_tokens: 20 });
  });
});

describe('content the proxy cannot read fails closed', () => {
  it('a stream of it that breaks is settled at the bytes of its JSON, not released; one that runs on is stopped', async () => {
    standIn.setOptions({ contentShape: 'object' });
    try {
      const t = await p.tenant(100_000);
      standIn.failNext({ kind: 'cut', afterChunks: 3 });
      await expect(readParts(await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 500, stream: true }))).rejects.toThrow();
      const bytes = [0, 1, 2].map((i) => Buffer.byteLength(JSON.stringify({ type: 'text', text: replyText(i + 1).slice(replyText(i).length) }))).reduce((a, b) => a + b);
      expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: bytes });
      expect(await p.holds(t)).toEqual([expect.objectContaining({ status: 'settled' })]);

      standIn.failNext({ kind: 'endless' });
      const stream = await p.client(t).chat.completions.create({ model, messages: hi, max_tokens: 200, stream: true });
      const finish: Array<string | null> = [];
      for await (const chunk of stream) for (const choice of chunk.choices) if (choice.finish_reason) finish.push(choice.finish_reason);
      expect(finish).toEqual(['length']);
      const outputs = (await p.records(t)).map((r) => r.metadata.output_tokens).filter((n) => n !== bytes);
      // Each piece's JSON is about 30 bytes: the stream stops within one piece of the 200 allowed.
      expect(outputs).toHaveLength(1);
      expect(outputs[0]).toBeGreaterThan(150);
      expect(outputs[0]).toBeLessThanOrEqual(200);
    } finally {
      standIn.setOptions({ contentShape: 'parts' });
    }
  });
});
