import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StandIn } from '../../../test/ai-stand-in/index.js';
import { type ProxyApp, startProxyApp } from '../../../test/ai-stand-in/proxy-app.js';

/**
 * A custom tool call's input is output the proxy counts (docs/ai-proxy.md): capped at the allowance,
 * and charged as an estimate when the provider sends no usage. The provider here is a small server on
 * loopback that answers with custom tool calls only, never with usage, and ignores max_tokens (which the
 * OpenAI stand-in does not do).
 */
type Mode = 'endless' | 'whole' | 'cut';
let mode: Mode = 'endless';
let server: Server;
let p: ProxyApp;
const WORD = ' hello';
const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      if (mode === 'whole') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const call = { id: 't1', type: 'custom', custom: { name: 'run', input: WORD.repeat(5000) } };
        res.end(
          JSON.stringify({
            id: 'c1',
            object: 'chat.completion',
            created: 1,
            model: 'gpt-4o',
            choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, tool_calls: [call] } }],
          }),
        );
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 't1', type: 'custom', custom: { name: 'run', input: '' } }] }));
      const piece = chunk({ tool_calls: [{ index: 0, custom: { input: WORD.repeat(5) } }] });
      const pieces = mode === 'cut' ? 200 : 20_000;
      for (let i = 0; i < pieces && !res.destroyed; i++) {
        if (!res.write(piece)) await new Promise((r) => res.once('drain', r));
      }
      if (mode === 'cut') {
        // The connection closes once what was written has left: destroying it at once drops what is
        // still buffered (on Node 22 that was all of it), and the client would see nothing.
        res.write(piece, () => res.destroy());
        return;
      }
      if (!res.destroyed) res.end(`${chunk({}, 'tool_calls')}data: [DONE]\n\n`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  p = await startProxyApp({ url } as unknown as StandIn, 'sk-upstream');
});
afterAll(async () => {
  await p?.close();
  await new Promise((r) => server?.close(r));
});

const post = (t: { apiKey: string }, body: Record<string, unknown>) =>
  fetch(`${p.base}/api/v1/ai/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'custom', custom: { name: 'run' } }], ...body }),
  });
const hellos = (text: string) => (text.match(/hello/g) ?? []).length;

describe('custom tool calls', () => {
  it('a stream of custom tool input stops at the allowance and is charged, though the provider ignores max_tokens and sends no usage', async () => {
    mode = 'endless';
    const t = await p.tenant(1_000_000);
    const res = await post(t, { max_tokens: 10, stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(hellos(text)).toBeLessThanOrEqual(10);
    expect(text).toContain('"finish_reason":"length"');
    const [record] = await p.records(t);
    expect(record?.metadata).toMatchObject({ output_tokens: 10, estimated: true });
    expect((await p.holds(t)).map((hold) => hold.status)).toEqual(['settled']);
  });

  it('an answer whose output is a custom tool call, without usage, is estimated at that output', async () => {
    mode = 'whole';
    const t = await p.tenant(1_000_000);
    expect((await post(t, { max_tokens: 8000 })).status).toBe(200);
    const [record] = await p.records(t);
    expect(record?.metadata.estimated).toBe(true);
    expect(record?.metadata.output_tokens).toBeGreaterThanOrEqual(5000);
  });

  it('a stream cut after custom tool input is charged for what was relayed, not released', async () => {
    mode = 'cut';
    const t = await p.tenant(1_000_000);
    const text = await (await post(t, { max_tokens: 20_000, stream: true })).text();
    expect(hellos(text)).toBeGreaterThan(0);
    const [record] = await p.records(t);
    expect(record?.metadata).toMatchObject({ estimated: true });
    expect(record!.metadata.output_tokens).toBeGreaterThanOrEqual(hellos(text));
  });
});
