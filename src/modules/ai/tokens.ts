import { Tiktoken } from 'js-tiktoken/lite';

/**
 * Counting tokens before an AI call (SPEC §6 AI proxy: the hold) and after a stream that reported no
 * usage (the estimate). js-tiktoken with the encoding of the model's family; models of other providers
 * are counted with o200k_base: the hold is an estimate, the settle uses the provider's own count.
 */

type Encoding = 'o200k_base' | 'cl100k_base';

const encoders = new Map<Encoding, Tiktoken>();
const loading = new Map<Encoding, Promise<void>>();

/** GPT-4 (not 4o/4.1), GPT-3.5 and the embedding models use cl100k_base; everything newer o200k_base. */
export function encodingOf(model: string): Encoding {
  const m = model.toLowerCase().replace(/^openai\//, '');
  if (/^(gpt-4o|gpt-4\.[1-9]|gpt-5|chatgpt-4o|o\d)/.test(m)) return 'o200k_base';
  if (/^(gpt-4|gpt-3\.5|text-embedding-)/.test(m)) return 'cl100k_base';
  return 'o200k_base';
}

/**
 * Load the encoding a model needs, once per process: its ranks take about a second to build, so the
 * app starts loading o200k_base when it is ready and the first call awaits what is not there yet.
 */
export function loadEncodingFor(model: string): Promise<void> {
  const name = encodingOf(model);
  let promise = loading.get(name);
  if (!promise) {
    promise = (name === 'o200k_base' ? import('js-tiktoken/ranks/o200k_base') : import('js-tiktoken/ranks/cl100k_base')).then(
      ({ default: ranks }) => {
        encoders.set(name, new Tiktoken(ranks));
      },
    );
    loading.set(name, promise);
  }
  return promise;
}

function encoder(model: string): Tiktoken {
  const enc = encoders.get(encodingOf(model));
  if (!enc) throw new Error(`the ${encodingOf(model)} encoding is not loaded: await loadEncodingFor(model) first`);
  return enc;
}

export function countText(model: string, text: string): number {
  return text === '' ? 0 : encoder(model).encode(text, [], []).length;
}

/** OpenAI's published estimate of an image part: 85 tokens at low detail, 765 for a 1024² image otherwise. */
const IMAGE_TOKENS = { low: 85, other: 765 } as const;

function countContent(model: string, content: unknown): number {
  if (typeof content === 'string') return countText(model, content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const part of content) {
    if (!part || typeof part !== 'object') continue;
    const p = part as Record<string, unknown>;
    if (typeof p.text === 'string') n += countText(model, p.text);
    else if (p.type === 'image_url') {
      const detail = (p.image_url as { detail?: unknown } | undefined)?.detail;
      n += detail === 'low' ? IMAGE_TOKENS.low : IMAGE_TOKENS.other;
    } else if (p.type === 'refusal' && typeof p.refusal === 'string') n += countText(model, p.refusal);
  }
  return n;
}

/**
 * Prompt tokens of a chat request, the OpenAI cookbook way: 3 per message, the message's strings, 1 more
 * for a name, 3 priming the reply; tool calls, tool and function definitions and a response format are
 * counted as their JSON, which OpenAI renders into the prompt in a similar size.
 */
export function countChatPrompt(model: string, body: Record<string, unknown>): number {
  let n = 3;
  for (const message of body.messages as Array<Record<string, unknown>>) {
    n += 3;
    if (typeof message.role === 'string') n += countText(model, message.role);
    n += countContent(model, message.content);
    if (typeof message.name === 'string') n += countText(model, message.name) + 1;
    if (message.tool_calls !== undefined) n += countText(model, JSON.stringify(message.tool_calls));
    if (message.function_call !== undefined) n += countText(model, JSON.stringify(message.function_call));
  }
  for (const field of ['tools', 'functions', 'response_format'] as const) {
    if (body[field] !== undefined && body[field] !== null) n += countText(model, JSON.stringify(body[field]));
  }
  return n;
}

/** Input tokens of an embeddings request: a string, strings, token ids or arrays of token ids. */
export function countEmbeddingInput(model: string, input: unknown): number {
  if (typeof input === 'string') return countText(model, input);
  if (!Array.isArray(input)) return 0;
  let n = 0;
  for (const item of input) {
    if (typeof item === 'string') n += countText(model, item);
    else if (typeof item === 'number') n += 1;
    else if (Array.isArray(item)) n += item.length;
  }
  return n;
}
