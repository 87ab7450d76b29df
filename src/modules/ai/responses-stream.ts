import type { Dispatcher } from 'undici';
import { type CallHold, type CallPlan, type ChatCall, settledTokens } from './call.js';
import { addContent, type Output, readResponsesUsage, SseSplitter } from './sse.js';
import { admitOutput, cap, finishStream, openStream, parseJson, relayedTokens, startRelay, write } from './stream.js';

/**
 * A Responses API stream (docs/ai-proxy.md, Responses API): its typed events (`response.created`,
 * `response.output_text.delta`, …) go to the client as they arrive, byte for byte. Every `*.delta`
 * event's text (output text, refusals, function-call arguments, reasoning summaries) is counted as it
 * goes; a provider that streams past the allowance is stopped there. The last event
 * (`response.completed`, `response.incomplete` or `response.failed`, which carries the usage) is held
 * back until the call is settled, so a client that reads to the end finds its quota already counted.
 */

const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

function event(type: string, data: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
}

/**
 * The end of a stream the proxy stopped at the allowance: `response.incomplete` with the reason
 * OpenAI gives for the same stop (`max_output_tokens`) and the usage the call was charged (estimated).
 */
function stoppedEvent(plan: CallPlan, held: CallHold, response: Record<string, unknown> | null, sequence: number, relayed: number): string {
  const { inputTokens, outputTokens } = settledTokens(plan, held, { kind: 'none' }, () => relayed);
  return event('response.incomplete', {
    sequence_number: sequence + 1,
    response: {
      ...(response ?? { id: 'resp_stopped', object: 'response', created_at: 0, model: plan.model, output: [] }),
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
      usage: {
        input_tokens: inputTokens,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: outputTokens,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: inputTokens + outputTokens,
      },
    },
  });
}

/** A provider stream that broke: an `error` event both the OpenAI SDK (it raises `error`) and the Vercel AI SDK read. */
function cutEvent(sequence: number): string {
  const message = "The AI provider's stream ended before it was complete";
  return event('error', {
    sequence_number: sequence + 1,
    code: 'AI_UPSTREAM_ERROR',
    message,
    param: null,
    error: { type: 'upstream_error', code: 'AI_UPSTREAM_ERROR', message, param: null },
  });
}

export async function streamResponses(call: ChatCall, plan: CallPlan, held: CallHold, res: Dispatcher.ResponseData, controller: AbortController): Promise<void> {
  const out = openStream(call.reply, 'text/event-stream; charset=utf-8');
  const splitter = new SseSplitter();
  const relay = startRelay(plan, held);
  let response: Record<string, unknown> | null = null;
  let sequence = -1;
  let terminal: string | null = null;
  let errored = false;
  let cut = false;
  try {
    read: for await (const chunk of res.body) {
      for (const sse of splitter.push(chunk as Buffer)) {
        const parsed = sse.data === null ? null : parseJson(sse.data);
        if (parsed) {
          if (typeof parsed.sequence_number === 'number') sequence = Math.max(sequence, parsed.sequence_number);
          if (parsed.response && typeof parsed.response === 'object') response = parsed.response as Record<string, unknown>;
          const type = String(parsed.type);
          if (TERMINAL.has(type)) {
            relay.reported = readResponsesUsage(response?.usage);
            terminal = sse.raw;
            continue;
          }
          // The provider's own error event ends its stream: handed on as it came, not a cut.
          if (type === 'error') errored = true;
          if (type.endsWith('.delta')) {
            // A delta that is not a string (parts, an object) is counted like chat content: the strings
            // of its parts, else the bytes of its JSON (docs/ai-proxy.md, Responses API).
            const output: Output = { text: '', unreadable: 0 };
            addContent(output, parsed.delta);
            if (!admitOutput(relay, output)) {
              cap(relay, res, controller);
              break read;
            }
          }
        }
        await write(out, sse.raw);
      }
    }
    if (!relay.capped && terminal === null && !errored) cut = true;
  } catch {
    cut = !relay.capped && terminal === null && !errored;
  }
  const clientGone = controller.signal.aborted && !relay.capped;
  const relayed = () => relayedTokens(plan, relay);
  await finishStream(call, plan, held, relay, out, clientGone, () => {
    if (clientGone) return '';
    if (relay.capped) return stoppedEvent(plan, held, response, sequence, relayed());
    if (terminal !== null) return terminal;
    return cut ? cutEvent(sequence) : '';
  });
}
