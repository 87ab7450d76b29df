import type { Config } from '../../config.js';
import { isReasoningModel } from './models.js';
import { invalidRequest } from './prompt.js';
import { countText } from './tokens.js';

/**
 * Bounds that cannot be talked around (docs/ai-proxy.md, Bounds): which request fields go upstream, the
 * output allowance and the field(s) that carry it, and the meter that stops a stream at the allowance.
 */

/**
 * The request fields of OpenAI's API reference, per route. Nothing else is forwarded unless listed in
 * AI_EXTRA_FIELDS: a vendor field (`best_of`, `min_tokens`, `ignore_eos`, `max_new_tokens`, `options`,
 * `use_beam_search`, …) can multiply what a call costs past anything the proxy held. The Responses
 * API's list leaves out `context_management`, `moderation` and `prompt_cache_options` (their cost is not
 * yet understood here, as for chat); its stateful fields are on the list and refused by value below.
 */
export const REQUEST_FIELDS = {
  chat: [
    'messages',
    'model',
    'audio',
    'frequency_penalty',
    'function_call',
    'functions',
    'logit_bias',
    'logprobs',
    'max_completion_tokens',
    'max_tokens',
    'metadata',
    'modalities',
    'n',
    'parallel_tool_calls',
    'prediction',
    'presence_penalty',
    'prompt_cache_key',
    'prompt_cache_retention',
    'reasoning_effort',
    'response_format',
    'safety_identifier',
    'seed',
    'service_tier',
    'stop',
    'store',
    'stream',
    'stream_options',
    'temperature',
    'tool_choice',
    'tools',
    'top_logprobs',
    'top_p',
    'user',
    'verbosity',
  ],
  embeddings: ['input', 'model', 'dimensions', 'encoding_format', 'user'],
  responses: [
    'input',
    'model',
    'background',
    'conversation',
    'include',
    'instructions',
    'max_output_tokens',
    'max_tool_calls',
    'metadata',
    'parallel_tool_calls',
    'previous_response_id',
    'prompt',
    'prompt_cache_key',
    'prompt_cache_retention',
    'reasoning',
    'safety_identifier',
    'service_tier',
    'store',
    'stream',
    'stream_options',
    'temperature',
    'text',
    'tool_choice',
    'tools',
    'top_logprobs',
    'top_p',
    'truncation',
    'user',
  ],
} as const satisfies Record<string, readonly string[]>;

export type AiRoute = keyof typeof REQUEST_FIELDS;

const ALLOWED: Record<AiRoute, ReadonlySet<string>> = {
  chat: new Set(REQUEST_FIELDS.chat),
  embeddings: new Set(REQUEST_FIELDS.embeddings),
  responses: new Set(REQUEST_FIELDS.responses),
};

/**
 * Reference fields whose values buy something the token bounds do not cover: audio output (billed as
 * audio tokens at other rates) and the dearer service tiers. Listing the named field in AI_EXTRA_FIELDS
 * lets them through.
 */
const RESTRICTED: Array<{ field: string; liftedBy: string; refuses: (value: unknown) => string | null }> = [
  { field: 'audio', liftedBy: 'audio', refuses: (v) => (v === null ? null : 'asks for audio output, which this server does not offer (AI_EXTRA_FIELDS lists no "audio")') },
  {
    field: 'modalities',
    liftedBy: 'audio',
    refuses: (v) => (v === null || (Array.isArray(v) && v.every((m) => m === 'text')) ? null : 'may only be ["text"] on this server (AI_EXTRA_FIELDS lists no "audio")'),
  },
  {
    field: 'service_tier',
    liftedBy: 'service_tier',
    refuses: (v) => (v === 'priority' || v === 'scale' ? `"${String(v)}" costs more per token than this server bills; use auto, default or flex` : null),
  },
];

/** 400 INVALID_REQUEST naming the first top-level field outside the route's list and AI_EXTRA_FIELDS. */
export function checkFields(config: Pick<Config, 'aiExtraFields'>, route: AiRoute, body: Record<string, unknown>): void {
  const extra = config.aiExtraFields;
  for (const field of Object.keys(body)) {
    if (!ALLOWED[route].has(field) && !extra.includes(field)) {
      throw invalidRequest(field, 'is not a request field this server forwards (OpenAI\'s API reference, plus AI_EXTRA_FIELDS)');
    }
  }
  for (const rule of RESTRICTED) {
    if (!(rule.field in body) || extra.includes(rule.liftedBy)) continue;
    const refused = rule.refuses(body[rule.field]);
    if (refused) throw invalidRequest(rule.field, refused);
  }
}

/** The fields a caller may name its output limit in; the smallest wins. */
const LIMIT_FIELDS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens'] as const;

/**
 * The output allowance per choice asked for: the smallest limit the caller named, else
 * AI_MAX_OUTPUT_TOKENS. The hold then shrinks it to what the deployment can pay for.
 */
export function askedAllowance(config: Pick<Config, 'aiMaxOutputTokens'>, body: Record<string, unknown>): number {
  const asked = LIMIT_FIELDS.map((f) => body[f]).filter((v): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 1);
  return asked.length > 0 ? Math.min(...asked) : config.aiMaxOutputTokens;
}

/**
 * The chat body the upstream gets: the caller's, with the allowance in every limit field it sent and
 * in the one the model reads: reasoning models only `max_completion_tokens` (they refuse `max_tokens`),
 * the others always `max_tokens` (what every OpenAI-compatible backend reads); on a stream, usage asked for.
 */
export function upstreamChatBody(config: Pick<Config, 'aiReasoningModels'>, body: Record<string, unknown>, allowance: number): Record<string, unknown> {
  const out: Record<string, unknown> = { ...body };
  for (const field of LIMIT_FIELDS) if (out[field] !== undefined && out[field] !== null) out[field] = allowance;
  if (isReasoningModel(config, String(body.model))) {
    delete out.max_tokens;
    out.max_completion_tokens = allowance;
  } else {
    out.max_tokens = allowance;
  }
  if (body.stream === true) out.stream_options = { ...((body.stream_options as object | null | undefined) ?? {}), include_usage: true };
  return out;
}

/** Tool types a Responses request may define: the caller runs them, so they cost only their tokens. */
const CALLER_TOOLS = new Set(['function', 'custom']);

/**
 * The Responses API forwards only stateless requests (docs/ai-proxy.md, Responses API): what the
 * provider stored (an earlier response, a conversation, a stored prompt) cannot be counted before the
 * call, a background response outlives the call that would settle it, and hosted tools (web and file
 * search, code interpreter, image generation, computer use, remote MCP, …) bill per use or per container
 * on top of tokens, which no token bound covers. Each is 400 naming the field; `store` is forced to
 * false upstream (upstreamResponsesBody).
 */
export function checkStateless(body: Record<string, unknown>): void {
  for (const field of ['previous_response_id', 'conversation', 'prompt'] as const) {
    if (body[field] !== undefined && body[field] !== null) {
      throw invalidRequest(field, 'refers to state the provider stored, which this server does not forward (send the whole input; nothing is stored)');
    }
  }
  if (body.background === true) throw invalidRequest('background', 'is not offered: a background response outlives the call that pays for it');
  if (Array.isArray(body.tools)) {
    body.tools.forEach((tool, i) => {
      const type = (tool as { type?: unknown } | null)?.type;
      if (!CALLER_TOOLS.has(String(type))) {
        throw invalidRequest(`tools[${i}].type`, `"${String(type)}" is a hosted tool (or unknown), billed on top of tokens: only function and custom tools are forwarded`);
      }
    });
  }
  const choice = body.tool_choice;
  if (choice !== null && typeof choice === 'object') {
    const { type, tools } = choice as { type?: unknown; tools?: unknown };
    const named = type === 'allowed_tools' && Array.isArray(tools) ? tools.map((t) => (t as { type?: unknown } | null)?.type) : [type];
    if (!named.every((t) => CALLER_TOOLS.has(String(t)))) throw invalidRequest('tool_choice', 'may name only function and custom tools on this server');
  }
}

/** The Responses body the upstream gets: the caller's, never stored, with the allowance in `max_output_tokens`. */
export function upstreamResponsesBody(body: Record<string, unknown>, allowance: number): Record<string, unknown> {
  return { ...body, store: false, max_output_tokens: allowance };
}

/**
 * Output relayed on a stream, counted with the tokenizer as it goes: a provider that ignores the
 * allowance is stopped once what it sent would pass it (what was relayed never does).
 */
export class OutputMeter {
  count = 0;
  constructor(
    private readonly model: string,
    readonly limit: number,
  ) {}

  /**
   * Count a piece of output (and `unreadable`: bytes of content the proxy cannot read, a token each);
   * false when it would take the stream past the limit (it is then not relayed).
   */
  admit(text: string, unreadable = 0): boolean {
    const tokens = countText(this.model, text) + unreadable;
    if (this.count + tokens > this.limit) return false;
    this.count += tokens;
    return true;
  }
}
