import type { FastifyReply } from 'fastify';
import type { Dispatcher } from 'undici';
import type { Ctx } from '../../context.js';
import { AppError, ValidationError, withUpstreamDetail } from '../../errors.js';
import { assertAiEnabled, modelClassOf } from '../quotas/ai-tokens.js';
import { askedAllowance, checkFields, upstreamChatBody } from './bounds.js';
import { type CallHold, type CallPlan, type ChatCall, chargeOf, hold, release, settle, settleQuietly } from './call.js';
import { countEmbeddingInputAsync, countOutputAsync } from './count-workers.js';
import { isReasoningModel, isSearchModel } from './models.js';
import { countChatPromptBoundAsync } from './prompt.js';
import { NO_OUTPUT, type Output, outputOfChoices, type ReportedUsage, readEmbeddingsUsage, readUsage, textOfChoices } from './sse.js';
import { streamChat, streamText } from './stream.js';
import { loadEncodingFor } from './tokens.js';
import { type AiUpstream, readBody } from './upstream.js';

export type { AiDeployment, ChatCall } from './call.js';

/**
 * The AI proxy (docs/ai-proxy.md): gate, bound, count, hold, call the upstream, settle to its usage
 * or release. The bounds (fields, prompt hold, allowance) are bounds.ts and prompt.ts; the hold and the
 * settle call.ts; streams stream.ts.
 */

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

/** 400 for a model outside AI_MODELS when that list is set (docs/ai-proxy.md: `AI_MODELS` restricts and lists models). */
export function checkModel(ctx: Ctx, model: string): void {
  if (ctx.config.aiModels.length > 0) {
    if (!ctx.config.aiModels.includes(model)) throw badRequest('model', `is not one of the models this server offers (${ctx.config.aiModels.join(', ')})`);
    return;
  }
  // Any model goes upstream without AI_MODELS: one that searches on every call only when the operator
  // took on search fees, as for web_search_options (docs/ai-proxy.md, Bounds).
  if (isSearchModel(model) && !ctx.config.aiExtraFields.includes('web_search_options')) {
    throw badRequest('model', 'searches the web on every call, a fee per search this server does not bill (list it in AI_MODELS, or "web_search_options" in AI_EXTRA_FIELDS)');
  }
}

/** The client's disconnect aborts the upstream request (docs/ai-proxy.md, Streaming: a client that goes stops the call). */
export function abortOnDisconnect(reply: FastifyReply): AbortController {
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
export async function send(
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

export function isRefusal(res: Dispatcher.ResponseData | UpstreamRefusal): res is UpstreamRefusal {
  return !('statusCode' in res);
}

function describeFault(err: unknown): string {
  const code = (err as { code?: string } | null)?.code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'it did not answer in time';
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'UND_ERR_CONNECT_TIMEOUT') return 'it could not be reached';
  return 'the connection failed';
}

/** A non-2xx answer: 4xx (429 with Retry-After) handed on as the provider wrote it; 5xx → 502. */
export interface UpstreamRefusal {
  status: number;
  body: Buffer;
  contentType: string;
  retryAfter: string | undefined;
}

async function refusalOf(res: Dispatcher.ResponseData): Promise<UpstreamRefusal | AppError> {
  const body = (await readBody(res.body, MAX_ERROR_BYTES, true)) ?? Buffer.alloc(0);
  if (res.statusCode >= 500 || res.statusCode < 400) return upstreamError(`it answered ${res.statusCode}`);
  if (res.statusCode === 401 || res.statusCode === 403) {
    // About the installation's own key (AI_API_KEY), not the caller's: its words (a fragment of the key,
    // the account) are the operator's, in the log; the caller gets a 502 (docs/ai-proxy.md, Errors).
    return withUpstreamDetail(upstreamError(`it refused the installation's credentials (${res.statusCode})`), { status: res.statusCode, body: body.toString('utf8').slice(0, 1000) });
  }
  const retry = res.headers['retry-after'];
  return {
    status: res.statusCode,
    body,
    contentType: String(res.headers['content-type'] ?? 'application/json'),
    retryAfter: Array.isArray(retry) ? retry[0] : retry,
  };
}

export function sendRefusal(reply: FastifyReply, refusal: UpstreamRefusal): FastifyReply {
  if (refusal.retryAfter !== undefined) reply.header('retry-after', refusal.retryAfter);
  return reply.code(refusal.status).type(refusal.contentType).send(refusal.body);
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

async function chatPlan(call: ChatCall, body: ChatBody): Promise<CallPlan> {
  const { ctx } = call;
  return {
    model: body.model,
    modelClass: modelClassOf(ctx, body.model),
    promptTokens: await countChatPromptBoundAsync(ctx.config, body.model, body, call.deployment.organization_id),
    outputPerChoice: askedAllowance(ctx.config, body),
    choices: body.n ?? 1,
    reasoning: isReasoningModel(ctx.config, body.model),
    charge: chargeOf(call, body),
  };
}

/** Everything before the upstream call: gate, model, tokens, hold. */
async function prepareChat(call: ChatCall, body: ChatBody): Promise<{ plan: CallPlan; held: CallHold; upstream: AiUpstream }> {
  const { ctx, deployment } = call;
  assertAiEnabled(ctx, deployment);
  checkFields(ctx.config, 'chat', body);
  checkModel(ctx, body.model);
  if (!call.upstream) throw notConfigured();
  await loadEncodingFor(body.model);
  const plan = await chatPlan(call, body);
  return { plan, held: await hold(ctx, deployment, plan), upstream: call.upstream };
}

/** POST /api/v1/ai/chat/completions: the OpenAI answer, or its SSE stream passed through chunk by chunk. */
export async function chatCompletions(call: ChatCall, body: ChatBody): Promise<FastifyReply> {
  const { plan, held, upstream } = await prepareChat(call, body);
  const { reply } = call;
  const controller = abortOnDisconnect(reply);
  const res = await send(call, held, upstream, '/chat/completions', upstreamChatBody(call.ctx.config, body, held.outputPerChoice), controller.signal);
  if (!res) return reply;
  if (isRefusal(res)) return sendRefusal(reply, res);
  if (body.stream === true) {
    await streamChat(call, plan, held, res, controller, body.stream_options?.include_usage === true);
    return reply;
  }
  return answerWhole(call, plan, held, res, controller, (answer) => outputOfChoices(answer.choices, 'message'));
}

/**
 * A non-streamed answer: read it whole (to find its usage), settle, then hand on the bytes as received.
 * A client gone before that gets nothing and is charged nothing.
 */
export async function answerWhole(
  call: ChatCall,
  plan: CallPlan,
  held: CallHold,
  res: Dispatcher.ResponseData,
  controller: AbortController,
  outputOf: (answer: Record<string, unknown>) => Output,
  reportedOf: (answer: Record<string, unknown>) => ReportedUsage = (answer) => readUsage(answer.usage),
): Promise<FastifyReply> {
  const read = await readAnswer(call, plan, held, res, controller);
  if (!read) return call.reply;
  const { raw, answer } = read;
  const relayed = await countOutputAsync(plan.model, outputOf(answer));
  await settle(call.ctx, call.deployment, plan, held, reportedOf(answer), () => relayed);
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
      await settleQuietly(call, plan, held, { kind: 'none' }, () => 0);
      return null;
    }
    await release(call.ctx, call.deployment, held);
    throw err instanceof AppError ? err : upstreamError(err instanceof SyntaxError ? 'its answer was not JSON' : describeFault(err));
  }
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
  checkFields(ctx.config, 'embeddings', body);
  checkModel(ctx, body.model);
  if (!call.upstream) throw notConfigured();
  await loadEncodingFor(body.model);
  const plan: CallPlan = {
    model: body.model,
    modelClass: modelClassOf(ctx, body.model),
    promptTokens: await countEmbeddingInputAsync(body.model, body.input, deployment.organization_id),
    outputPerChoice: 0,
    choices: 1,
    reasoning: false,
    charge: chargeOf(call, body),
  };
  const held = await hold(ctx, deployment, plan);
  const controller = abortOnDisconnect(reply);
  const res = await send(call, held, call.upstream, '/embeddings', body, controller.signal);
  if (!res) return reply;
  if (isRefusal(res)) return sendRefusal(reply, res);
  return answerWhole(call, plan, held, res, controller, () => NO_OUTPUT, (answer) => readEmbeddingsUsage(answer.usage));
}

// ---------------------------------------------------------------------------------------------------
// /api/ai/generate (self-hosted, answered in the envelope: docs/openapi.md, Shapes)

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
export async function generate(call: ChatCall, input: GenerateBody): Promise<Generated | null> {
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
  const res = await send(call, held, upstream, '/chat/completions', upstreamChatBody(ctx.config, chat, held.outputPerChoice), controller.signal);
  if (!res) return null;
  if (isRefusal(res)) {
    const refusal = res;
    if (refusal.status === 429) {
      const seconds = Math.max(1, Number.parseInt(refusal.retryAfter ?? '1', 10) || 1);
      throw new AppError('RATE_LIMITED', `The AI provider is limiting requests; retry in ${seconds} seconds`, {}, { 'retry-after': String(seconds) });
    }
    throw upstreamError(`it refused the request (${refusal.status}): ${refusal.body.toString('utf8').slice(0, 300)}`);
  }
  if (input.stream === true) {
    await streamText(call, plan, held, res, controller);
    return null;
  }
  const read = await readAnswer(call, plan, held, res, controller);
  if (!read) return null;
  const { answer } = read;
  const text = textOfChoices(Array.isArray(answer.choices) ? answer.choices.slice(0, 1) : [], 'message');
  const reported = readUsage(answer.usage);
  const relayed = await countOutputAsync(plan.model, outputOfChoices(answer.choices, 'message'));
  const result = await settle(ctx, deployment, plan, held, reported, () => relayed);
  const inputTokens = reported.kind === 'ok' ? reported.usage.prompt_tokens : plan.promptTokens;
  return {
    text,
    model: typeof answer.model === 'string' ? answer.model : plan.model,
    usage: { input_tokens: inputTokens, output_tokens: result.tokens - inputTokens },
  };
}
