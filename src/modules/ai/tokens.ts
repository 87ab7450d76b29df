import { Tiktoken } from 'js-tiktoken/lite';
import { normaliseModel } from './models.js';
import type { Output } from './sse.js';

/**
 * Counting tokens before an AI call (the hold; chat prompts in prompt.ts) and after a stream that
 * reported no usage (the estimate). js-tiktoken with the encoding of the model's family; models of other providers
 * are counted with o200k_base: the hold is an estimate, the settle uses the provider's own count.
 */

type Encoding = 'o200k_base' | 'cl100k_base';

const encoders = new Map<Encoding, Tiktoken>();
const loading = new Map<Encoding, Promise<void>>();

/** GPT-4 (not 4o/4.1), GPT-3.5 and the embedding models use cl100k_base; everything newer o200k_base. */
export function encodingOf(model: string): Encoding {
  const m = normaliseModel(model);
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

/**
 * Runs the tokenizer would take as one piece and that are long enough to matter: letters and marks
 * (o200k_base's words take combining marks, Devanagari's vowel signs among them), or symbols, or
 * whitespace, or newlines and slashes (o200k_base ends a run of symbols with any of them), of one
 * kind. js-tiktoken's byte-pair merge is quadratic in a piece's length (a run of 16,000 `a`s took 30 s
 * of the event loop, 16,000 characters of `a` and a combining accent 16 s; a megabyte would take
 * hours), and a caller chooses the prompt, and can ask a model to answer such a run. The counting
 * workers (count-workers.ts) build the same expressions from these sources.
 */
export const LONG_RUN = /[\p{L}\p{M}]{17,}|[^\s\p{L}\p{N}]{17,}|\s{17,}|[\r\n/]{17,}/gu;
/** A text this short is encoded whole: exact, and a piece this short costs little. */
export const SHORT_TEXT = 64;
/** A long run is counted in pieces of this many characters: linear, at most a token more per piece. */
export const RUN_PIECE = /[\s\S]{1,8}/gu;

/**
 * Tokens of a text by the model's encoding (docs/ai-proxy.md, Bounds: counting): exact, but in a text
 * of more than SHORT_TEXT characters for a run over 16 characters of letters and marks, of symbols,
 * of whitespace or of newlines and slashes (the tokenizer's single piece), which is counted in pieces
 * of 8 characters. No prose, code or JSON has such runs; data that does is counted a little high,
 * never low. Synchronous, on the caller's thread: the texts of a request past SYNC_COUNT_BYTES are
 * counted by the workers of count-workers.ts instead, which run this same loop (a copy in their
 * source; count-workers.unit.test.ts holds the two equal).
 */
export function countText(model: string, text: string): number {
  if (text === '') return 0;
  const enc = encoder(model);
  const encode = (part: string) => (part === '' ? 0 : enc.encode(part, [], []).length);
  if (text.length <= SHORT_TEXT) return encode(text);
  let tokens = 0;
  let last = 0;
  for (const run of text.matchAll(LONG_RUN)) {
    tokens += encode(text.slice(last, run.index));
    for (const [piece] of run[0].matchAll(RUN_PIECE)) tokens += encode(piece);
    last = run.index + run[0].length;
  }
  return tokens + encode(text.slice(last));
}

/** Tokens of output: its text by the tokenizer, plus one per byte of what the proxy cannot read (sse.ts addContent). */
export function countOutput(model: string, output: Output): number {
  return countText(model, output.text) + output.unreadable;
}

/**
 * Input tokens of an embeddings request: a string, strings, token ids or arrays of token ids. `text`
 * counts a string (count-workers.ts passes one that collects them, to count them all at once).
 */
export function countEmbeddingInput(model: string, input: unknown, text: (s: string) => number = (s) => countText(model, s)): number {
  if (typeof input === 'string') return text(input);
  if (!Array.isArray(input)) return 0;
  let n = 0;
  for (const item of input) {
    if (typeof item === 'string') n += text(item);
    else if (typeof item === 'number') n += 1;
    else if (Array.isArray(item)) n += item.length;
  }
  return n;
}
