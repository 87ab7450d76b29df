import { describe, expect, it } from 'vitest';
import { readResponsesUsage, readUsage, SseSplitter, textOfChoices } from './sse.js';

/** The proxy hands events on as they complete, whatever the byte boundaries of the provider's writes. */
describe('SseSplitter', () => {
  const bytes = (s: string) => new TextEncoder().encode(s);

  it('hands on each complete event, byte for byte, however the bytes are cut', () => {
    const stream = 'data: {"a":1}\n\n: keep-alive\n\ndata: line one\ndata: line two\n\ndata: [DONE]\n\n';
    for (let cut = 1; cut < stream.length; cut++) {
      const splitter = new SseSplitter();
      const events = [...splitter.push(bytes(stream.slice(0, cut))), ...splitter.push(bytes(stream.slice(cut)))];
      expect(events.map((e) => e.raw).join('')).toBe(stream);
      expect(events.map((e) => e.data)).toEqual(['{"a":1}', null, 'line one\nline two', '[DONE]']);
      expect(splitter.rest()).toBe('');
    }
  });

  it('understands CRLF line ends and keeps a multi-byte character cut between writes whole', () => {
    const splitter = new SseSplitter();
    const all = bytes('data: {"t":"é"}\r\n\r\n');
    const events = [...splitter.push(all.slice(0, 13)), ...splitter.push(all.slice(13))];
    expect(events).toEqual([{ raw: 'data: {"t":"é"}\r\n\r\n', data: '{"t":"é"}' }]);
  });

  it('leaves an unfinished event as the rest (a cut stream)', () => {
    const splitter = new SseSplitter();
    expect(splitter.push(bytes('data: {"a":1}\n\ndata: {"b"'))).toHaveLength(1);
    expect(splitter.rest()).toBe('data: {"b"');
  });
});

describe('readUsage and textOfChoices', () => {
  it('takes only integer token counts 0 ≤ n ≤ 2³¹ as usage; no usage is "none", anything else "invalid"', () => {
    expect(readUsage({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 3, completion_tokens: 4 } });
    expect(readUsage({ prompt_tokens: 5 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 5, completion_tokens: 0 } });
    expect(readUsage({ prompt_tokens: 2 ** 31, completion_tokens: 0 })).toMatchObject({ kind: 'ok' });
    expect(readUsage(null)).toEqual({ kind: 'none' });
    expect(readUsage(undefined)).toEqual({ kind: 'none' });
    const bad = ['x', 7, [], {}, { prompt_tokens: -5 }, { prompt_tokens: 1.5 }, { prompt_tokens: '10' }, { prompt_tokens: 2 ** 40 }, { prompt_tokens: 1, completion_tokens: '2' }, { prompt_tokens: 1, completion_tokens: 2 ** 31 + 1 }, { prompt_tokens: 1, total_tokens: -1 }];
    for (const value of bad) expect(readUsage(value), JSON.stringify(value)).toEqual({ kind: 'invalid', reported: value });
  });

  it('collects content, refusals, reasoning and tool-call arguments of every choice', () => {
    const choices = [
      { delta: { content: 'a', reasoning_content: 'r' } },
      { delta: { refusal: 'no', tool_calls: [{ function: { arguments: '{"x"' } }, { function: { arguments: ':1}' } }] } },
      { delta: {} },
      null,
    ];
    expect(textOfChoices(choices, 'delta')).toBe('arno{"x":1}');
    // A custom tool call's input counts as output too; ids, types and the tool's name do not.
    const custom = [{ delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'custom', custom: { name: 'run', input: 'ls -la' } }] } }];
    expect(textOfChoices(custom, 'delta')).toBe('ls -la');
    expect(textOfChoices([{ message: { tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] } }], 'message')).toBe('{}');
    expect(textOfChoices([{ message: { content: 'whole' } }], 'message')).toBe('whole');
    expect(textOfChoices('nope', 'delta')).toBe('');
  });
});

/** docs/ai-proxy.md, Responses API: usage in the Responses API's terms, reasoning tokens a breakdown of output tokens. */
describe('readResponsesUsage', () => {
  it('reads input and output tokens; reasoning tokens are already in the output tokens', () => {
    const usage = { input_tokens: 12, input_tokens_details: { cached_tokens: 4 }, output_tokens: 30, output_tokens_details: { reasoning_tokens: 25 }, total_tokens: 42 };
    expect(readResponsesUsage(usage)).toEqual({ kind: 'ok', usage: { prompt_tokens: 12, completion_tokens: 30 } });
    expect(readResponsesUsage(null)).toEqual({ kind: 'none' });
  });

  it('a count that cannot be right is invalid (settled at the hold)', () => {
    for (const usage of [
      { input_tokens: -1, output_tokens: 1 },
      { input_tokens: 1, output_tokens: 1.5 },
      { input_tokens: '3', output_tokens: 1 },
      { input_tokens: 1, output_tokens: 1, total_tokens: 2 ** 40 },
      { input_tokens: 1, output_tokens: 2, output_tokens_details: { reasoning_tokens: 3 } },
      { prompt_tokens: 1, completion_tokens: 1 },
      [1, 2],
    ]) {
      expect(readResponsesUsage(usage).kind, JSON.stringify(usage)).toBe('invalid');
    }
  });
});
