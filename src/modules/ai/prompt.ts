import type { Config } from '../../config.js';
import { AppError } from '../../errors.js';
import { type Detail, imageRuleOf, imageSize, imageTokens } from './images.js';
import { countText } from './tokens.js';

/**
 * The prompt hold of a chat request: an upper bound of what the provider can bill for its input
 * (docs/ai-proxy.md, Bounds: the prompt hold). Text is counted the OpenAI cookbook way (3 per message,
 * its strings, 1 per name, 3 priming the reply); tool and function definitions, tool calls, the
 * response format and the `prediction` are counted as their text; images by their family's rule; audio
 * and inline files by AI_BYTES_PER_TOKEN_BOUND or refused; anything the proxy cannot bound is refused
 * naming the part, before anything is held.
 */

export type PromptConfig = Pick<Config, 'aiImageMaxTokens' | 'aiBytesPerTokenBound'>;

/** 400 INVALID_REQUEST naming the field or part (flat shape with `param`). */
export function invalidRequest(param: string, message: string): AppError {
  return new AppError('INVALID_REQUEST', `${param} ${message}`, { param });
}

/** Message fields counted on their own below; any other is counted as its JSON (a provider may render it). */
const MESSAGE_FIELDS = new Set(['role', 'content', 'name', 'tool_calls', 'function_call', 'tool_call_id', 'refusal', 'audio']);

export function countChatPromptBound(config: PromptConfig, model: string, body: Record<string, unknown>): number {
  let n = 3;
  const messages = body.messages as Array<Record<string, unknown>>;
  messages.forEach((message, i) => {
    const at = `messages[${i}]`;
    n += 3;
    for (const field of ['role', 'tool_call_id', 'refusal'] as const) {
      if (typeof message[field] === 'string') n += countText(model, message[field]);
    }
    n += countContent(config, model, message.content, `${at}.content`);
    if (typeof message.name === 'string') n += countText(model, message.name) + 1;
    for (const field of ['tool_calls', 'function_call'] as const) {
      if (message[field] !== undefined && message[field] !== null) n += countText(model, JSON.stringify(message[field]));
    }
    // A reference to an earlier audio answer: the provider replays audio the proxy never saw.
    if (message.audio !== undefined && message.audio !== null) throw invalidRequest(`${at}.audio`, 'refers to stored audio, which the proxy cannot count before the call');
    for (const [field, value] of Object.entries(message)) {
      if (!MESSAGE_FIELDS.has(field) && value !== undefined && value !== null) n += countText(model, typeof value === 'string' ? value : JSON.stringify(value));
    }
  });
  for (const field of ['tools', 'functions', 'response_format', 'tool_choice'] as const) {
    const value = body[field];
    if (value !== undefined && value !== null && typeof value !== 'string') n += countText(model, JSON.stringify(value));
  }
  n += countPrediction(config, model, body.prediction);
  return n;
}

/** Predicted output (`prediction: {type: "content", content}`): the provider reads all of it. */
function countPrediction(config: PromptConfig, model: string, prediction: unknown): number {
  if (prediction === undefined || prediction === null) return 0;
  if (typeof prediction !== 'object') throw invalidRequest('prediction', 'must be an object {type: "content", content}');
  const content = (prediction as { content?: unknown }).content;
  if (typeof content === 'string' || Array.isArray(content)) return countContent(config, model, content, 'prediction.content');
  return countText(model, JSON.stringify(prediction));
}

function countContent(config: PromptConfig, model: string, content: unknown, at: string): number {
  if (typeof content === 'string') return countText(model, content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  content.forEach((part, j) => {
    n += countPart(config, model, part as Record<string, unknown>, `${at}[${j}]`);
  });
  return n;
}

function countPart(config: PromptConfig, model: string, p: Record<string, unknown>, at: string): number {
  switch (p.type) {
    case 'text':
      return typeof p.text === 'string' ? countText(model, p.text) : 0;
    case 'refusal':
      return typeof p.refusal === 'string' ? countText(model, p.refusal) : 0;
    case 'image_url':
      return countImage(config, model, p.image_url, at);
    case 'input_audio': {
      const data = (p.input_audio as { data?: unknown } | undefined)?.data;
      if (typeof data !== 'string') throw invalidRequest(`${at}.input_audio.data`, 'must be base64 audio');
      return countBytes(config, Buffer.byteLength(data, 'base64'), at, 'an audio part');
    }
    case 'file': {
      const file = (p.file ?? {}) as { file_id?: unknown; file_data?: unknown };
      if (file.file_id !== undefined && file.file_id !== null) {
        throw invalidRequest(`${at}.file.file_id`, 'refers to a stored file, which the proxy cannot count before the call: send file_data');
      }
      if (typeof file.file_data !== 'string') throw invalidRequest(`${at}.file.file_data`, 'must be the file, base64 or a data: URL');
      return countBytes(config, dataBytes(file.file_data).length, at, 'an inline file');
    }
    default:
      throw invalidRequest(`${at}.type`, `"${String(p.type)}" is not a content part the proxy can count (text, image_url, input_audio, file, refusal)`);
  }
}

/** Held at bytes ÷ AI_BYTES_PER_TOKEN_BOUND, rounded up; refused without it (docs/ai-proxy.md). */
function countBytes(config: PromptConfig, bytes: number, at: string, what: string): number {
  if (config.aiBytesPerTokenBound === undefined) {
    throw invalidRequest(at, `is ${what}, which this server does not accept (AI_BYTES_PER_TOKEN_BOUND is not set)`);
  }
  return Math.ceil(bytes / config.aiBytesPerTokenBound);
}

function countImage(config: PromptConfig, model: string, image: unknown, at: string): number {
  const { url, detail } = (image ?? {}) as { url?: unknown; detail?: unknown };
  if (typeof url !== 'string') throw invalidRequest(`${at}.image_url.url`, 'must be a URL or a data: URL');
  const rule = imageRuleOf(model);
  if (rule === null) return config.aiImageMaxTokens;
  // `auto` lets the provider choose: held as `high`, the dearer.
  const asked: Detail = detail === 'low' ? 'low' : 'high';
  // By URL: never fetched, held at the family's maximum; inline: measured from its header (unreadable: the maximum).
  const size = url.startsWith('data:') ? imageSize(dataBytes(url)) : null;
  return imageTokens(rule, asked, size);
}

/** The bytes of a `data:` URL (base64 or percent-encoded), or of bare base64. */
export function dataBytes(value: string): Buffer {
  if (!value.startsWith('data:')) return Buffer.from(value, 'base64');
  const comma = value.indexOf(',');
  if (comma === -1) return Buffer.alloc(0);
  const meta = value.slice(5, comma);
  const payload = value.slice(comma + 1);
  if (/;base64$/i.test(meta)) return Buffer.from(payload, 'base64');
  try {
    return Buffer.from(decodeURIComponent(payload), 'latin1');
  } catch {
    return Buffer.from(payload, 'latin1');
  }
}
