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
  /** The output billed: the reported output count, or what `total_tokens` says past the prompt when that is more. */
  completion_tokens: number;
}

/** The most tokens a provider may report for one count (docs/ai-proxy.md, Bounds: reported usage). */
export const MAX_REPORTED_TOKENS = 2 ** 31;

/**
 * What the provider reported: `none` (no usage object: the call is estimated), `ok`, or `invalid` (a
 * count that is not an integer 0 ≤ n ≤ 2³¹, or an output count missing: the call settles at its hold
 * and the report is logged).
 */
export type ReportedUsage = { kind: 'none' } | { kind: 'ok'; usage: ProviderUsage } | { kind: 'invalid'; reported: unknown };

/**
 * A usage object's counts, by their names on the route (docs/ai-proxy.md, Bounds: reported usage). The
 * input count is required, the output count too unless the route has no output (embeddings); a missing
 * or null one is not 0 but a report the proxy cannot read. `total_tokens` may be absent; when present it
 * is billed if it is more than input + output (a gateway that reports thinking tokens only there), the
 * excess counted as output. Reasoning tokens are a breakdown of the output: more of them than the output
 * billed is a report that cannot be right.
 */
function readCounts(value: unknown, input: string, output: string, details: string, outputRequired: boolean): ReportedUsage {
  if (value === undefined || value === null) return { kind: 'none' };
  if (typeof value !== 'object' || Array.isArray(value)) return { kind: 'invalid', reported: value };
  const u = value as Record<string, unknown>;
  const prompt = u[input];
  const completion = outputRequired ? u[output] : (u[output] ?? 0);
  const total = u.total_tokens ?? 0;
  const reasoning = (u[details] as { reasoning_tokens?: unknown } | null | undefined)?.reasoning_tokens ?? 0;
  if (!isCount(prompt) || !isCount(completion) || !isCount(total) || !isCount(reasoning)) return { kind: 'invalid', reported: value };
  const billed = Math.max(completion, total - prompt);
  if (reasoning > billed) return { kind: 'invalid', reported: value };
  return { kind: 'ok', usage: { prompt_tokens: prompt, completion_tokens: billed } };
}

/** A chat completion's usage (`prompt_tokens`, `completion_tokens`, `total_tokens`). */
export function readUsage(value: unknown): ReportedUsage {
  return readCounts(value, 'prompt_tokens', 'completion_tokens', 'completion_tokens_details', true);
}

/** An embeddings answer's usage: `prompt_tokens` and `total_tokens`, no output. */
export function readEmbeddingsUsage(value: unknown): ReportedUsage {
  return readCounts(value, 'prompt_tokens', 'completion_tokens', 'completion_tokens_details', false);
}

/**
 * The Responses API's usage (`input_tokens`, `output_tokens`, `total_tokens`), in the chat's terms. Its
 * `output_tokens_details.reasoning_tokens` are a breakdown of `output_tokens` (already in them): a
 * report whose reasoning tokens exceed its output tokens is not a breakdown, so it settles at the hold
 * like any other count that cannot be right (docs/ai-proxy.md, Responses API).
 */
export function readResponsesUsage(value: unknown): ReportedUsage {
  return readCounts(value, 'input_tokens', 'output_tokens', 'output_tokens_details', true);
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

/** Output the proxy relayed or received: the text it can count, and the bytes of what it cannot read. */
export interface Output {
  text: string;
  /** UTF-8 bytes of the JSON of content the proxy cannot read, each counted as a token (no token is shorter than a byte). */
  unreadable: number;
}

export const NO_OUTPUT: Output = { text: '', unreadable: 0 };

/** Every string in a content part but its `type` (`{type:'text', text}`, Mistral's `{type:'thinking', thinking:[…]}`). */
function partText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (!value || typeof value !== 'object') return '';
  let text = '';
  for (const [k, v] of Object.entries(value)) if (k !== 'type') text += partText(v);
  return text;
}

/**
 * Add one content field to `out` (docs/ai-proxy.md, Bounds: output allowance): a string; an array of
 * parts (every string in each part but its type: Mistral's text and thinking chunks); anything else,
 * and a part that is neither a string nor an object, is content the proxy cannot read and counts as the
 * bytes of its JSON. Reading only strings let text sent as parts pass the allowance and the estimate.
 */
export function addContent(out: Output, value: unknown): void {
  if (value === undefined || value === null) return;
  if (typeof value === 'string') {
    out.text += value;
    return;
  }
  if (!Array.isArray(value)) {
    out.unreadable += Buffer.byteLength(JSON.stringify(value));
    return;
  }
  for (const part of value) {
    if (typeof part === 'string' || (part && typeof part === 'object')) out.text += partText(part);
    else out.unreadable += Buffer.byteLength(JSON.stringify(part) ?? 'null');
  }
}

/** What a chat chunk or completion carries (content, refusals, reasoning, what tool calls carry). */
export function outputOfChoices(choices: unknown, key: 'delta' | 'message'): Output {
  const out: Output = { text: '', unreadable: 0 };
  if (!Array.isArray(choices)) return out;
  for (const choice of choices) {
    const part = (choice as Record<string, unknown> | null)?.[key] as Record<string, unknown> | undefined;
    if (!part || typeof part !== 'object') continue;
    for (const field of ['content', 'refusal', 'reasoning_content', 'reasoning']) addContent(out, part[field]);
    if (Array.isArray(part.tool_calls)) for (const call of part.tool_calls) out.text += toolCallText(call);
    const fn = (part.function_call as { arguments?: unknown } | undefined)?.arguments;
    if (typeof fn === 'string') out.text += fn;
  }
  return out;
}

/** The text of a chat chunk or completion (what /api/ai/generate hands on). */
export function textOfChoices(choices: unknown, key: 'delta' | 'message'): string {
  return outputOfChoices(choices, key).text;
}

export function hasOutput(output: Output): boolean {
  return output.text !== '' || output.unreadable > 0;
}
