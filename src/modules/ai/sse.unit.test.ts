import { describe, expect, it } from 'vitest';
import { outputOfChoices, readEmbeddingsUsage, readResponsesUsage, readUsage, SseSplitter, textOfChoices } from './sse.js';

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
    expect(readUsage({ prompt_tokens: 2 ** 31, completion_tokens: 0 })).toMatchObject({ kind: 'ok' });
    expect(readUsage(null)).toEqual({ kind: 'none' });
    expect(readUsage(undefined)).toEqual({ kind: 'none' });
    const bad = ['x', 7, [], {}, { prompt_tokens: -5 }, { prompt_tokens: 1.5 }, { prompt_tokens: '10' }, { prompt_tokens: 2 ** 40 }, { prompt_tokens: 1, completion_tokens: '2' }, { prompt_tokens: 1, completion_tokens: 2 ** 31 + 1 }, { prompt_tokens: 1, total_tokens: -1 }];
    for (const value of bad) expect(readUsage(value), JSON.stringify(value)).toEqual({ kind: 'invalid', reported: value });
  });

  it('bills total_tokens when it is more than prompt + completion, the excess as output', () => {
    // A gateway that reports a thinking model's thought tokens only in total_tokens.
    const report = { prompt_tokens: 10, completion_tokens: 20, total_tokens: 5030, completion_tokens_details: { reasoning_tokens: 5000 } };
    expect(readUsage(report)).toEqual({ kind: 'ok', usage: { prompt_tokens: 10, completion_tokens: 5020 } });
    expect(readUsage({ prompt_tokens: 10, completion_tokens: 20, total_tokens: 25 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 10, completion_tokens: 20 } });
    expect(readUsage({ prompt_tokens: 10, completion_tokens: 20 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 10, completion_tokens: 20 } });
    expect(readUsage({ prompt_tokens: 10, completion_tokens: 20, completion_tokens_details: null })).toMatchObject({ kind: 'ok' });
    expect(readResponsesUsage({ input_tokens: 10, output_tokens: 20, total_tokens: 4030 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 10, completion_tokens: 4020 } });
    expect(readEmbeddingsUsage({ prompt_tokens: 8, total_tokens: 8 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 8, completion_tokens: 0 } });
    expect(readEmbeddingsUsage({ prompt_tokens: 8, total_tokens: 80 })).toEqual({ kind: 'ok', usage: { prompt_tokens: 8, completion_tokens: 72 } });
  });

  it('a missing or null output count is not 0 but invalid (settled at the hold), and so are reasoning tokens the output does not cover', () => {
    for (const value of [
      { prompt_tokens: 5 },
      { prompt_tokens: 10, completion_tokens: null, total_tokens: 30 },
      { prompt_tokens: 10, completion_tokens: 20, completion_tokens_details: { reasoning_tokens: 5000 } },
      { prompt_tokens: 10, completion_tokens: 20, completion_tokens_details: { reasoning_tokens: -1 } },
    ]) {
      expect(readUsage(value), JSON.stringify(value)).toEqual({ kind: 'invalid', reported: value });
    }
    for (const value of [{ input_tokens: 10, total_tokens: 30 }, { input_tokens: 10, output_tokens: null }]) expect(readResponsesUsage(value).kind, JSON.stringify(value)).toBe('invalid');
    expect(readEmbeddingsUsage({ total_tokens: 8 }).kind).toBe('invalid');
  });

  it('counts text sent as content parts (Mistral\'s text and thinking chunks), and what it cannot read as its JSON bytes', () => {
    const parts = [{ delta: { content: [{ type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] }, { type: 'text', text: ' yes' }] } }];
    expect(outputOfChoices(parts, 'delta')).toEqual({ text: 'hmm yes', unreadable: 0 });
    expect(textOfChoices([{ message: { content: [{ type: 'text', text: 'whole' }, 'more'] } }], 'message')).toBe('wholemore');
    // Content the proxy cannot read (an object, a number in place of parts) counts as the bytes of its JSON.
    expect(outputOfChoices([{ delta: { content: { kind: 'blob', data: 'AAAA' } } }], 'delta')).toEqual({ text: '', unreadable: JSON.stringify({ kind: 'blob', data: 'AAAA' }).length });
    expect(outputOfChoices([{ delta: { content: [7, { type: 'text', text: 'a' }] } }], 'delta')).toEqual({ text: 'a', unreadable: 1 });
    expect(outputOfChoices([{ delta: { role: 'assistant', content: '' } }], 'delta')).toEqual({ text: '', unreadable: 0 });
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
