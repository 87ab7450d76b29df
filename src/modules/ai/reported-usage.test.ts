import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { type ProxyApp, startProxyApp } from '../../../test/ai-stand-in/proxy-app.js';
import type { Tenant } from '../../../test/harness.js';

/**
 * docs/ai-proxy.md, Bounds: reported usage. A provider's usage object is billed at
 * max(input + output, total_tokens), a missing or null output count settles at the hold, and the
 * output is never below what the proxy counted in the text it relayed — each replayed through the
 * official `openai` SDK against the stand-in (its `usage` fault: the report of a broken or lying
 * provider; its answer is 20 tokens of text).
 */
let standIn: StandIn;
let p: ProxyApp;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream', models: ['gpt-4o-mini', 'o3'] });
  p = await startProxyApp(standIn, 'sk-upstream');
});
afterAll(async () => {
  await p?.close();
  await standIn?.close();
});

const hi = [{ role: 'user' as const, content: 'hi' }];

async function drain(stream: AsyncIterable<OpenAI.ChatCompletionChunk | OpenAI.Responses.ResponseStreamEvent>): Promise<void> {
  for await (const _ of stream) {
    // read to the end: the call is settled before [DONE] / the last event
  }
}

async function used(t: Tenant): Promise<number> {
  const [row] = await p.h.deps.db.query<{ ai_tokens_used: number }>('SELECT ai_tokens_used FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
  return row!.ai_tokens_used;
}

describe('total_tokens above input + output is billed, the excess as output', () => {
  // A gateway in front of a thinking model reports the thoughts in total_tokens and the reasoning
  // breakdown, not in completion_tokens: the settle counted 30 of the 5,030 tokens billed.
  const thinking = { prompt_tokens: 10, completion_tokens: 20, total_tokens: 5030, completion_tokens_details: { reasoning_tokens: 5000 } };

  it('a completion', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: thinking });
    await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 50 });
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: false, input_tokens: 10, output_tokens: 5020 });
    expect(await used(t)).toBe(5030);
  });

  it('paid from purchased credits: 5,030 premium tokens past a 0 quota cost 51 credits, not 1', async () => {
    const t = await p.tenant(0, 100);
    standIn.failNext({ kind: 'usage', usage: thinking });
    await p.client(t).chat.completions.create({ model: 'o3', messages: hi, max_completion_tokens: 6000 });
    expect((await p.records(t))[0]!.quantity).toBe(51);
  });

  it('a stream\'s usage chunk', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 10, completion_tokens: 20, total_tokens: 3030 } });
    await drain(await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 50, stream: true }));
    expect(await used(t)).toBe(3030);
  });

  it('the Responses API, plain and streamed', async () => {
    const t = await p.tenant(100_000);
    const report = { input_tokens: 10, output_tokens: 20, total_tokens: 4030, output_tokens_details: { reasoning_tokens: 0 } };
    standIn.failNext({ kind: 'usage', usage: report });
    await p.client(t).responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 50 });
    expect(await used(t)).toBe(4030);
    standIn.failNext({ kind: 'usage', usage: report });
    await drain(await p.client(t).responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 50, stream: true }));
    expect(await used(t)).toBe(8060);
  });
});

describe('a missing or null output count is not 0: the call settles at its hold, logged', () => {
  it('completion_tokens null or missing, on a completion and on a stream', async () => {
    for (const usage of [
      { prompt_tokens: 10, completion_tokens: null, total_tokens: 30 },
      { prompt_tokens: 10, total_tokens: 30 },
    ]) {
      const t = await p.tenant(100_000);
      standIn.failNext({ kind: 'usage', usage });
      const hold = await p.holdOf(t, () => p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 50 }));
      expect((await p.records(t))[0]!.metadata, JSON.stringify(usage)).toMatchObject({ estimated: true, input_tokens: hold.prompt_tokens, output_tokens: 50 });
    }
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 10, completion_tokens: null } });
    await drain(await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 40, stream: true }));
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: 40 });
    expect(p.logs()).toContain('"completion_tokens":null');
  });

  it('the Responses API without output_tokens', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { input_tokens: 10, total_tokens: 30 } });
    const hold = await p.holdOf(t, () => p.client(t).responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 50 }));
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, input_tokens: hold.prompt_tokens, output_tokens: 50 });
  });
});

describe('the output is never below what the proxy counted in the text it relayed', () => {
  it('usage of all zeros, or 3 output tokens, for 20 tokens of text: the 20 are charged', async () => {
    for (const usage of [
      { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
      { prompt_tokens: 9, completion_tokens: 3, total_tokens: 12 },
    ]) {
      const t = await p.tenant(100_000);
      standIn.failNext({ kind: 'usage', usage });
      await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 50 });
      expect((await p.records(t))[0]!.metadata, JSON.stringify(usage)).toMatchObject({ estimated: false, input_tokens: usage.prompt_tokens, output_tokens: 20 });
    }
  });

  it('the same on a stream and on the Responses API', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } });
    await drain(await p.client(t).chat.completions.create({ model: 'gpt-4o-mini', messages: hi, max_tokens: 50, stream: true }));
    standIn.failNext({ kind: 'usage', usage: { input_tokens: 0, output_tokens: 0, total_tokens: 0 } });
    await p.client(t).responses.create({ model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 50 });
    expect((await p.records(t)).map((r) => r.metadata.output_tokens)).toEqual([20, 20]);
  });
});
