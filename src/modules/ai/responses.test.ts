import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replyText, type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { type ProxyApp, startProxyApp } from '../../../test/ai-stand-in/proxy-app.js';
import type { Tenant } from '../../../test/harness.js';

/**
 * docs/ai-proxy.md, Responses API: the bounds of chat completions on `POST /api/v1/ai/responses`, each
 * attack replayed against the stand-in with the AI settings a deployment gets when it sets none:
 * stateful requests and hosted tools refused naming the field, `store` forced false, every prompt part
 * counted, a provider that streams past `max_output_tokens` stopped there, usage that cannot be right
 * settled at the hold, and a provider without the route answered 501 with nothing charged.
 */
let standIn: StandIn;
let p: ProxyApp;

beforeAll(async () => {
  standIn = await startOpenAiStandIn({ apiKey: 'sk-upstream', models: ['gpt-4o-mini', 'gpt-4o', 'o3'] });
  p = await startProxyApp(standIn, 'sk-upstream');
});
afterAll(async () => {
  await p?.close();
  await standIn?.close();
});

const last = <T>(list: T[]): T => list[list.length - 1]!;

async function post(t: Tenant, body: unknown): Promise<{ status: number; body: Record<string, unknown>; text: string }> {
  const res = await fetch(`${p.base}/api/v1/ai/responses`, { method: 'POST', headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, body: res.headers.get('content-type')?.includes('json') ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function balance(t: Tenant) {
  const rows = await p.h.deps.db.query<{ ai_tokens_used: number; ai_tokens_reserved: number; ai_credits_reserved: number; purchased_balance: number }>(
    'SELECT ai_tokens_used, ai_tokens_reserved, ai_credits_reserved, purchased_balance FROM credit_balances WHERE deployment_id = $1',
    [t.deploymentId],
  );
  return rows[0]!;
}

/** Events of an SSE body by type, with their data. */
function eventsOf(text: string): Array<{ type: string; data: Record<string, unknown> }> {
  return text
    .split('\n\n')
    .filter((block) => block.includes('data: '))
    .map((block) => {
      const data = JSON.parse(block.slice(block.indexOf('data: ') + 6)) as Record<string, unknown>;
      return { type: String(data.type), data };
    });
}

async function until(what: string, probe: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const hi = { model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 5 };

describe('only stateless requests, only the reference\'s fields', () => {
  it('hosted tools, stored state, background, unknown fields and stored files are 400 naming the field; nothing held or sent', async () => {
    const t = await p.tenant(100_000);
    const before = standIn.requests.length;
    const refused: Array<[Record<string, unknown>, string]> = [
      ...['web_search', 'web_search_preview', 'file_search', 'code_interpreter', 'image_generation', 'computer_use', 'computer_use_preview', 'mcp'].map(
        (type): [Record<string, unknown>, string] => [{ tools: [{ type: 'function', name: 'f', parameters: {} }, { type }] }, 'tools[1].type'],
      ),
      [{ tool_choice: { type: 'web_search_preview' } }, 'tool_choice'],
      [{ previous_response_id: 'resp_abc' }, 'previous_response_id'],
      [{ conversation: 'conv_abc' }, 'conversation'],
      [{ prompt: { id: 'pmpt_abc' } }, 'prompt'],
      [{ background: true }, 'background'],
      [{ best_of: 4 }, 'best_of'],
      [{ context_management: [{ type: 'compaction' }] }, 'context_management'],
      [{ service_tier: 'priority' }, 'service_tier'],
      [{ input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file-abc' }] }] }, 'input[0].content[0].file_id'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file-abc', detail: 'auto' }] }] }, 'input[0].content[0].file_id'],
      [{ input: [{ role: 'user', content: [{ type: 'input_file', file_url: 'https://example.com/a.pdf' }] }] }, 'input[0].content[0].file_url'],
      [{ input: [{ role: 'user', content: [{ type: 'input_file', filename: 'a.pdf', file_data: 'data:application/pdf;base64,AAAA' }] }] }, 'input[0].content[0]'],
      [{ input: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }] }, 'input[0].content[0]'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png', detail: 'original' }] }] }, 'input[0].content[0].detail'],
      [{ input: [{ type: 'item_reference', id: 'msg_abc' }] }, 'input[0]'],
      [{ input: [{ type: 'web_search_call', id: 'ws_abc', status: 'completed' }] }, 'input[0].type'],
    ];
    for (const [extra, param] of refused) {
      const res = await post(t, { ...hi, ...extra });
      expect(res.status, param).toBe(400);
      expect(res.body, param).toEqual({ error: 'invalid_request', code: 'INVALID_REQUEST', message: expect.stringContaining(param.split('[')[0]!), param });
    }
    const sdk = await p
      .client(t)
      .responses.create({ ...hi, tools: [{ type: 'web_search_preview' }] })
      .catch((e: unknown) => e);
    expect(sdk).toBeInstanceOf(OpenAI.BadRequestError);
    expect(standIn.requests.length).toBe(before);
    expect(await p.holds(t)).toEqual([]);
    expect(await p.records(t)).toEqual([]);
  });

  it('store: true is forwarded as store: false; function tools, background: false and reasoning go through', async () => {
    const t = await p.tenant(100_000);
    const tools = [{ type: 'function' as const, name: 'weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
    const res = await post(t, { ...hi, model: 'o3', store: true, background: false, tools, reasoning: { effort: 'low' } });
    expect(res.status, res.text).toBe(200);
    expect(last(standIn.requests).body).toMatchObject({ store: false, tools, reasoning: { effort: 'low' }, max_output_tokens: 5 });
    expect(last(standIn.requests).body).not.toHaveProperty('max_completion_tokens');
  });
});

describe('the prompt hold counts every part', () => {
  it('instructions, tool definitions, the text.format schema, tool calls and outputs: the hold is above what the stand-in counts by their text', async () => {
    const t = await p.tenant(100_000);
    const base = await p.holdOf(t, () => post(t, hi));
    const schema = { type: 'json_schema', name: 'answer', schema: { type: 'object', properties: Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`field_${i}`, { type: 'string', description: `the ${i}th field of the answer` }])) } };
    const tools = [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string', description: 'x'.repeat(400) } } } }];
    const calls = [
      { role: 'user', content: 'hi' },
      { type: 'function_call', call_id: 'call_1', name: 'lookup', arguments: JSON.stringify({ q: 'y'.repeat(300) }) },
      { type: 'function_call_output', call_id: 'call_1', output: 'z '.repeat(300) },
    ];
    const rich = await p.holdOf(t, () => post(t, { ...hi, input: calls, tools, text: { format: schema } }));
    // Each of the three parts adds at least a hundred tokens the stand-in's text count does not see.
    expect(rich.prompt_tokens - base.prompt_tokens).toBeGreaterThan(300);
  });

  it('images: inline at the family\'s tile rule for their size, by URL at its maximum, auto as high', async () => {
    const t = await p.tenant(100_000);
    const held = async (image_url: string, detail: 'low' | 'high' | 'auto') => {
      const hold = await p.holdOf(t, () => post(t, { model: 'gpt-4o', input: [{ role: 'user', content: [{ type: 'input_text', text: 'what is this?' }, { type: 'input_image', image_url, detail }] }], max_output_tokens: 1 }));
      // The stand-in counts the text alone: the difference is the image's hold.
      return hold.prompt_tokens - last(standIn.usages).prompt_tokens;
    };
    expect(await held(pngHeader(1024, 1024), 'auto')).toBe(765);
    expect(await held(pngHeader(1024, 1024), 'low')).toBe(85);
    expect(await held('https://example.com/cat.png', 'high')).toBe(1445);
  });
});

describe('the output allowance', () => {
  it('max_output_tokens is the smallest of the caller\'s and what the deployment can pay for, AI_MAX_OUTPUT_TOKENS by default', async () => {
    const rich = await p.tenant(100_000);
    await post(rich, { model: 'gpt-4o-mini', input: 'hi' });
    expect(last(standIn.requests).body.max_output_tokens).toBe(4096);
    const poor = await p.tenant(100);
    const hold = await p.holdOf(poor, () => post(poor, { model: 'gpt-4o-mini', input: 'hi', max_output_tokens: 5000 }));
    expect(last(standIn.requests).body.max_output_tokens).toBe(100 - hold.prompt_tokens);
  });

  it('a provider that ignores max_output_tokens and streams forever is stopped there: response.incomplete (max_output_tokens), upstream aborted, settled estimated', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'endless' });
    const abortedBefore = standIn.aborted;
    const res = await post(t, { ...hi, max_output_tokens: 30, stream: true });
    const events = eventsOf(res.text);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.data.delta).join('');
    expect(deltas).toBe(replyText(30));
    const end = last(events);
    expect(end.type).toBe('response.incomplete');
    const [record] = await p.records(t);
    expect(record!.metadata).toMatchObject({ estimated: true, input_tokens: last(standIn.usages).prompt_tokens, output_tokens: 30 });
    // The synthesised ending says what was charged.
    expect(end.data.response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { input_tokens: record!.metadata.input_tokens, output_tokens: 30 } });
    await until('the upstream call to be aborted', () => standIn.aborted > abortedBefore);
    expect(await p.holds(t)).toEqual([expect.objectContaining({ status: 'settled' })]);
    // A reasoning model stopped there settles at its full hold (its hidden reasoning cannot be counted).
    const r = await p.tenant(100_000);
    standIn.failNext({ kind: 'endless' });
    const hold = await p.holdOf(r, () => post(r, { model: 'o3', input: 'hi', max_output_tokens: 30, stream: true }));
    expect((await p.records(r))[0]!.metadata).toMatchObject({ estimated: true, input_tokens: hold.prompt_tokens, output_tokens: 30 });
  });

  it('a stream the provider breaks ends with an error event the SDK raises; what was streamed is settled estimated', async () => {
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'cut', afterChunks: 3 });
    const stream = await p.client(t).responses.create({ ...hi, max_output_tokens: 10, stream: true });
    let text = '';
    const err = await (async () => {
      for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(text).toBe(replyText(3));
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: true, output_tokens: 3 });
  });
});

describe('reported usage', () => {
  it('counts that cannot be right (negative, fractional, reasoning tokens above output tokens) settle at the hold', async () => {
    const usages = [
      { input_tokens: -5, output_tokens: 3, total_tokens: 3 },
      { input_tokens: 4, output_tokens: 1.5, total_tokens: 5 },
      { input_tokens: 4, output_tokens: 2, total_tokens: 6, output_tokens_details: { reasoning_tokens: 900 } },
    ];
    for (const usage of usages) {
      const t = await p.tenant(100_000);
      standIn.failNext({ kind: 'usage', usage });
      const hold = await p.holdOf(t, () => post(t, { ...hi, max_output_tokens: 6 }));
      expect((await p.records(t))[0]!.metadata, JSON.stringify(usage)).toMatchObject({ estimated: true, input_tokens: hold.prompt_tokens, output_tokens: 6 });
    }
    // Reasoning tokens within output tokens are a breakdown of them: counted once.
    const t = await p.tenant(100_000);
    standIn.failNext({ kind: 'usage', usage: { input_tokens: 4, output_tokens: 6, total_tokens: 10, output_tokens_details: { reasoning_tokens: 5 } } });
    await post(t, { ...hi, model: 'o3', max_output_tokens: 6, stream: true });
    expect((await p.records(t))[0]!.metadata).toMatchObject({ estimated: false, input_tokens: 4, output_tokens: 6 });
  });
});

describe('a provider without the Responses API', () => {
  it('404 or 405 for /responses is 501 AI_ROUTE_NOT_SUPPORTED, the hold released and the balance unchanged', async () => {
    const t = await p.tenant(100, 50);
    const before = await balance(t);
    for (const status of [404, 405]) {
      standIn.failNext({ kind: 'status', status, body: { detail: 'Not Found' } });
      const res = await post(t, hi);
      expect(res.status).toBe(501);
      expect(res.body).toEqual({ error: 'not_supported', code: 'AI_ROUTE_NOT_SUPPORTED', message: expect.stringContaining('Responses API') });
    }
    expect(await balance(t)).toEqual(before);
    expect((await p.holds(t)).map((h) => h.status)).toEqual(['released', 'released']);
    expect(await p.records(t)).toEqual([]);
  });

  it('a 404 about the model is the provider\'s answer, handed on', async () => {
    const t = await p.tenant(100_000);
    const body = { error: { message: 'The model `gpt-4o-mini` does not exist', type: 'invalid_request_error', param: null, code: 'model_not_found' } };
    standIn.failNext({ kind: 'status', status: 404, body });
    const res = await post(t, hi);
    expect(res).toMatchObject({ status: 404, body });
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
