import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import type { ModelClass } from '../../config.js';
import type { Ctx } from '../../context.js';
import { AppError, ValidationError } from '../../errors.js';
import { type AiHold, type AiUsageResult, holdAiTokens, releaseAiHold, settleAiTokens } from '../credits/ai-usage.js';
import { type DeploymentTerms, effectiveTerms } from '../credits/terms.js';
import { assertAiEnabled, modelClassOf } from '../quotas/ai-tokens.js';
import { type ProviderUsage, SseSplitter, textOfChoices, usageOf } from './sse.js';
import { countChatPrompt, countEmbeddingInput, countText, loadEncodingFor } from './tokens.js';
import { type AiUpstream, readBody } from './upstream.js';

/**
 * SPEC §6 AI proxy (docs/ai-proxy.md): gate, count, hold, call the upstream, settle to its usage or
 * release. Every way out of a call either settles its hold or gives it back: the `finally` blocks below
 * are where that is guaranteed, and the `ai-hold-expiry` worker covers a process that died mid-call.
 */

/** The deployment an AI call spends for: the deployment headers' or the API key's primary deployment. */
export interface AiDeployment extends DeploymentTerms {
  id: string;
  organization_id: string;
  status: string;
  flag_overrides: unknown;
}

/** A hold that outlives its call this long is given back by the worker (streams end well before). */
export const AI_HOLD_TTL_MS = 60 * 60 * 1000;

/** Non-streamed answers are read whole to find their usage; an embedding of 2,048 inputs fits in this. */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;
/** An upstream error body is handed on up to this size. */
const MAX_ERROR_BYTES = 64 * 1024;

export function notConfigured(): AppError {
  return new AppError('AI_NOT_CONFIGURED', 'The AI proxy is not configured on this server (AI_BASE_URL is not set)');
}

export function upstreamError(detail: string): AppError {
  return new AppError('AI_UPSTREAM_ERROR', `The AI provider failed: ${detail}`);
}

function badRequest(field: string, message: string): ValidationError {
  return ValidationError.forField(field, message);
}

/** 400 for a model outside AI_MODELS when that list is set (SPEC §6; the "configured list"). */
export function checkModel(ctx: Ctx, model: string): void {
  if (ctx.config.aiModels.length > 0 && !ctx.config.aiModels.includes(model)) {
    throw badRequest('model', `is not one of the models this server offers (${ctx.config.aiModels.join(', ')})`);
  }
}

/** What one call asks for, worked out before anything is held. */
interface CallPlan {
  model: string;
  modelClass: ModelClass;
  promptTokens: number;
  outputPerChoice: number;
  choices: number;
}

/** A hold, or (`skipped`) none: a deployment without an AI token limit has nothing to hold. */
type CallHold = AiHold & { skipped?: true };

/**
 * Hold what the call may spend. An unlimited deployment (its terms as authenticated) holds nothing and
 * skips the transaction, so its calls reach the provider without a database round trip; the settle
 * still counts them against the limit in force then, should one have been set meanwhile.
 */
async function hold(ctx: Ctx, deployment: AiDeployment, plan: CallPlan): Promise<CallHold> {
  if (effectiveTerms(deployment, ctx.clock.now()).aiTokensLimit === null) {
    return { id: randomUUID(), outputPerChoice: plan.outputPerChoice, tokensHeld: 0, creditsHeld: 0, skipped: true };
  }
  return holdAiTokens(ctx, deployment, {
    model: plan.model,
    modelClass: plan.modelClass,
    promptTokens: plan.promptTokens,
    outputPerChoice: plan.outputPerChoice,
    choices: plan.choices,
    expiresAt: new Date(ctx.clock.now().getTime() + AI_HOLD_TTL_MS),
  });
}

/** The client's disconnect aborts the upstream request (SPEC §6: a client that goes stops the call). */
function abortOnDisconnect(reply: FastifyReply): AbortController {
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.raw.writableFinished) controller.abort(new Error('client disconnected'));
  };
  // A response's 'close' comes when it finished or when its connection went; only the second aborts.
  reply.raw.once('close', onClose);
  return controller;
}

/**
 * The upstream's answer; null when the client went away first (nothing to answer, nothing charged: the
 * provider answered nothing to us); a 502 for a connection error or a timeout. On anything but an
 * answer the hold is released here.
 */
async function send(
  call: ChatCall,
  held: CallHold,
  upstream: AiUpstream,
  path: string,
  body: unknown,
  signal: AbortSignal,
): Promise<Dispatcher.ResponseData | UpstreamRefusal | null> {
  let res: Dispatcher.ResponseData;
  try {
    res = await upstream.post(path, body, signal);
  } catch (err) {
    await release(call.ctx, call.deployment, held);
    if (signal.aborted) return null;
    throw upstreamError(describeFault(err));
  }
  if (res.statusCode >= 200 && res.statusCode < 300) return res;
  await release(call.ctx, call.deployment, held);
  const refusal = await refusalOf(res);
  if (refusal instanceof AppError) throw refusal;
  return refusal;
}

function isRefusal(res: Dispatcher.ResponseData | UpstreamRefusal): res is UpstreamRefusal {
  return !('statusCode' in res);
}

function describeFault(err: unknown): string {
  const code = (err as { code?: string } | null)?.code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'it did not answer in time';
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'UND_ERR_CONNECT_TIMEOUT') return 'it could not be reached';
  return 'the connection failed';
}

/** A non-2xx answer: 4xx (429 with Retry-After) handed on as the provider wrote it; 5xx → 502. */
interface UpstreamRefusal {
  status: number;
  body: Buffer;
  contentType: string;
  retryAfter: string | undefined;
}

async function refusalOf(res: Dispatcher.ResponseData): Promise<UpstreamRefusal | AppError> {
  const body = (await readBody(res.body, MAX_ERROR_BYTES, true)) ?? Buffer.alloc(0);
  if (res.statusCode >= 500 || res.statusCode < 400) return upstreamError(`it answered ${res.statusCode}`);
  const retry = res.headers['retry-after'];
  return {
    status: res.statusCode,
    body,
    contentType: String(res.headers['content-type'] ?? 'application/json'),
    retryAfter: Array.isArray(retry) ? retry[0] : retry,
  };
}

function sendRefusal(reply: FastifyReply, refusal: UpstreamRefusal): FastifyReply {
  if (refusal.retryAfter !== undefined) reply.header('retry-after', refusal.retryAfter);
  return reply.code(refusal.status).type(refusal.contentType).send(refusal.body);
}

/** Settle a call to what it used; a settle that fails leaves the hold to the worker and is logged. */
async function settle(
  ctx: Ctx,
  deployment: AiDeployment,
  plan: CallPlan,
  held: CallHold,
  usage: ProviderUsage | null,
  estimate: () => number,
): Promise<AiUsageResult> {
  const estimated = usage === null;
  return settleAiTokens(ctx, deployment, {
    model: plan.model,
    modelClass: plan.modelClass,
    ...(held.skipped ? { requestId: held.id } : { holdId: held.id }),
    inputTokens: usage ? usage.prompt_tokens : plan.promptTokens,
    outputTokens: usage ? usage.completion_tokens : Math.min(estimate(), held.outputPerChoice * plan.choices),
    estimated,
  });
}

/** Settle where there is no one left to answer (a stream under way, a client gone): a failure is logged. */
async function settleQuietly(call: ChatCall, plan: CallPlan, held: CallHold, usage: ProviderUsage | null, estimate: () => number): Promise<void> {
  try {
    await settle(call.ctx, call.deployment, plan, held, usage, estimate);
  } catch (err) {
    call.ctx.log.error({ err, hold: held.id }, 'AI call not settled; its hold expires through the ai-hold-expiry worker');
  }
}

async function release(ctx: Ctx, deployment: AiDeployment, held: CallHold): Promise<void> {
  if (held.skipped) return;
  try {
    await releaseAiHold(ctx.db, deployment.id, held.id, ctx.clock.now());
  } catch (err) {
    // The worker gives it back when it expires; nothing was charged either way.
    ctx.log.warn({ err, hold: held.id }, 'AI hold not released; the ai-hold-expiry worker will');
  }
}

// ---------------------------------------------------------------------------------------------------
// Chat completions

export interface ChatBody {
  model: string;
  messages: Array<Record<string, unknown>>;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  n?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  [field: string]: unknown;
}

function chatPlan(ctx: Ctx, body: ChatBody): CallPlan {
  const asked = [body.max_tokens, body.max_completion_tokens].filter((v): v is number => typeof v === 'number');
  return {
    model: body.model,
    modelClass: modelClassOf(ctx, body.model),
    promptTokens: countChatPrompt(body.model, body),
    outputPerChoice: asked.length > 0 ? Math.min(...asked) : ctx.config.aiMaxOutputTokens,
    choices: body.n ?? 1,
  };
}

/**
 * The body the upstream gets: the caller's, untouched but for the allowance as its max tokens (in the
 * field the caller used: reasoning models take only max_completion_tokens) and, on a stream, usage asked for.
 */
function upstreamChatBody(body: ChatBody, allowance: number): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  const completionField = typeof body.max_completion_tokens === 'number' && typeof body.max_tokens !== 'number';
  if (completionField) out.max_completion_tokens = allowance;
  else {
    out.max_tokens = allowance;
    if (typeof body.max_completion_tokens === 'number') out.max_completion_tokens = allowance;
  }
  if (body.stream === true) out.stream_options = { ...(body.stream_options ?? {}), include_usage: true };
  return out;
}

export interface ChatCall {
  ctx: Ctx;
  deployment: AiDeployment;
  upstream: AiUpstream | null;
  request: FastifyRequest;
  reply: FastifyReply;
}

/** Everything before the upstream call: gate, model, tokens, hold. */
async function prepareChat(call: ChatCall, body: ChatBody): Promise<{ plan: CallPlan; held: CallHold; upstream: AiUpstream }> {
  const { ctx, deployment } = call;
  assertAiEnabled(ctx, deployment);
  checkModel(ctx, body.model);
  if (!call.upstream) throw notConfigured();
  await loadEncodingFor(body.model);
  const plan = chatPlan(ctx, body);
  return { plan, held: await hold(ctx, deployment, plan), upstream: call.upstream };
}

/** POST /api/v1/ai/chat/completions: the OpenAI answer, or its SSE stream passed through chunk by chunk. */
export async function chatCompletions(call: ChatCall, body: ChatBody): Promise<FastifyReply> {
  const { plan, held, upstream } = await prepareChat(call, body);
  const { reply } = call;
  const controller = abortOnDisconnect(reply);
  const res = await send(call, held, upstream, '/chat/completions', upstreamChatBody(body, held.outputPerChoice), controller.signal);
  if (!res) return reply;
  if (isRefusal(res)) return sendRefusal(reply, res);
  if (body.stream === true) return streamChat(call, plan, held, res, controller, body.stream_options?.include_usage === true);
  return answerWhole(call, plan, held, res, controller, (answer) => textOfChoices(answer.choices, 'message'));
}

/**
 * A non-streamed answer: read it whole (to find its usage), settle, then hand on the bytes as received.
 * A client gone before that gets nothing and is charged nothing.
 */
async function answerWhole(
  call: ChatCall,
  plan: CallPlan,
  held: CallHold,
  res: Dispatcher.ResponseData,
  controller: AbortController,
  textOf: (answer: Record<string, unknown>) => string,
): Promise<FastifyReply> {
  const read = await readAnswer(call, plan, held, res, controller);
  if (!read) return call.reply;
  const { raw, answer } = read;
  await settle(call.ctx, call.deployment, plan, held, usageOf(answer.usage), () => countText(plan.model, textOf(answer)));
  return call.reply.code(200).type('application/json').send(raw);
}

/**
 * Read a non-streamed answer whole. A client gone meanwhile: the provider answered (it has the prompt),
 * so the prompt is charged and null returned. An answer that is too large or not a JSON object: the
 * hold is released and 502.
 */
async function readAnswer(
  call: ChatCall,
  plan: CallPlan,
  held: CallHold,
  res: Dispatcher.ResponseData,
  controller: AbortController,
): Promise<{ raw: Buffer; answer: Record<string, unknown> } | null> {
  try {
    const raw = await readBody(res.body, MAX_ANSWER_BYTES);
    if (raw === null) throw upstreamError('its answer was larger than 64 MiB');
    const answer = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
    if (!answer || typeof answer !== 'object') throw upstreamError('its answer was not a JSON object');
    return { raw, answer };
  } catch (err) {
    if (controller.signal.aborted) {
      await settleQuietly(call, plan, held, null, () => 0);
      return null;
    }
    await release(call.ctx, call.deployment, held);
    throw err instanceof AppError ? err : upstreamError(err instanceof SyntaxError ? 'its answer was not JSON' : describeFault(err));
  }
}

/** The SSE event that tells a client the provider's stream broke (the OpenAI SDKs raise it as an APIError). */
function cutEvent(): string {
  return `data: ${JSON.stringify({
    error: { message: "The AI provider's stream ended before it was complete", type: 'upstream_error', code: 'AI_UPSTREAM_ERROR' },
  })}\n\n`;
}

/**
 * A stream: each event goes to the client as it arrives; the usage chunk the proxy asked for is kept
 * from a client that did not ask for it; `[DONE]` is held back until the call is settled, so a client
 * that reads to the end finds its quota already counted.
 */
async function streamChat(
  call: ChatCall,
  plan: CallPlan,
  held: CallHold,
  res: Dispatcher.ResponseData,
  controller: AbortController,
  clientWantsUsage: boolean,
): Promise<FastifyReply> {
  const { reply } = call;
  const out = new PassThrough();
  reply.code(200).header('content-type', 'text/event-stream; charset=utf-8').header('cache-control', 'no-cache').header('x-accel-buffering', 'no');
  void reply.send(out);
  const splitter = new SseSplitter();
  const streamed: string[] = [];
  let usage: ProviderUsage | null = null;
  let done = false;
  let finished = false;
  let cut = false;
  try {
    for await (const chunk of res.body) {
      for (const event of splitter.push(chunk as Buffer)) {
        if (event.data === '[DONE]') {
          done = true;
          continue;
        }
        let forward = true;
        if (event.data !== null) {
          const parsed = parseJson(event.data);
          if (parsed) {
            const reported = usageOf(parsed.usage);
            if (reported) {
              usage = reported;
              forward = clientWantsUsage || !(Array.isArray(parsed.choices) && parsed.choices.length === 0);
            }
            const text = textOfChoices(parsed.choices, 'delta');
            if (text) streamed.push(text);
            finished ||= hasFinished(parsed.choices);
          }
        }
        if (forward) await write(out, event.raw);
      }
    }
    // A provider that ends without [DONE] after its last choice finished is done; one that stops mid-answer is not.
    if (!done && !finished) cut = true;
  } catch {
    cut = true;
  }
  await finishStream(call, plan, held, usage, streamed, out, controller.signal.aborted, () => {
    if (controller.signal.aborted) return '';
    return cut ? cutEvent() : 'data: [DONE]\n\n';
  });
  return reply;
}

/**
 * After a stream: settle, then the last words, then the end. A stream that broke before any text is
 * released (the provider produced nothing); one the client left is charged at least its prompt, since
 * the provider had it (else a client could have prompts processed for free by hanging up at once).
 */
async function finishStream(
  call: ChatCall,
  plan: CallPlan,
  held: CallHold,
  usage: ProviderUsage | null,
  streamed: string[],
  out: PassThrough,
  clientGone: boolean,
  lastWords: () => string,
): Promise<void> {
  if (usage === null && streamed.length === 0 && !clientGone) await release(call.ctx, call.deployment, held);
  else await settleQuietly(call, plan, held, usage, () => countText(plan.model, streamed.join('')));
  const words = lastWords();
  if (words) await write(out, words);
  out.end();
}

function hasFinished(choices: unknown): boolean {
  return Array.isArray(choices) && choices.some((c) => typeof (c as { finish_reason?: unknown } | null)?.finish_reason === 'string');
}

function parseJson(data: string): Record<string, unknown> | null {
  try {
    const value = JSON.parse(data) as unknown;
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Write with backpressure: wait for the client to drain (or go). */
async function write(out: PassThrough, text: string): Promise<void> {
  if (out.destroyed || out.writableEnded) return;
  if (out.write(text)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      out.off('drain', done);
      out.off('close', done);
      resolve();
    };
    out.once('drain', done);
    out.once('close', done);
  });
}

// ---------------------------------------------------------------------------------------------------
// Embeddings

export interface EmbeddingsBody {
  model: string;
  input: string | string[] | number[] | number[][];
  [field: string]: unknown;
}

/** POST /api/v1/ai/embeddings: the input's tokens held, settled to the provider's prompt_tokens. */
export async function embeddings(call: ChatCall, body: EmbeddingsBody): Promise<FastifyReply> {
  const { ctx, deployment, reply } = call;
  assertAiEnabled(ctx, deployment);
  checkModel(ctx, body.model);
  if (!call.upstream) throw notConfigured();
  await loadEncodingFor(body.model);
  const plan: CallPlan = {
    model: body.model,
    modelClass: modelClassOf(ctx, body.model),
    promptTokens: countEmbeddingInput(body.model, body.input),
    outputPerChoice: 0,
    choices: 1,
  };
  const held = await hold(ctx, deployment, plan);
  const controller = abortOnDisconnect(reply);
  const res = await send(call, held, call.upstream, '/embeddings', body, controller.signal);
  if (!res) return reply;
  if (isRefusal(res)) return sendRefusal(reply, res);
  return answerWhole(call, plan, held, res, controller, () => '');
}

// ---------------------------------------------------------------------------------------------------
// /api/ai/generate (self-hosted, §8 envelope)

export interface GenerateBody {
  prompt: string;
  max_tokens: number;
  temperature?: number;
  stream?: boolean;
}

export interface Generated {
  text: string;
  model: string;
  usage: { input_tokens: number; output_tokens: number };
}

/**
 * The same path with AI_DEFAULT_MODEL: a chat call of one user message. Upstream refusals are the
 * server's configuration, not the caller's request: 429 stays a 429 (RATE_LIMITED with the provider's
 * Retry-After), anything else is a 502.
 */
export async function generate(call: ChatCall, input: GenerateBody): Promise<Generated | FastifyReply> {
  const chat: ChatBody = {
    model: call.ctx.config.aiDefaultModel,
    messages: [{ role: 'user', content: input.prompt }],
    max_tokens: input.max_tokens,
    ...(input.temperature !== undefined ? { temperature: input.temperature } : {}),
    ...(input.stream === true ? { stream: true } : {}),
  };
  const { plan, held, upstream } = await prepareChat(call, chat);
  const { ctx, deployment, reply } = call;
  const controller = abortOnDisconnect(reply);
  const res = await send(call, held, upstream, '/chat/completions', upstreamChatBody(chat, held.outputPerChoice), controller.signal);
  if (!res) return reply;
  if (isRefusal(res)) {
    const refusal = res;
    if (refusal.status === 429) {
      const seconds = Math.max(1, Number.parseInt(refusal.retryAfter ?? '1', 10) || 1);
      throw new AppError('RATE_LIMITED', `The AI provider is limiting requests; retry in ${seconds} seconds`, {}, { 'retry-after': String(seconds) });
    }
    throw upstreamError(`it refused the request (${refusal.status}): ${refusal.body.toString('utf8').slice(0, 300)}`);
  }
  if (input.stream === true) return streamText(call, plan, held, res, controller);
  const read = await readAnswer(call, plan, held, res, controller);
  if (!read) return reply;
  const { answer } = read;
  const text = textOfChoices(Array.isArray(answer.choices) ? answer.choices.slice(0, 1) : [], 'message');
  const result = await settle(ctx, deployment, plan, held, usageOf(answer.usage), () => countText(plan.model, text));
  const inputTokens = usageOf(answer.usage)?.prompt_tokens ?? plan.promptTokens;
  return {
    text,
    model: typeof answer.model === 'string' ? answer.model : plan.model,
    usage: { input_tokens: inputTokens, output_tokens: result.tokens - inputTokens },
  };
}

/** `stream: true` on /api/ai/generate: a text/plain chunked stream of the text alone. */
async function streamText(call: ChatCall, plan: CallPlan, held: CallHold, res: Dispatcher.ResponseData, controller: AbortController): Promise<FastifyReply> {
  const { reply } = call;
  const out = new PassThrough();
  reply.code(200).header('content-type', 'text/plain; charset=utf-8').header('cache-control', 'no-cache').header('x-accel-buffering', 'no');
  void reply.send(out);
  const splitter = new SseSplitter();
  const streamed: string[] = [];
  let usage: ProviderUsage | null = null;
  try {
    for await (const chunk of res.body) {
      for (const event of splitter.push(chunk as Buffer)) {
        if (event.data === null || event.data === '[DONE]') continue;
        const parsed = parseJson(event.data);
        if (!parsed) continue;
        usage = usageOf(parsed.usage) ?? usage;
        const text = textOfChoices(parsed.choices, 'delta');
        if (text) {
          streamed.push(text);
          await write(out, text);
        }
      }
    }
  } catch {
    // A cut stream ends the text where it broke; what was streamed is settled as an estimate.
  }
  await finishStream(call, plan, held, usage, streamed, out, controller.signal.aborted, () => '');
  return reply;
}
