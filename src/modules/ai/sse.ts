/**
 * Server-sent events of an OpenAI-compatible stream, split as they arrive (docs/ai-proxy.md, Streaming:
 * chunk by chunk, never the whole answer). Each event is handed on as the exact text received, with its data
 * parsed once so the proxy can find the usage chunk and count streamed text.
 */

export interface SseEvent {
  /** The event as received, including its terminating blank line. */
  raw: string;
  /** The joined `data:` lines, or null for an event without data (a comment, a keep-alive). */
  data: string | null;
}

const BOUNDARY = /\r\n\r\n|\n\n|\r\r/;

export class SseSplitter {
  private buffer = '';
  private readonly decoder = new TextDecoder();

  /** Feed bytes; returns the events completed by them. */
  push(chunk: Uint8Array): SseEvent[] {
    this.buffer += this.decoder.decode(chunk, { stream: true });
    const events: SseEvent[] = [];
    for (;;) {
      const match = BOUNDARY.exec(this.buffer);
      if (!match) break;
      const end = match.index + match[0].length;
      const raw = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end);
      events.push({ raw, data: dataOf(raw.slice(0, match.index)) });
    }
    return events;
  }

  /** What is left when the stream ends: an event without its blank line (a cut stream), if any. */
  rest(): string {
    return this.buffer + this.decoder.decode();
  }
}

function dataOf(block: string): string | null {
  const lines: string[] = [];
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (line.startsWith('data:')) lines.push(line.slice(line.startsWith('data: ') ? 6 : 5));
  }
  return lines.length === 0 ? null : lines.join('\n');
}

export interface ProviderUsage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** The most tokens a provider may report for one count (docs/ai-proxy.md, Bounds: reported usage). */
export const MAX_REPORTED_TOKENS = 2 ** 31;

/**
 * What the provider reported: `none` (no usage object: the call is estimated), `ok`, or `invalid` (a
 * count that is not an integer 0 ≤ n ≤ 2³¹: the call settles at its hold and the report is logged).
 */
export type ReportedUsage = { kind: 'none' } | { kind: 'ok'; usage: ProviderUsage } | { kind: 'invalid'; reported: unknown };

export function readUsage(value: unknown): ReportedUsage {
  if (value === undefined || value === null) return { kind: 'none' };
  if (typeof value !== 'object' || Array.isArray(value)) return { kind: 'invalid', reported: value };
  const u = value as Record<string, unknown>;
  const prompt = u.prompt_tokens;
  const completion = u.completion_tokens ?? 0;
  const total = u.total_tokens ?? 0;
  if (!isCount(prompt) || !isCount(completion) || !isCount(total)) return { kind: 'invalid', reported: value };
  return { kind: 'ok', usage: { prompt_tokens: prompt, completion_tokens: completion } };
}

/**
 * The Responses API's usage (`input_tokens`, `output_tokens`, `total_tokens`), in the chat's terms. Its
 * `output_tokens_details.reasoning_tokens` are a breakdown of `output_tokens` (already in them): a
 * report whose reasoning tokens exceed its output tokens is not a breakdown, so it settles at the hold
 * like any other count that cannot be right (docs/ai-proxy.md, Responses API).
 */
export function readResponsesUsage(value: unknown): ReportedUsage {
  if (value === undefined || value === null) return { kind: 'none' };
  if (typeof value !== 'object' || Array.isArray(value)) return { kind: 'invalid', reported: value };
  const u = value as Record<string, unknown>;
  const input = u.input_tokens;
  const output = u.output_tokens ?? 0;
  const total = u.total_tokens ?? 0;
  const reasoning = (u.output_tokens_details as { reasoning_tokens?: unknown } | null | undefined)?.reasoning_tokens ?? 0;
  if (!isCount(input) || !isCount(output) || !isCount(total) || !isCount(reasoning) || reasoning > output) return { kind: 'invalid', reported: value };
  return { kind: 'ok', usage: { prompt_tokens: input, completion_tokens: output } };
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_REPORTED_TOKENS;
}

/**
 * What a tool call carries that the model wrote: every string in it but its id, type and the tool's
 * name — a function call's `arguments`, a custom tool call's `input`, and whatever a later kind of
 * call carries. Counting only `function.arguments` let a custom tool call's input go uncounted: a
 * stream of it was neither capped at the allowance nor charged when the provider sent no usage.
 */
function toolCallText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (!value || typeof value !== 'object') return '';
  let text = '';
  for (const [k, v] of Object.entries(value)) if (k !== 'id' && k !== 'type' && k !== 'name') text += toolCallText(v);
  return text;
}

/** The text a chat chunk or completion carries (content, refusals, reasoning, what tool calls carry). */
export function textOfChoices(choices: unknown, key: 'delta' | 'message'): string {
  if (!Array.isArray(choices)) return '';
  let text = '';
  for (const choice of choices) {
    const part = (choice as Record<string, unknown> | null)?.[key] as Record<string, unknown> | undefined;
    if (!part || typeof part !== 'object') continue;
    for (const field of ['content', 'refusal', 'reasoning_content', 'reasoning']) {
      if (typeof part[field] === 'string') text += part[field];
    }
    if (Array.isArray(part.tool_calls)) for (const call of part.tool_calls) text += toolCallText(call);
    const fn = (part.function_call as { arguments?: unknown } | undefined)?.arguments;
    if (typeof fn === 'string') text += fn;
  }
  return text;
}
