import type { FastifyReply } from 'fastify';
import { AppError, OpenAiShapedError } from '../../errors.js';
import { assertAiEnabled, modelClassOf } from '../quotas/ai-tokens.js';
import { askedAllowance, checkFields, checkStateless, upstreamResponsesBody } from './bounds.js';
import { type CallPlan, type ChatCall, chargeOf, hold } from './call.js';
import { isReasoningModel } from './models.js';
import { countResponsesPromptBoundAsync } from './prompt.js';
import { abortOnDisconnect, answerWhole, checkModel, isRefusal, notConfigured, send, sendRefusal, type UpstreamRefusal } from './proxy.js';
import { streamResponses } from './responses-stream.js';
import { readResponsesUsage } from './sse.js';
import { loadEncodingFor } from './tokens.js';

/**
 * POST /api/v1/ai/responses: the OpenAI Responses API through the same gate, bounds, hold and settle as
 * chat completions (docs/ai-proxy.md, Responses API). Only stateless requests go upstream.
 */

export interface ResponsesBody {
  model: string;
  input?: string | Array<Record<string, unknown>>;
  instructions?: string | null;
  max_output_tokens?: number | null;
  stream?: boolean | null;
  [field: string]: unknown;
}

/** 501: the provider has no Responses API (it answered 404 or 405 for the route itself). */
function notSupported(): AppError {
  return new AppError(
    'AI_ROUTE_NOT_SUPPORTED',
    'The AI provider behind this server does not offer the Responses API (it answered 404/405 for /responses); use /chat/completions',
  );
}

/**
 * A 404 that names a model (OpenAI's `model_not_found`, or a `param` of `model`) is the provider's answer
 * about the request, handed on like any 4xx; any other 404, and every 405, says the route is missing.
 */
function isMissingRoute(refusal: UpstreamRefusal): boolean {
  if (refusal.status === 405) return true;
  if (refusal.status !== 404) return false;
  try {
    const error = (JSON.parse(refusal.body.toString('utf8')) as { error?: { code?: unknown; param?: unknown } } | null)?.error;
    return !(error && typeof error === 'object' && (error.code === 'model_not_found' || error.param === 'model'));
  } catch {
    return true;
  }
}

/** The text of a Responses answer's output (messages, refusals, tool-call arguments, reasoning summaries), for an estimate. */
export function textOfOutput(answer: Record<string, unknown>): string {
  if (!Array.isArray(answer.output)) return '';
  let text = '';
  for (const item of answer.output as Array<Record<string, unknown> | null>) {
    if (!item || typeof item !== 'object') continue;
    if (typeof item.arguments === 'string') text += item.arguments;
    if (typeof item.input === 'string') text += item.input;
    for (const list of [item.content, item.summary]) {
      if (!Array.isArray(list)) continue;
      for (const part of list as Array<Record<string, unknown> | null>) {
        for (const field of ['text', 'refusal'] as const) if (typeof part?.[field] === 'string') text += part[field];
      }
    }
  }
  return text;
}

async function responsesPlan(call: ChatCall, body: ResponsesBody): Promise<CallPlan> {
  const { ctx } = call;
  return {
    model: body.model,
    modelClass: modelClassOf(ctx, body.model),
    promptTokens: await countResponsesPromptBoundAsync(ctx.config, body.model, body, call.deployment.organization_id),
    outputPerChoice: askedAllowance(ctx.config, body),
    choices: 1,
    reasoning: isReasoningModel(ctx.config, body.model),
    charge: chargeOf(call, body),
  };
}

export async function createResponse(call: ChatCall, body: ResponsesBody): Promise<FastifyReply> {
  const { ctx, deployment, reply } = call;
  assertAiEnabled(ctx, deployment);
  checkFields(ctx.config, 'responses', body);
  checkStateless(body);
  checkModel(ctx, body.model);
  if (!call.upstream) throw notConfigured();
  await loadEncodingFor(body.model);
  const plan = await responsesPlan(call, body);
  const held = await hold(ctx, deployment, plan);
  const controller = abortOnDisconnect(reply);
  const res = await send(call, held, call.upstream, '/responses', upstreamResponsesBody(body, held.outputPerChoice), controller.signal);
  if (!res) return reply;
  if (isRefusal(res)) {
    // The hold was released by send(), like every refusal.
    if (isMissingRoute(res)) throw notSupported();
    return sendRefusal(reply, res);
  }
  if (body.stream === true) {
    await streamResponses(call, plan, held, res, controller);
    return reply;
  }
  return answerWhole(call, plan, held, res, controller, (answer) => ({ text: textOfOutput(answer), unreadable: 0 }), (answer) => readResponsesUsage(answer.usage));
}

/** GET /api/v1/ai/models/{id}: a model the proxy offers, else 404 `model_not_found` in OpenAI's shape. */
export function modelNotFound(model: string): OpenAiShapedError {
  return new OpenAiShapedError('NOT_FOUND', `The model '${model}' does not exist or is not offered by this server`, 'model_not_found');
}
