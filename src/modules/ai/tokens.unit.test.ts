import { Tiktoken } from 'js-tiktoken/lite';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { countChatPromptTokens } from '../../../test/ai-stand-in/index.js';
import { DEFAULT_IMAGE_MAX_TOKENS } from '../../config.js';
import { countChatPromptBound } from './prompt.js';
import { countEmbeddingInput, countText, encodingOf, loadEncodingFor } from './tokens.js';

const bounds = { aiImageMaxTokens: DEFAULT_IMAGE_MAX_TOKENS, aiBytesPerTokenBound: undefined };
const countChatPrompt = (model: string, body: Record<string, unknown>) => countChatPromptBound(bounds, model, body);

/** The hold counts the prompt before the call; with OpenAI's own formula it matches what OpenAI reports. */
beforeAll(async () => {
  await Promise.all([loadEncodingFor('gpt-4o'), loadEncodingFor('gpt-4')]);
});

describe('token counting', () => {
  it('picks the encoding of the model family', () => {
    expect(encodingOf('gpt-4o-mini')).toBe('o200k_base');
    expect(encodingOf('gpt-4.1-nano')).toBe('o200k_base');
    expect(encodingOf('o3-mini')).toBe('o200k_base');
    expect(encodingOf('gpt-4-turbo')).toBe('cl100k_base');
    expect(encodingOf('gpt-3.5-turbo')).toBe('cl100k_base');
    expect(encodingOf('text-embedding-3-small')).toBe('cl100k_base');
    expect(encodingOf('llama-3.1-70b')).toBe('o200k_base');
  });

  it('counts chat prompts the OpenAI cookbook way', () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hello there', name: 'ann' },
    ];
    // The stand-in implements the cookbook formula independently.
    expect(countChatPrompt('gpt-4o', { messages })).toBe(countChatPromptTokens(messages));
    expect(countText('gpt-4o', 'hello world')).toBe(2);
  });

  it('counts text parts, images and tool definitions', () => {
    const text = { messages: [{ role: 'user', content: [{ type: 'text', text: 'describe' }] }] };
    const base = countChatPrompt('gpt-4o', text);
    const withImage = { messages: [{ role: 'user', content: [{ type: 'text', text: 'describe' }, { type: 'image_url', image_url: { url: 'https://x/y.png' } }] }] };
    // By URL: never fetched, held at the family's most (85 + 8 tiles × 170; docs/ai-proxy.md).
    expect(countChatPrompt('gpt-4o', withImage)).toBe(base + 1445);
    const low = { messages: [{ role: 'user', content: [{ type: 'text', text: 'describe' }, { type: 'image_url', image_url: { url: 'u', detail: 'low' } }] }] };
    expect(countChatPrompt('gpt-4o', low)).toBe(base + 85);
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } }];
    expect(countChatPrompt('gpt-4o', { ...text, tools })).toBe(base + countText('gpt-4o', JSON.stringify(tools)));
  });

  it('counts embedding inputs: strings by the tokenizer, token ids by their number', () => {
    expect(countEmbeddingInput('text-embedding-3-small', 'hello world')).toBe(countText('text-embedding-3-small', 'hello world'));
    expect(countEmbeddingInput('text-embedding-3-small', ['a', 'b'])).toBe(2);
    expect(countEmbeddingInput('text-embedding-3-small', [1, 2, 3])).toBe(3);
    expect(countEmbeddingInput('text-embedding-3-small', [[1, 2], [3]])).toBe(3);
  });

  it('counts prose, code and JSON exactly as the tokenizer does', () => {
    const plain = new Tiktoken(o200k);
    const samples = [
      'The quick brown fox jumps over the lazy dog. '.repeat(40),
      'function add(a, b) {\n    return a + b;\n}\n'.repeat(30),
      JSON.stringify({ items: Array.from({ length: 60 }, (_, i) => ({ id: `item-${i}`, tags: ['alpha', 'beta'], score: i / 7 })) }),
      'Donaudampfschiff fährt über die Elbe; naïve café — 東京は晴れ。'.repeat(20),
    ];
    for (const text of samples) expect(countText('gpt-4o', text)).toBe(plain.encode(text, [], []).length);
  });

  it('hands the tokenizer no long piece: a long run of one letter, symbol or space is counted in pieces, never below it', () => {
    // Byte-pair merging is quadratic in a piece's length: a run of 16,000 letters took 30 s of the event
    // loop, a megabyte hours. What the tokenizer is given is observed (it still does the counting).
    const plain = new Tiktoken(o200k);
    const original = Tiktoken.prototype.encode;
    // A long piece fails at once rather than running for hours.
    const encode = vi.spyOn(Tiktoken.prototype, 'encode').mockImplementation(function (this: Tiktoken, text, ...rest) {
      const run = /\p{L}{65,}|[^\s\p{L}\p{N}]{65,}|\s{65,}/u.exec(text);
      if (run) throw new Error(`a run of ${run[0].length} characters handed to the tokenizer whole`);
      return original.call(this, text, ...rest);
    });
    try {
      for (const run of ['a'.repeat(200_000), ' '.repeat(200_000), '='.repeat(200_000), 'Ab'.repeat(100_000)]) {
        const counted = countText('gpt-4o', `start ${run} end`);
        expect(counted).toBeGreaterThanOrEqual(original.call(plain, run.slice(0, 2000), [], []).length * 100);
        expect(counted).toBeLessThanOrEqual(Buffer.byteLength(run) + 10);
      }
    } finally {
      encode.mockRestore();
    }
  });

  it('never throws on text that spells a special token', () => {
    expect(countText('gpt-4o', 'a <|endoftext|> b')).toBeGreaterThan(3);
  });
});
