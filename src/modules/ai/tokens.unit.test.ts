import { beforeAll, describe, expect, it } from 'vitest';
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

  it('never throws on text that spells a special token', () => {
    expect(countText('gpt-4o', 'a <|endoftext|> b')).toBeGreaterThan(3);
  });
});
