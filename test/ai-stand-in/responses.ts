import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { countChatPromptTokens, type Fault, piece, type RecordedUsage } from './index.js';

/**
 * The stand-in's `POST /v1/responses` (README.md): the OpenAI Responses API, a response object or its
 * typed SSE events in the order OpenAI sends them (`response.created`, `response.in_progress`,
 * `response.output_item.added`, `response.content_part.added`, `response.output_text.delta` …,
 * `response.output_text.done`, `response.content_part.done`, `response.output_item.done`, then
 * `response.completed`, or `response.incomplete` when `max_output_tokens` cut the answer), with the usage
 * in the last event. The chat faults apply (`cut`, `no_usage`, `no_usage_json`, `pause`, `endless`, `usage`).
 */

export interface ResponsesEnv {
  replyTokens: number;
  chunkDelayMs: number;
  usages: RecordedUsage[];
  paused: Array<() => void>;
}

/** The prompt the way the stand-in counts a chat's: instructions and each message, their text parts. */
function promptTokens(b: Record<string, unknown>): number {
  const messages: unknown[] = [];
  if (typeof b.instructions === 'string') messages.push({ role: 'developer', content: b.instructions });
  if (typeof b.input === 'string') messages.push({ role: 'user', content: b.input });
  else if (Array.isArray(b.input)) {
    for (const item of b.input as Array<Record<string, unknown>>) {
      if (item?.type !== undefined && item.type !== 'message') continue;
      const content = Array.isArray(item.content)
        ? (item.content as Array<Record<string, unknown>>).map((p) => (p?.type === 'input_text' || p?.type === 'output_text' ? { type: 'text', text: p.text } : p))
        : item.content;
      messages.push({ ...item, content });
    }
  }
  return countChatPromptTokens(messages);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function answerResponses(b: Record<string, unknown>, res: ServerResponse, fault: Fault | undefined, env: ResponsesEnv, sendJson: (res: ServerResponse, status: number, body: unknown) => void): void {
  const model = String(b.model);
  const cap = typeof b.max_output_tokens === 'number' ? b.max_output_tokens : Number.POSITIVE_INFINITY;
  const endless = fault?.kind === 'endless';
  const k = endless ? (b.stream === true ? 100_000 : (fault.pieces ?? env.replyTokens)) : Math.min(env.replyTokens, cap);
  const cutShort = k < env.replyTokens && !endless;
  const id = `resp_${randomBytes(8).toString('hex')}`;
  const itemId = `msg_${randomBytes(8).toString('hex')}`;
  const input = promptTokens(b);
  const usage = { input_tokens: input, input_tokens_details: { cached_tokens: 0 }, output_tokens: k, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: input + k };
  const sentUsage: unknown = fault?.kind === 'usage' ? fault.usage : usage;
  const pieces = Array.from({ length: k }, (_, i) => piece(i));
  const text = pieces.join('');
  const part = { type: 'output_text', text, annotations: [], logprobs: [] };
  const item = { id: itemId, type: 'message', status: 'completed', role: 'assistant', content: [part] };
  const base = {
    id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model,
    instructions: b.instructions ?? null,
    max_output_tokens: b.max_output_tokens ?? null,
    parallel_tool_calls: true,
    store: b.store ?? true,
    temperature: 1,
    tool_choice: 'auto',
    tools: [],
    top_p: 1,
    truncation: 'disabled',
    text: { format: { type: 'text' } },
    reasoning: { effort: null, summary: null },
    error: null,
    metadata: {},
  };
  const final = {
    ...base,
    status: cutShort ? 'incomplete' : 'completed',
    incomplete_details: cutShort ? { reason: 'max_output_tokens' } : null,
    output: [item],
  };
  if (b.stream !== true) {
    const reported = fault?.kind !== 'no_usage_json';
    env.usages.push({ id, model, prompt_tokens: input, completion_tokens: k, stream: false, reported });
    sendJson(res, 200, { ...final, ...(reported ? { usage: sentUsage } : { usage: null }) });
    return;
  }
  const record: RecordedUsage = { id, model, prompt_tokens: input, completion_tokens: k, stream: true, reported: fault?.kind !== 'no_usage' };
  env.usages.push(record);
  void (async () => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    let sequence = 0;
    const send = async (type: string, data: Record<string, unknown>): Promise<boolean> => {
      if (res.destroyed) return false;
      const event = `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`;
      await new Promise<void>((resolve) => res.write(event, () => resolve()));
      if (env.chunkDelayMs > 0) await sleep(env.chunkDelayMs);
      return !res.destroyed;
    };
    const started = { ...base, status: 'in_progress', incomplete_details: null, output: [], usage: null };
    const at = { item_id: itemId, output_index: 0, content_index: 0 };
    if (!(await send('response.created', { response: started }))) return;
    if (!(await send('response.in_progress', { response: started }))) return;
    if (!(await send('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', content: [] } }))) return;
    if (!(await send('response.content_part.added', { ...at, part: { ...part, text: '' } }))) return;
    let sent = 0;
    for (const delta of pieces) {
      if (fault?.kind === 'pause' && sent === fault.afterChunks) await new Promise<void>((go) => env.paused.push(go));
      if (fault?.kind === 'cut' && sent >= fault.afterChunks) {
        record.reported = false;
        res.socket?.destroy();
        return;
      }
      if (!(await send('response.output_text.delta', { ...at, delta, logprobs: [] }))) return;
      sent++;
    }
    if (!(await send('response.output_text.done', { ...at, text, logprobs: [] }))) return;
    if (!(await send('response.content_part.done', { ...at, part }))) return;
    if (!(await send('response.output_item.done', { output_index: 0, item }))) return;
    const usageSent = fault?.kind === 'no_usage' ? null : sentUsage;
    await send(cutShort ? 'response.incomplete' : 'response.completed', { response: { ...final, usage: usageSent } });
    if (!res.destroyed) res.end();
  })();
}
