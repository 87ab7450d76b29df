import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import type { Dispatcher } from 'undici';
import { OutputMeter } from './bounds.js';
import { type CallHold, type CallPlan, type ChatCall, release, settleQuietly } from './call.js';
import { countOutputAsync } from './count-workers.js';
import { hasOutput, type Output, outputOfChoices, type ReportedUsage, readUsage, SseSplitter } from './sse.js';
import { countOutput } from './tokens.js';

/**
 * Streams (docs/ai-proxy.md, Streaming): each event goes to the client as it arrives; the relayed
 * output is counted as it goes and a provider that streams past the allowance is stopped there and
 * its call aborted (docs/ai-proxy.md, Bounds: output allowance).
 */

/** The SSE event that tells a client the provider's stream broke (the OpenAI SDKs raise it as an APIError). */
function cutEvent(): string {
  return `data: ${JSON.stringify({
    error: { message: "The AI provider's stream ended before it was complete", type: 'upstream_error', code: 'AI_UPSTREAM_ERROR' },
  })}\n\n`;
}

/** The last chunk of a stream the proxy stopped at the allowance: every choice ends with `length`. */
function lengthEvent(last: Record<string, unknown> | null, choices: number): string {
  const chunk = {
    id: last?.id ?? 'chatcmpl-stopped',
    object: 'chat.completion.chunk',
    created: last?.created ?? 0,
    model: last?.model ?? '',
    choices: Array.from({ length: choices }, (_, index) => ({ index, delta: {}, logprobs: null, finish_reason: 'length' })),
  };
  return `data: ${JSON.stringify(chunk)}\n\n`;
}

/** What a stream relayed and heard, for its settle. */
export interface Relay {
  reported: ReportedUsage;
  streamed: string[];
  /** Bytes of relayed content the proxy could not read (counted a token each). */
  unreadable: number;
  meter: OutputMeter;
  /** The proxy stopped it at the allowance. */
  capped: boolean;
  /** relayedTokens as counted at the stream's end (finishStream), when it is over. */
  counted?: number;
}

export function startRelay(plan: CallPlan, held: CallHold): Relay {
  return { reported: { kind: 'none' }, streamed: [], unreadable: 0, meter: new OutputMeter(plan.model, held.outputPerChoice * plan.choices), capped: false };
}

/**
 * Meter a piece of output before it is relayed: false when it would pass the allowance (the stream is
 * then stopped), else it is counted for the settle.
 */
export function admitOutput(relay: Relay, output: Output): boolean {
  if (!hasOutput(output)) return true;
  if (!relay.meter.admit(output.text, output.unreadable)) return false;
  if (output.text) relay.streamed.push(output.text);
  relay.unreadable += output.unreadable;
  return true;
}

/** What a stream relayed, in tokens: the tokenizer's count of its text and the unreadable bytes. */
export function relayedTokens(plan: CallPlan, relay: Relay): number {
  return relay.counted ?? countOutput(plan.model, { text: relay.streamed.join(''), unreadable: relay.unreadable });
}

/** Stop a stream at the allowance: nothing more is read, and the upstream call is aborted. */
export function cap(relay: Relay, res: Dispatcher.ResponseData, controller: AbortController): void {
  relay.capped = true;
  // A usage seen before the stop counted only part of the call: the stop's own rule settles it.
  relay.reported = { kind: 'none' };
  res.body.destroy();
  controller.abort(new Error('the output allowance was reached'));
}

export function openStream(reply: FastifyReply, contentType: string): PassThrough {
  const out = new PassThrough();
  reply.code(200).header('content-type', contentType).header('cache-control', 'no-cache').header('x-accel-buffering', 'no');
  void reply.send(out);
  return out;
}

/**
 * A chat stream: the usage chunk the proxy asked for is kept from a client that did not ask for it;
 * `[DONE]` is held back until the call is settled, so a client that reads to the end finds its quota
 * already counted.
 */
export async function streamChat(
  call: ChatCall,
  plan: CallPlan,
  held: CallHold,
  res: Dispatcher.ResponseData,
  controller: AbortController,
  clientWantsUsage: boolean,
): Promise<void> {
  const out = openStream(call.reply, 'text/event-stream; charset=utf-8');
  const splitter = new SseSplitter();
  const relay = startRelay(plan, held);
  let last: Record<string, unknown> | null = null;
  let done = false;
  let finished = false;
  let cut = false;
  try {
    read: for await (const chunk of res.body) {
      for (const event of splitter.push(chunk as Buffer)) {
        if (event.data === '[DONE]') {
          done = true;
          continue;
        }
        let forward = true;
        const parsed = event.data === null ? null : parseJson(event.data);
        if (parsed) {
          last = parsed;
          const usage = readUsage(parsed.usage);
          if (usage.kind !== 'none') {
            relay.reported = usage;
            forward = clientWantsUsage || !(Array.isArray(parsed.choices) && parsed.choices.length === 0);
          }
          if (!admitOutput(relay, outputOfChoices(parsed.choices, 'delta'))) {
            cap(relay, res, controller);
            break read;
          }
          finished ||= hasFinished(parsed.choices);
        }
        if (forward) await write(out, event.raw);
      }
    }
    // A provider that ends without [DONE] after its last choice finished is done; one that stops mid-answer is not.
    if (!relay.capped && !done && !finished) cut = true;
  } catch {
    cut = !relay.capped;
  }
  const clientGone = controller.signal.aborted && !relay.capped;
  await finishStream(call, plan, held, relay, out, clientGone, () => {
    if (clientGone) return '';
    if (relay.capped) return `${lengthEvent(last, plan.choices)}data: [DONE]\n\n`;
    return cut ? cutEvent() : 'data: [DONE]\n\n';
  });
}

/** `stream: true` on /api/ai/generate: a text/plain chunked stream of the text alone. */
export async function streamText(call: ChatCall, plan: CallPlan, held: CallHold, res: Dispatcher.ResponseData, controller: AbortController): Promise<void> {
  const out = openStream(call.reply, 'text/plain; charset=utf-8');
  const splitter = new SseSplitter();
  const relay = startRelay(plan, held);
  try {
    read: for await (const chunk of res.body) {
      for (const event of splitter.push(chunk as Buffer)) {
        if (event.data === null || event.data === '[DONE]') continue;
        const parsed = parseJson(event.data);
        if (!parsed) continue;
        const usage = readUsage(parsed.usage);
        if (usage.kind !== 'none') relay.reported = usage;
        const output = outputOfChoices(parsed.choices, 'delta');
        if (!admitOutput(relay, output)) {
          cap(relay, res, controller);
          break read;
        }
        if (output.text) await write(out, output.text);
      }
    }
  } catch {
    // A cut stream ends the text where it broke; what was streamed is settled as an estimate.
  }
  await finishStream(call, plan, held, relay, out, controller.signal.aborted && !relay.capped, () => '');
}

/**
 * After a stream: settle, then the last words, then the end. A stream that broke before any output (of
 * any shape: text, parts, content the proxy cannot read) is released (the provider produced nothing);
 * one the client left is charged at least its prompt, since the provider had it (else a client could
 * have prompts processed for free by hanging up at once).
 */
export async function finishStream(call: ChatCall, plan: CallPlan, held: CallHold, relay: Relay, out: PassThrough, clientGone: boolean, lastWords: () => string): Promise<void> {
  const relayedNothing = relay.streamed.length === 0 && relay.unreadable === 0;
  if (relay.reported.kind === 'none' && relayedNothing && !clientGone && !relay.capped) await release(call.ctx, call.deployment, held);
  else {
    // Counted once, off the event loop when it is long (count-workers.ts); relayedTokens then answers it.
    relay.counted = await countOutputAsync(plan.model, { text: relay.streamed.join(''), unreadable: relay.unreadable });
    await settleQuietly(call, plan, held, relay.reported, () => relayedTokens(plan, relay));
  }
  const words = lastWords();
  if (words) await write(out, words);
  out.end();
}

function hasFinished(choices: unknown): boolean {
  return Array.isArray(choices) && choices.some((c) => typeof (c as { finish_reason?: unknown } | null)?.finish_reason === 'string');
}

export function parseJson(data: string): Record<string, unknown> | null {
  try {
    const value = JSON.parse(data) as unknown;
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Write with backpressure: wait for the client to drain (or go). */
export async function write(out: PassThrough, text: string): Promise<void> {
  if (out.destroyed || out.writableEnded) return;
  if (out.write(text)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      out.off('drain', done);
      out.off('close', done);
      resolve();
    };
    out.once('drain', done);
    out.once('close', done);
  });
}
