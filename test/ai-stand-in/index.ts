import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Tiktoken } from 'js-tiktoken/lite';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { answerResponses } from './responses.js';

/**
 * An OpenAI-compatible provider on loopback, speaking the real wire format (JSON answers, SSE streams
 * with `stream_options.include_usage`, base64 embeddings as the official SDK asks for them), so the AI
 * proxy is tested through AI_BASE_URL with the product's own client. Faults are queued per request.
 */

export interface StandInOptions {
  /** When set, requests without `Authorization: Bearer <apiKey>` get 401. */
  apiKey?: string;
  models?: string[];
  /** Output pieces per choice when max_tokens allows (each piece is one completion token). */
  replyTokens?: number;
  /** Delay between streamed chunks. */
  chunkDelayMs?: number;
  /**
   * The shape of chat content: `string` (OpenAI's); `parts`, an array of parts as Mistral sends it (the
   * first piece a `thinking` part, `{type:'thinking', thinking:[{type:'text', text}]}`, the rest
   * `{type:'text', text}`), one per streamed chunk or all in the answer's message; `object`, each piece
   * as a bare `{type:'text', text}` object, a shape no OpenAI-compatible client reads.
   */
  contentShape?: 'string' | 'parts' | 'object';
}

export type Fault =
  | { kind: 'status'; status: number; body?: unknown; retryAfter?: number }
  /** Stream: that many content chunks, then the socket is destroyed (no [DONE], no usage). */
  | { kind: 'cut'; afterChunks: number }
  /** Stream: ends normally but sends no usage chunk even when asked. */
  | { kind: 'no_usage' }
  /** Non-stream: the answer carries no usage object. */
  | { kind: 'no_usage_json' }
  | { kind: 'slow_first_byte'; ms: number }
  /** Never answers (until the client goes away or close()). */
  | { kind: 'hang' }
  /** Stream: that many content chunks, then nothing until resume() (proves chunks are not held back). */
  | { kind: 'pause'; afterChunks: number }
  /** Ignores max_tokens: a stream goes on (up to 100,000 pieces) until the client goes; an answer has `pieces`. */
  | { kind: 'endless'; pieces?: number }
  /** Reports this as its `usage` object instead of its own count (a lying or broken provider). */
  | { kind: 'usage'; usage: unknown };

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  // biome-ignore lint/suspicious/noExplicitAny: a recorded request body is whatever the client sent
  body: any;
}

export interface RecordedUsage {
  id: string;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  stream: boolean;
  /** The usage was sent to the client. */
  reported: boolean;
}

export interface StandIn {
  /** Base URL with /v1: what AI_BASE_URL or an OpenAI SDK's baseURL gets. */
  url: string;
  requests: RecordedRequest[];
  usages: RecordedUsage[];
  /** Requests whose client closed the connection before the answer was complete. */
  aborted: number;
  failNext(fault: Fault, times?: number): void;
  /** Lets paused streams go on. */
  resume(): void;
  setOptions(options: Partial<StandInOptions>): void;
  /** Resolves once no request is in progress (bounded: rejects after 10 s). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

let encoder: Tiktoken | undefined;
export function countTokens(text: string): number {
  encoder ??= new Tiktoken(o200k);
  return text === '' ? 0 : encoder.encode(text, [], []).length;
}

let words: string[] | undefined;
/**
 * The output pieces: words that are one o200k token each, alone and in a row (` one`, ` void`, …), so
 * the stand-in's count of its output is the proxy's tokenizer count of the same text.
 */
export function piece(i: number): string {
  if (!words) {
    encoder ??= new Tiktoken(o200k);
    const found: string[] = [];
    for (let id = 1000; found.length < 512; id++) {
      const word = encoder.decode([id]);
      if (/^ [a-z]{3,8}$/.test(word) && !found.includes(word) && encoder.encode(word, [], []).length === 1) found.push(word);
    }
    words = found;
  }
  return words[i % words.length]!;
}

/** The text of the first `k` pieces: what a choice of `k` completion tokens says. */
export function replyText(k: number): string {
  return Array.from({ length: k }, (_, i) => piece(i)).join('');
}

/** The OpenAI cookbook's count for chat prompts: 3 per message, its strings, 1 per name, 3 priming the reply. */
export function countChatPromptTokens(messages: unknown[]): number {
  let n = 3;
  for (const m of messages as Array<Record<string, unknown>>) {
    n += 3;
    if (typeof m.role === 'string') n += countTokens(m.role);
    if (typeof m.content === 'string') n += countTokens(m.content);
    else if (Array.isArray(m.content)) {
      for (const p of m.content as Array<Record<string, unknown>>) if (p?.type === 'text' && typeof p.text === 'string') n += countTokens(p.text);
    }
    if (typeof m.name === 'string') n += countTokens(m.name) + 1;
  }
  return n;
}

const DEFAULT_MODELS = ['gpt-4o-mini', 'gpt-4o', 'o3', 'text-embedding-3-small'];

function openAiError(res: ServerResponse, status: number, message: string, param: string | null = null, type = 'invalid_request_error'): void {
  sendJson(res, status, { error: { message, type, param, code: null } });
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function startOpenAiStandIn(initial: StandInOptions = {}): Promise<StandIn> {
  let options: Required<Omit<StandInOptions, 'apiKey'>> & { apiKey?: string } = {
    models: DEFAULT_MODELS,
    replyTokens: 20,
    chunkDelayMs: 0,
    contentShape: 'string',
    ...initial,
  };
  const faults: Fault[] = [];
  const paused: Array<() => void> = [];
  const sockets = new Set<Socket>();
  let inFlight = 0;
  const state: StandIn = {
    url: '',
    requests: [],
    usages: [],
    aborted: 0,
    resume() {
      for (const go of paused.splice(0)) go();
    },
    failNext(fault, times = 1) {
      for (let i = 0; i < times; i++) faults.push(fault);
    },
    setOptions(o) {
      options = { ...options, ...o };
    },
    async idle() {
      const deadline = Date.now() + 10_000;
      while (inFlight > 0) {
        if (Date.now() > deadline) throw new Error(`stand-in still has ${inFlight} requests in progress`);
        await sleep(5);
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };

  const server: Server = createServer((req, res) => {
    inFlight++;
    let finished = false;
    res.on('finish', () => {
      finished = true;
    });
    res.on('close', () => {
      if (!finished) state.aborted++;
      inFlight--;
    });
    void handle(req, res).catch(() => {
      if (!res.headersSent) openAiError(res, 500, 'stand-in failure', null, 'server_error');
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      // kept as text
    }
    const path = (req.url ?? '').split('?')[0]!;
    state.requests.push({ method: req.method ?? '', path, headers: req.headers, body });
    if (options.apiKey && req.headers.authorization !== `Bearer ${options.apiKey}`) {
      openAiError(res, 401, 'Incorrect API key provided', null, 'invalid_request_error');
      return;
    }
    if (req.method === 'GET' && path === '/v1/models') {
      sendJson(res, 200, { object: 'list', data: options.models.map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'stand-in' })) });
      return;
    }
    const isChat = req.method === 'POST' && path === '/v1/chat/completions';
    const isEmbed = req.method === 'POST' && path === '/v1/embeddings';
    const isResponses = req.method === 'POST' && path === '/v1/responses';
    if (!isChat && !isEmbed && !isResponses) {
      openAiError(res, 404, `Unknown path ${path}`);
      return;
    }
    const fault = faults.shift();
    if (fault?.kind === 'status') {
      const headers: Record<string, string> = fault.retryAfter !== undefined ? { 'retry-after': String(fault.retryAfter) } : {};
      sendJson(res, fault.status, fault.body ?? { error: { message: `stand-in fault ${fault.status}`, type: fault.status >= 500 ? 'server_error' : 'invalid_request_error', param: null, code: null } }, headers);
      return;
    }
    if (fault?.kind === 'hang') return; // the response stays open until the client or close() ends it
    if (fault?.kind === 'slow_first_byte') await sleep(fault.ms);
    if (res.destroyed) return;
    const b = (body ?? {}) as Record<string, unknown>;
    if (isChat) chat(b, res, fault);
    else if (isResponses) responses(b, res, fault);
    else embeddings(b, res);
  }

  function responses(b: Record<string, unknown>, res: ServerResponse, fault: Fault | undefined): void {
    if (typeof b.model !== 'string' || !options.models.includes(b.model)) {
      openAiError(res, 400, `The model ${String(b.model)} does not exist`, 'model');
      return;
    }
    answerResponses(b, res, fault, { replyTokens: options.replyTokens, chunkDelayMs: options.chunkDelayMs, usages: state.usages, paused }, sendJson);
  }

  function chat(b: Record<string, unknown>, res: ServerResponse, fault: Fault | undefined): void {
    const model = b.model;
    if (typeof model !== 'string' || !options.models.includes(model)) {
      openAiError(res, 400, `The model ${String(model)} does not exist`, 'model');
      return;
    }
    if (!Array.isArray(b.messages) || b.messages.length === 0) {
      openAiError(res, 400, 'messages must be a non-empty array', 'messages');
      return;
    }
    const cap = typeof b.max_completion_tokens === 'number' ? b.max_completion_tokens : typeof b.max_tokens === 'number' ? b.max_tokens : Number.POSITIVE_INFINITY;
    const endless = fault?.kind === 'endless';
    const k = endless ? (b.stream === true ? 100_000 : (fault.pieces ?? options.replyTokens)) : Math.min(options.replyTokens, cap);
    const n = typeof b.n === 'number' ? b.n : 1;
    const finish = k < options.replyTokens ? 'length' : 'stop';
    const id = `chatcmpl-${randomBytes(8).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const usage = { prompt_tokens: countChatPromptTokens(b.messages), completion_tokens: k * n, total_tokens: 0 };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    const pieces = Array.from({ length: k }, (_, i) => piece(i));
    // The usage this provider sends: its own count, or what a fault makes it claim.
    const sentUsage: unknown = fault?.kind === 'usage' ? fault.usage : usage;
    if (b.stream !== true) {
      const reported = fault?.kind !== 'no_usage_json';
      state.usages.push({ id, model, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, stream: false, reported });
      sendJson(res, 200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: Array.from({ length: n }, (_, index) => ({
          index,
          message: { role: 'assistant', content: contentOf(pieces), refusal: null },
          logprobs: null,
          finish_reason: finish,
        })),
        ...(reported ? { usage: sentUsage } : {}),
      });
      return;
    }
    const wantsUsage = (b.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
    const reported = wantsUsage && fault?.kind !== 'no_usage';
    const record: RecordedUsage = { id, model, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, stream: true, reported };
    state.usages.push(record);
    void stream(res, { id, created, model, n, pieces, finish, usage: sentUsage, wantsUsage, reported, cutAfter: fault?.kind === 'cut' ? fault.afterChunks : undefined, pauseAfter: fault?.kind === 'pause' ? fault.afterChunks : undefined, record });
  }

  async function stream(
    res: ServerResponse,
    s: {
      id: string;
      created: number;
      model: string;
      n: number;
      pieces: string[];
      finish: string;
      usage: unknown;
      wantsUsage: boolean;
      reported: boolean;
      cutAfter: number | undefined;
      pauseAfter: number | undefined;
      record: RecordedUsage;
    },
  ): Promise<void> {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const chunk = (choices: unknown[], usage: unknown = null) =>
      `data: ${JSON.stringify({ id: s.id, object: 'chat.completion.chunk', created: s.created, model: s.model, choices, ...(s.wantsUsage ? { usage } : {}) })}\n\n`;
    const send = async (text: string): Promise<boolean> => {
      if (res.destroyed) return false;
      // Each chunk is handed to the socket before the next (or a cut) happens, as a provider flushes its events.
      await new Promise<void>((resolve) => res.write(text, () => resolve()));
      if (options.chunkDelayMs > 0) await sleep(options.chunkDelayMs);
      return !res.destroyed;
    };
    if (!(await send(chunk(Array.from({ length: s.n }, (_, index) => ({ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null })))))) return;
    let sent = 0;
    for (const [i, piece] of s.pieces.entries()) {
      const content = options.contentShape === 'string' ? piece : options.contentShape === 'parts' ? [asPart(piece, i)] : { type: 'text', text: piece };
      for (let index = 0; index < s.n; index++) {
        if (s.pauseAfter !== undefined && sent === s.pauseAfter) await new Promise<void>((go) => paused.push(go));
        if (s.cutAfter !== undefined && sent >= s.cutAfter) {
          s.record.reported = false;
          res.socket?.destroy();
          return;
        }
        if (!(await send(chunk([{ index, delta: { content }, logprobs: null, finish_reason: null }])))) return;
        sent++;
      }
    }
    if (!(await send(chunk(Array.from({ length: s.n }, (_, index) => ({ index, delta: {}, logprobs: null, finish_reason: s.finish })))))) return;
    if (s.reported && !(await send(chunk([], s.usage)))) return;
    if (res.destroyed) return;
    res.end('data: [DONE]\n\n');
  }

  function contentOf(pieces: string[]): unknown {
    if (options.contentShape === 'parts') return pieces.map((text, i) => asPart(text, i));
    if (options.contentShape === 'object') return { type: 'text', text: pieces.join('') };
    return pieces.join('');
  }

  function embeddings(b: Record<string, unknown>, res: ServerResponse): void {
    const model = b.model;
    if (typeof model !== 'string' || !options.models.includes(model)) {
      openAiError(res, 400, `The model ${String(model)} does not exist`, 'model');
      return;
    }
    const inputs = embeddingInputs(b.input);
    if (!inputs) {
      openAiError(res, 400, 'input must be a string, strings, token ids or arrays of token ids', 'input');
      return;
    }
    const dims = typeof b.dimensions === 'number' ? b.dimensions : 8;
    const tokens = inputs.reduce((n, i) => n + (typeof i === 'string' ? countTokens(i) : i.length), 0);
    const data = inputs.map((input, index) => {
      const vector = vectorOf(JSON.stringify(input), dims);
      const embedding = b.encoding_format === 'base64' ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
      return { object: 'embedding', index, embedding };
    });
    state.usages.push({ id: `emb-${randomBytes(4).toString('hex')}`, model, prompt_tokens: tokens, completion_tokens: 0, stream: false, reported: true });
    sendJson(res, 200, { object: 'list', data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } });
  }

  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return state;
}

/** Piece `i` as a content part (StandInOptions.contentShape `parts`): the first one thinking, the rest text. */
function asPart(text: string, i: number): Record<string, unknown> {
  return i === 0 ? { type: 'thinking', thinking: [{ type: 'text', text }] } : { type: 'text', text };
}

function embeddingInputs(input: unknown): Array<string | number[]> | null {
  if (typeof input === 'string') return input ? [input] : null;
  if (!Array.isArray(input) || input.length === 0) return null;
  if (input.every((x) => typeof x === 'string')) return input as string[];
  if (input.every((x) => typeof x === 'number')) return [input as number[]];
  if (input.every((x) => Array.isArray(x) && x.every((y) => typeof y === 'number'))) return input as number[][];
  return null;
}

/** A deterministic unit-ish vector from the input, so tests can compare answers. */
export function vectorOf(seed: string, dims: number): number[] {
  const out: number[] = [];
  let block = createHash('sha256').update(seed).digest();
  for (let i = 0; i < dims; i++) {
    if (i > 0 && i % 16 === 0) block = createHash('sha256').update(block).digest();
    out.push((block.readUInt16BE((i % 16) * 2) / 65535) * 2 - 1);
  }
  return out.map((v) => Math.fround(v));
}
