import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { guardedLookup } from './ssrf.js';

/**
 * Outbound HTTP for webhooks (docs/webhooks.md), through undici with the SSRF-guarded lookup. One attempt:
 * no redirects followed, a time limit for the whole attempt, the answer's body read up to a bound
 * and truncated to 4,096 characters.
 */
export const RESPONSE_BODY_LIMIT = 4096;
/** Bytes read from a receiver's answer before it is cut off (the rest is discarded unread). */
const RESPONSE_READ_LIMIT = 64 * 1024;

/** Headers a proxy must not forward (docs/webhooks.md, The proxy): hop-by-hop, host, content-length, and ours. */
const DROPPED = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'expect',
]);

export function forwardableHeaders(headers: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    const lower = name.toLowerCase();
    if (DROPPED.has(lower) || lower.startsWith('x-service-') || lower.startsWith('webhook-')) continue;
    out[lower] = value;
  }
  return out;
}

export interface AttemptOutcome {
  /** The receiver's status, or null when no answer came. */
  statusCode: number | null;
  responseBody: string | null;
  error: string | null;
  /** 2xx. */
  ok: boolean;
  /** Worth another attempt: 5xx, 408, 429, timeouts, connection errors and an unreachable host. */
  retryable: boolean;
  /** No connection was even opened (host unreachable, or a request undici refused to write). */
  notAttempted: boolean;
  /**
   * The host could not be reached: its name does not resolve, or the guard refused what it resolves
   * to. One outcome for both, with one message (docs/webhooks.md, SSRF guard): telling them apart
   * would let a caller map which internal names exist.
   */
  unreachable: boolean;
  /**
   * Of the unreachable, those the guard refused. For operator-configured targets only (the template
   * provisioner gives up at once); never shown to a tenant differently from `unreachable`.
   */
  blocked: boolean;
  /** A receiver's Retry-After in ms, when it sent one. */
  retryAfterMs: number | null;
}

/** One undici agent per process and setting; connections are reused across sends. */
export class OutboundHttp {
  private readonly agent: Agent;

  constructor(
    readonly allowPrivate: boolean,
    readonly timeoutMs: number,
  ) {
    this.agent = new Agent({
      connect: { lookup: guardedLookup(allowPrivate) as never, timeout: timeoutMs },
      keepAliveTimeout: 10_000,
      connections: 256,
    });
  }

  async attempt(input: { url: URL; method: string; headers: Record<string, string>; body: Buffer }): Promise<AttemptOutcome> {
    const signal = AbortSignal.timeout(this.timeoutMs);
    try {
      const res = await request(input.url, {
        method: input.method as 'POST',
        headers: input.headers,
        body: input.body,
        dispatcher: this.agent,
        signal,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      const text = await readBounded(res.body);
      const status = res.statusCode;
      const ok = status >= 200 && status < 300;
      const redirect = status >= 300 && status < 400;
      return {
        statusCode: status,
        responseBody: text.slice(0, RESPONSE_BODY_LIMIT),
        error: ok ? null : redirect ? `Redirect ${status} not followed` : `Receiver answered ${status}`,
        ok,
        retryable: status >= 500 || status === 408 || status === 429,
        notAttempted: false,
        unreachable: false,
        blocked: false,
        retryAfterMs: retryAfterMs(res.headers['retry-after']),
      };
    } catch (err) {
      return failure(err, signal.aborted, input.url.hostname);
    }
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

/** The one message of an unreachable host; it names the host, never what the name resolved to. */
export const unreachableMessage = (host: string) =>
  `The host ${host} could not be reached (it does not resolve, or not to an address webhooks may reach)`;

function failure(err: unknown, timedOut: boolean, host: string): AttemptOutcome {
  const e = err as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  const code = e.code ?? e.cause?.code;
  const blocked = code === 'ERR_URL_NOT_ALLOWED';
  const unreachable = blocked || code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME';
  // undici refused to write the request (a header value it will not send): nothing left us, and the
  // same request would be refused again. The proxy validates its input so this is not reached.
  const invalid = code === 'UND_ERR_INVALID_ARG';
  const message = unreachable
    ? unreachableMessage(host)
    : invalid
      ? 'The request could not be sent (undici refused it as invalid)'
      : timedOut || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT'
        ? 'Timed out waiting for the receiver'
        : `Connection failed (${code ?? e.message})`;
  return {
    statusCode: null,
    responseBody: null,
    error: message,
    ok: false,
    retryable: !invalid,
    notAttempted: unreachable || invalid,
    unreachable,
    blocked,
    retryAfterMs: null,
  };
}

async function readBounded(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= RESPONSE_READ_LIMIT) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(chunks).toString('utf8');
}

function retryAfterMs(value: string | string[] | undefined): number | null {
  const raw = Array.isArray(value) ? value[0] : value;
  if (!raw) return null;
  if (/^\d+$/.test(raw)) return Number(raw) * 1000;
  const at = Date.parse(raw);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

/** The proxy's in-request schedule (docs/webhooks.md): base 250 ms, factor 4, full jitter (~0.25 s, ~1 s). */
export function proxyBackoffMs(attempt: number, random: () => number = Math.random): number {
  return Math.floor(random() * 250 * 4 ** (attempt - 1));
}

export interface SendOutcome {
  /** Attempts that opened (or tried to open) a connection to a checked address; an unreachable host is not one. */
  attempts: number;
  last: AttemptOutcome;
  deliveredAt: Date | null;
  /** Whether any attempt opened a connection; false means the send was never made (refund). */
  connected: boolean;
}

/** Up to `maxAttempts` attempts with the proxy's backoff; stops at success or a final answer. */
export async function sendWithRetries(
  http: OutboundHttp,
  input: { url: URL; method: string; headers: Record<string, string>; body: Buffer },
  options: { maxAttempts: number; now: () => Date; backoffMs?: (attempt: number) => number },
): Promise<SendOutcome> {
  let tries = 0;
  let attempts = 0;
  let last: AttemptOutcome | undefined;
  while (tries < options.maxAttempts) {
    tries += 1;
    last = await http.attempt(input);
    if (!last.notAttempted) attempts += 1;
    if (last.ok) return { attempts, last, deliveredAt: options.now(), connected: true };
    if (!last.retryable || tries === options.maxAttempts) break;
    await sleep((options.backoffMs ?? proxyBackoffMs)(tries));
  }
  return { attempts, last: last!, deliveredAt: null, connected: attempts > 0 };
}
