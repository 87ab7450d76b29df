import type { Config } from '../../config.js';
import { AppError } from '../../errors.js';
import { countTexts } from './count-workers.js';
import { type Detail, imageRuleOf, imageSize, imageTokens } from './images.js';
import { countText } from './tokens.js';

/**
 * The prompt hold of a chat or Responses request: an upper bound of what the provider can bill for its input
 * (docs/ai-proxy.md, Bounds: the prompt hold). Text is counted the OpenAI cookbook way (3 per message,
 * its strings, 1 per name, 3 priming the reply); tool and function definitions, tool calls, the
 * response format and the `prediction` are counted as their text; images by their family's rule; audio
 * and inline files by AI_BYTES_PER_TOKEN_BOUND or refused; anything the proxy cannot bound is refused
 * naming the part, before anything is held.
 */

export type PromptConfig = Pick<Config, 'aiImageMaxTokens' | 'aiBytesPerTokenBound'>;

/** What counting a prompt needs: its bounds, its model, and how a text is counted. */
interface Counting {
  config: PromptConfig;
  model: string;
  text: (text: string) => number;
}

/** Each text counted at once, on the event loop. */
function counting(config: PromptConfig, model: string): Counting {
  return { config, model, text: (text) => countText(model, text) };
}

/**
 * The same count with the texts collected first, then counted together by countTexts: on the event
 * loop when they are small, else in a worker (docs/ai-proxy.md, Bounds: counting off the event loop).
 * Every refusal of a part comes before any text is counted.
 */
async function countCollected(config: PromptConfig, model: string, count: (c: Counting) => number, organizationId?: string): Promise<number> {
  const texts: string[] = [];
  const rest = count({
    config,
    model,
    text: (text) => {
      texts.push(text);
      return 0;
    },
  });
  return rest + (await countTexts(model, texts, 'prompt', organizationId));
}

/** 400 INVALID_REQUEST naming the field or part (flat shape with `param`). */
export function invalidRequest(param: string, message: string): AppError {
  return new AppError('INVALID_REQUEST', `${param} ${message}`, { param });
}

/** Message fields counted on their own below; any other is counted as its JSON (a provider may render it). */
const MESSAGE_FIELDS = new Set(['role', 'content', 'name', 'tool_calls', 'function_call', 'tool_call_id', 'refusal', 'audio']);

export function countChatPromptBound(config: PromptConfig, model: string, body: Record<string, unknown>): number {
  return chatPrompt(counting(config, model), body);
}

/** countChatPromptBound, a large prompt counted off the event loop (countCollected). */
export function countChatPromptBoundAsync(config: PromptConfig, model: string, body: Record<string, unknown>, organizationId?: string): Promise<number> {
  return countCollected(config, model, (c) => chatPrompt(c, body), organizationId);
}

function chatPrompt(c: Counting, body: Record<string, unknown>): number {
  let n = 3;
  const messages = body.messages as Array<Record<string, unknown>>;
  messages.forEach((message, i) => {
    n += countMessage(c, message, `messages[${i}]`);
  });
  n += countJsonFields(c, body, ['tools', 'functions', 'response_format', 'tool_choice']);
  n += countPrediction(c, body.prediction);
  return n;
}

/** One message, the cookbook way (3, its strings, 1 per name), every other field as its JSON. */
function countMessage(c: Counting, message: Record<string, unknown>, at: string): number {
  let n = 3;
  for (const field of ['role', 'tool_call_id', 'refusal'] as const) {
    if (typeof message[field] === 'string') n += c.text(message[field]);
  }
  n += countContent(c, message.content, `${at}.content`);
  if (typeof message.name === 'string') n += c.text(message.name) + 1;
  for (const field of ['tool_calls', 'function_call'] as const) {
    if (message[field] !== undefined && message[field] !== null) n += c.text(JSON.stringify(message[field]));
  }
  // A reference to an earlier audio answer: the provider replays audio the proxy never saw.
  if (message.audio !== undefined && message.audio !== null) throw invalidRequest(`${at}.audio`, 'refers to stored audio, which the proxy cannot count before the call');
  for (const [field, value] of Object.entries(message)) {
    if (!MESSAGE_FIELDS.has(field) && value !== undefined && value !== null) n += c.text(typeof value === 'string' ? value : JSON.stringify(value));
  }
  return n;
}

/** Definitions and formats the provider renders into the prompt: their JSON (a string value is a mode word, counted nowhere). */
function countJsonFields(c: Counting, body: Record<string, unknown>, fields: readonly string[]): number {
  let n = 0;
  for (const field of fields) {
    const value = body[field];
    if (value !== undefined && value !== null && typeof value !== 'string') n += c.text(JSON.stringify(value));
  }
  return n;
}

/**
 * The prompt hold of a Responses API request (docs/ai-proxy.md, Responses API), by the same rule as a
 * chat's: `instructions` and a string `input` are a message each; input messages are counted as chat
 * messages (their parts by the same part rules); tool calls, tool outputs and reasoning items passed
 * back as their text; `tools`, `tool_choice` and `text` (the JSON schema of `text.format`) as their JSON.
 * Items that refer to what the provider stored (`item_reference`) or that only hosted tools make are
 * refused naming the item.
 */
export function countResponsesPromptBound(config: PromptConfig, model: string, body: Record<string, unknown>): number {
  return responsesPrompt(counting(config, model), body);
}

/** countResponsesPromptBound, a large prompt counted off the event loop (countCollected). */
export function countResponsesPromptBoundAsync(config: PromptConfig, model: string, body: Record<string, unknown>, organizationId?: string): Promise<number> {
  return countCollected(config, model, (c) => responsesPrompt(c, body), organizationId);
}

function responsesPrompt(c: Counting, body: Record<string, unknown>): number {
  let n = 3;
  if (typeof body.instructions === 'string') n += countMessage(c, { role: 'developer', content: body.instructions }, 'instructions');
  const input = body.input;
  if (typeof input === 'string') n += countMessage(c, { role: 'user', content: input }, 'input');
  else if (Array.isArray(input)) {
    input.forEach((item, i) => {
      n += countInputItem(c, (item ?? {}) as Record<string, unknown>, `input[${i}]`);
    });
  }
  n += countJsonFields(c, body, ['tools', 'tool_choice', 'text']);
  return n;
}

function countInputItem(c: Counting, item: Record<string, unknown>, at: string): number {
  const { type, ...rest } = item;
  switch (type ?? (typeof item.role === 'string' ? 'message' : undefined)) {
    case 'message':
      return countMessage(c, rest, at);
    case 'function_call_output':
    case 'custom_tool_call_output': {
      const { output, ...meta } = rest;
      return 3 + c.text(JSON.stringify(meta)) + countContent(c, output, `${at}.output`);
    }
    case 'function_call':
    case 'custom_tool_call':
    // Summaries and encrypted reasoning passed back: the ciphertext, base64, is longer than the reasoning it holds.
    case 'reasoning':
      return 3 + c.text(JSON.stringify(rest));
    case 'item_reference':
      throw invalidRequest(at, 'refers to a stored item, which the proxy cannot count before the call (nothing is stored: send the item itself)');
    default:
      throw invalidRequest(`${at}.type`, `"${String(type)}" is not an input item the proxy can count (message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning)`);
  }
}

/** Predicted output (`prediction: {type: "content", content}`): the provider reads all of it. */
function countPrediction(c: Counting, prediction: unknown): number {
  if (prediction === undefined || prediction === null) return 0;
  if (typeof prediction !== 'object') throw invalidRequest('prediction', 'must be an object {type: "content", content}');
  const content = (prediction as { content?: unknown }).content;
  if (typeof content === 'string' || Array.isArray(content)) return countContent(c, content, 'prediction.content');
  return c.text(JSON.stringify(prediction));
}

function countContent(c: Counting, content: unknown, at: string): number {
  if (typeof content === 'string') return c.text(content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  content.forEach((part, j) => {
    n += countPart(c, part as Record<string, unknown>, `${at}[${j}]`);
  });
  return n;
}

function countPart(c: Counting, p: Record<string, unknown>, at: string): number {
  const { config, model } = c;
  switch (p.type) {
    case 'text':
    case 'input_text':
    case 'output_text':
      return typeof p.text === 'string' ? c.text(p.text) : 0;
    case 'refusal':
      return typeof p.refusal === 'string' ? c.text(p.refusal) : 0;
    case 'image_url': {
      const { url, detail } = (p.image_url ?? {}) as { url?: unknown; detail?: unknown };
      return countImage(config, model, url, detail, `${at}.image_url.url`);
    }
    case 'input_image':
      if (p.file_id !== undefined && p.file_id !== null) throw invalidRequest(`${at}.file_id`, 'refers to a stored file, which the proxy cannot count before the call: send image_url');
      // `original` keeps the full resolution, billed by a rule the family tables here do not give.
      if (p.detail === 'original') throw invalidRequest(`${at}.detail`, '"original" is billed by a rule this server does not know: use low, high or auto');
      return countImage(config, model, p.image_url, p.detail, `${at}.image_url`);
    case 'input_file':
      return countResponsesFile(config, p, at);
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
      throw invalidRequest(
        `${at}.type`,
        `"${String(p.type)}" is not a content part the proxy can count (text, image_url, input_audio, file, refusal; input_text, output_text, input_image, input_file)`,
      );
  }
}

/** A Responses `input_file`: inline bytes by AI_BYTES_PER_TOKEN_BOUND; a stored file or one the provider fetches is refused. */
function countResponsesFile(config: PromptConfig, p: Record<string, unknown>, at: string): number {
  if (p.file_id !== undefined && p.file_id !== null) {
    throw invalidRequest(`${at}.file_id`, 'refers to a stored file, which the proxy cannot count before the call: send file_data');
  }
  if (p.file_url !== undefined && p.file_url !== null) {
    throw invalidRequest(`${at}.file_url`, 'is fetched by the provider, so the proxy cannot count it before the call: send file_data');
  }
  if (typeof p.file_data !== 'string') throw invalidRequest(`${at}.file_data`, 'must be the file, base64 or a data: URL');
  return countBytes(config, dataBytes(p.file_data).length, at, 'an inline file');
}

/** Held at bytes ÷ AI_BYTES_PER_TOKEN_BOUND, rounded up; refused without it (docs/ai-proxy.md). */
function countBytes(config: PromptConfig, bytes: number, at: string, what: string): number {
  if (config.aiBytesPerTokenBound === undefined) {
    throw invalidRequest(at, `is ${what}, which this server does not accept (AI_BYTES_PER_TOKEN_BOUND is not set)`);
  }
  return Math.ceil(bytes / config.aiBytesPerTokenBound);
}

function countImage(config: PromptConfig, model: string, url: unknown, detail: unknown, at: string): number {
  if (typeof url !== 'string') throw invalidRequest(at, 'must be a URL or a data: URL');
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
