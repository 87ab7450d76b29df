import fc from 'fast-check';
import { Tiktoken } from 'js-tiktoken/lite';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { COUNT_IDLE_MS, countInWorker, countTexts, countWorkersRunning, SYNC_COUNT_BYTES, setCountIdleMs } from './count-workers.js';
import { countText, loadEncodingFor } from './tokens.js';

/**
 * Large counts go to worker threads (docs/ai-proxy.md, Bounds: counting): a worker's count is the
 * event loop's count, for any text; small counts stay on the event loop.
 */
beforeAll(async () => {
  await Promise.all([loadEncodingFor('gpt-4o'), loadEncodingFor('gpt-4')]);
});
afterAll(() => setCountIdleMs(COUNT_IDLE_MS));

const until = async (what: string, done: () => boolean) => {
  for (const deadline = Date.now() + 10_000; !done(); ) {
    if (Date.now() > deadline) throw new Error(`not within 10 s: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

/** What each encoding takes as one long piece (letters and marks, symbols, whitespace, `/` and newlines), and what it does not. */
const RUN_UNITS = ['a', 'Ab', 'é', 'a\u0301', 'नमस्ते', '東', '😀', '\ud83d', '=', '/', '/\n', '\r\n', ' ', '\t', '9', "'s", '<|endoftext|>'];
const run = fc.tuple(fc.constantFrom(...RUN_UNITS), fc.integer({ min: 1, max: 1500 })).map(([unit, n]) => unit.repeat(n));
const piece = fc.oneof(fc.string({ unit: 'grapheme', maxLength: 200 }), fc.string({ unit: 'binary', maxLength: 100 }), fc.string({ maxLength: 200 }), run);
const text = fc.array(piece, { maxLength: 6 }).map((pieces) => pieces.join(''));

const sum = (model: string, texts: string[]) => texts.reduce((n, t) => n + countText(model, t), 0);

describe('counting in a worker', () => {
  it('a worker counts what the event loop counts: any texts, long runs, unicode, both encodings', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('gpt-4o', 'gpt-4'), fc.array(text, { minLength: 1, maxLength: 4 }), async (model, texts) => {
        expect(await countInWorker(model, texts)).toBe(sum(model, texts));
      }),
      { numRuns: 150 },
    );
  });

  it('counts large texts through countTexts the same, prompt or output, and counts of both encodings at once', async () => {
    const prose = 'The quick brown fox jumps over the lazy dog. '.repeat(2000);
    const texts = [prose, 'a\u0301'.repeat(5000), '/\n'.repeat(5000), '東京は晴れ。'.repeat(3000), JSON.stringify({ items: Array.from({ length: 500 }, (_, i) => ({ id: i })) })];
    const [o200k, cl100k, output] = await Promise.all([countTexts('gpt-4o', texts, 'prompt'), countTexts('gpt-4', texts, 'prompt'), countTexts('gpt-4o', texts, 'output')]);
    expect(o200k).toBe(sum('gpt-4o', texts));
    expect(cl100k).toBe(sum('gpt-4', texts));
    expect(output).toBe(o200k);
  });

  it('small counts stay on the event loop and start no worker; a large one starts one, which ends when idle', async () => {
    setCountIdleMs(50);
    await until('idle workers end', () => countWorkersRunning() === 0);
    const half = 'hello world '.repeat(SYNC_COUNT_BYTES).slice(0, SYNC_COUNT_BYTES / 2);
    const small = [half, half];
    expect(Buffer.byteLength(small.join(''))).toBe(SYNC_COUNT_BYTES);
    expect(await countTexts('gpt-4o', small, 'prompt')).toBe(sum('gpt-4o', small));
    expect(countWorkersRunning()).toBe(0);
    const large = [...small, 'x'];
    expect(await countTexts('gpt-4o', large, 'prompt')).toBe(sum('gpt-4o', large));
    expect(countWorkersRunning()).toBe(1);
    await until('the idle worker ends', () => countWorkersRunning() === 0);
  });

  it('hands the tokenizer no long piece of letters and combining marks or of slashes and newlines (quadratic in o200k_base)', () => {
    // 16,000 characters of `a` and a combining accent took 16 s whole; these take milliseconds in pieces.
    const original = Tiktoken.prototype.encode;
    const encode = vi.spyOn(Tiktoken.prototype, 'encode').mockImplementation(function (this: Tiktoken, text, ...rest) {
      if (text.length > 64) throw new Error(`a piece of ${text.length} characters handed to the tokenizer whole`);
      return original.call(this, text, ...rest);
    });
    try {
      for (const long of ['a\u0301'.repeat(100_000), 'नमस्ते'.repeat(30_000), '/\n'.repeat(100_000)]) {
        const counted = countText('gpt-4o', long);
        expect(counted).toBeGreaterThan(0);
        expect(counted).toBeLessThanOrEqual(Buffer.byteLength(long));
      }
    } finally {
      encode.mockRestore();
    }
  });
});
