import { beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../errors.js';
import { testConfig } from '../../config.js';
import { askedAllowance, checkFields, OutputMeter, REQUEST_FIELDS, upstreamChatBody } from './bounds.js';
import { countChatPromptBound } from './prompt.js';
import { countText, loadEncodingFor } from './tokens.js';

/** docs/ai-proxy.md, Bounds: fields, the prompt hold, the output allowance and where it goes. */
beforeAll(() => loadEncodingFor('gpt-4o'));

const config = testConfig();
const messages = [{ role: 'user', content: 'hi' }];

function refusal(fn: () => unknown): { param: string; message: string } {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('INVALID_REQUEST');
    return { param: (err as AppError).extra.param as string, message: (err as AppError).message };
  }
  throw new Error('not refused');
}

describe('checkFields', () => {
  it('refuses every field outside the reference, naming it; vendor cost multipliers among them', () => {
    for (const field of ['best_of', 'min_tokens', 'ignore_eos', 'max_new_tokens', 'options', 'use_beam_search', 'max_output_tokens']) {
      const { param, message } = refusal(() => checkFields(config, 'chat', { model: 'gpt-4o', messages, [field]: 5 }));
      expect(param).toBe(field);
      expect(message).toContain(field);
    }
    expect(refusal(() => checkFields(config, 'embeddings', { model: 'e', input: 'x', truncate_prompt_tokens: 1 })).param).toBe('truncate_prompt_tokens');
  });

  it('passes every field of the reference, and what AI_EXTRA_FIELDS lists', () => {
    const body = Object.fromEntries(REQUEST_FIELDS.chat.map((f) => [f, null]));
    expect(() => checkFields(config, 'chat', body)).not.toThrow();
    expect(() => checkFields(config, 'embeddings', { input: 'x', model: 'e', dimensions: 8, encoding_format: 'float', user: 'u' })).not.toThrow();
    expect(() => checkFields(testConfig({ aiExtraFields: ['best_of'] }), 'chat', { model: 'm', messages, best_of: 3 })).not.toThrow();
  });

  it('audio output and the dearer service tiers need their field listed', () => {
    expect(refusal(() => checkFields(config, 'chat', { model: 'm', messages, modalities: ['text', 'audio'] })).param).toBe('modalities');
    expect(refusal(() => checkFields(config, 'chat', { model: 'm', messages, audio: { voice: 'alloy', format: 'wav' } })).param).toBe('audio');
    expect(refusal(() => checkFields(config, 'chat', { model: 'm', messages, service_tier: 'priority' })).param).toBe('service_tier');
    expect(() => checkFields(config, 'chat', { model: 'm', messages, modalities: ['text'], service_tier: 'flex' })).not.toThrow();
    const audio = testConfig({ aiExtraFields: ['audio', 'service_tier'] });
    expect(() => checkFields(audio, 'chat', { model: 'm', messages, modalities: ['text', 'audio'], audio: {}, service_tier: 'priority' })).not.toThrow();
  });
});

describe('the output allowance', () => {
  it('is the smallest limit the caller named, else AI_MAX_OUTPUT_TOKENS', () => {
    expect(askedAllowance(config, {})).toBe(4096);
    expect(askedAllowance(config, { max_tokens: 50, max_completion_tokens: 30 })).toBe(30);
    expect(askedAllowance(config, { max_completion_tokens: 9, max_output_tokens: 7 })).toBe(7);
    expect(askedAllowance(config, { max_tokens: null, max_output_tokens: 'lots' })).toBe(4096);
  });

  it('a chat model always gets max_tokens, and every limit field it sent, set to the allowance', () => {
    expect(upstreamChatBody(config, { model: 'gpt-4o', messages, max_completion_tokens: 900 }, 100)).toMatchObject({ max_tokens: 100, max_completion_tokens: 100 });
    expect(upstreamChatBody(config, { model: 'llama3', messages }, 100)).toEqual({ model: 'llama3', messages, max_tokens: 100 });
    expect(upstreamChatBody(config, { model: 'm', messages, max_output_tokens: 5000 }, 100)).toMatchObject({ max_tokens: 100, max_output_tokens: 100 });
  });

  it('a reasoning model gets it only as max_completion_tokens', () => {
    const out = upstreamChatBody(config, { model: 'openai/o3', messages, max_tokens: 900 }, 100);
    expect(out).toMatchObject({ max_completion_tokens: 100 });
    expect(out).not.toHaveProperty('max_tokens');
  });

  it('a stream asks for usage, keeping the caller\'s stream options', () => {
    expect(upstreamChatBody(config, { model: 'm', messages, stream: true, stream_options: { include_obfuscation: false } }, 1).stream_options).toEqual({
      include_obfuscation: false,
      include_usage: true,
    });
  });

  it('the meter admits output up to the limit and nothing that would pass it', () => {
    const meter = new OutputMeter('gpt-4o', 3);
    expect(meter.admit(' one two')).toBe(true);
    expect(meter.admit(' three four')).toBe(false);
    expect(meter.admit(' three')).toBe(true);
    expect(meter.count).toBe(3);
    expect(meter.admit(' x')).toBe(false);
  });
});

describe('the prompt hold counts every part', () => {
  const count = (body: Record<string, unknown>, c = config) => countChatPromptBound(c, 'gpt-4o', body);
  const user = (content: unknown) => ({ messages: [{ role: 'user', content }] });
  let base = 0;
  beforeAll(() => {
    base = count(user([{ type: 'text', text: 'x' }]));
  });

  it('the prediction, tool definitions and tool choice, and unknown message fields', () => {
    const prediction = 'const x = 1;\n'.repeat(100);
    expect(count({ ...user([{ type: 'text', text: 'x' }]), prediction: { type: 'content', content: prediction } })).toBe(base + countText('gpt-4o', prediction));
    const parts = [{ type: 'text', text: prediction }];
    expect(count({ ...user([{ type: 'text', text: 'x' }]), prediction: { type: 'content', content: parts } })).toBe(base + countText('gpt-4o', prediction));
    const tool_choice = { type: 'function', function: { name: 'lookup' } };
    expect(count({ ...user([{ type: 'text', text: 'x' }]), tool_choice })).toBe(base + countText('gpt-4o', JSON.stringify(tool_choice)));
    const withExtra = { messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }], reasoning_content: 'long thoughts' }] };
    expect(count(withExtra)).toBe(base + countText('gpt-4o', 'long thoughts'));
  });

  it('audio and inline files: refused naming the part without AI_BYTES_PER_TOKEN_BOUND, else bytes ÷ bound rounded up', () => {
    const audio = { type: 'input_audio', input_audio: { data: Buffer.alloc(1001).toString('base64'), format: 'wav' } };
    const file = { type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${Buffer.alloc(999).toString('base64')}` } };
    expect(refusal(() => count(user([{ type: 'text', text: 'x' }, audio]))).param).toBe('messages[0].content[1]');
    expect(refusal(() => count(user([file]))).param).toBe('messages[0].content[0]');
    const bounded = testConfig({ aiBytesPerTokenBound: 10 });
    expect(count(user([{ type: 'text', text: 'x' }, audio]), bounded)).toBe(base + 101);
    expect(count(user([{ type: 'text', text: 'x' }, file]), bounded)).toBe(base + 100);
  });

  it('file_id, stored audio and unknown part types are always refused', () => {
    const bounded = testConfig({ aiBytesPerTokenBound: 1 });
    expect(refusal(() => count(user([{ type: 'file', file: { file_id: 'file-abc' } }]), bounded)).param).toBe('messages[0].content[0].file.file_id');
    expect(refusal(() => count({ messages: [{ role: 'assistant', audio: { id: 'audio_1' } }] }, bounded)).param).toBe('messages[0].audio');
    expect(refusal(() => count(user([{ type: 'video_url', video_url: { url: 'https://x/v.mp4' } }]), bounded)).param).toBe('messages[0].content[0].type');
  });

  it('an image of a family without a rule holds AI_IMAGE_MAX_TOKENS', () => {
    const image = { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'low' } };
    const text = countChatPromptBound(config, 'llava', user([{ type: 'text', text: 'x' }]));
    expect(countChatPromptBound(config, 'llava', user([{ type: 'text', text: 'x' }, image]))).toBe(text + config.aiImageMaxTokens);
    expect(countChatPromptBound(testConfig({ aiImageMaxTokens: 3000 }), 'llava', user([{ type: 'text', text: 'x' }, image]))).toBe(text + 3000);
  });
});
