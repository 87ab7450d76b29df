import { CreditgateError, isRetryableStatus } from './errors.js';

export interface TransportOptions {
  /** Where creditgate answers, e.g. `https://api.creditgate.dev`. */
  baseUrl: string;
  /** Per attempt; default 10 s. */
  timeoutMs?: number;
  /** Extra attempts after the first, only for calls that are safe to repeat; default 2. */
  retries?: number;
  /** Backoff: full jitter over base × 2^attempt, capped at maxRetryDelayMs; default 250 ms. */
  retryBaseMs?: number;
  /** Longest wait between attempts; a Retry-After beyond it is not waited for. Default 10 s. */
  maxRetryDelayMs?: number;
  /** The fetch to use; global fetch by default. */
  fetch?: typeof fetch;
  /** Tests: a deterministic sleep and random source. */
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

export interface CallOptions {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  query?: Record<string, string | number | boolean | undefined> | undefined;
  body?: unknown;
  headers: Record<string, string>;
  /** Whether repeating the call cannot change its effect (reads, or writes carrying an idempotency id). */
  idempotent: boolean;
}

export interface Answer<T> {
  data: T;
  status: number;
  headers: Headers;
  /** The service answered a repeated idempotency key with the first answer. */
  replayed: boolean;
}

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Normalizes and checks the base URL once, at creation, so a typo fails early with a clear message. */
export function parseBaseUrl(raw: unknown): URL {
  if (typeof raw !== 'string' || raw.trim() === '') {
    throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: 'baseUrl is required (e.g. "https://creditgate.example.com")' });
  }
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: `baseUrl "${raw}" is not a URL` });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: `baseUrl "${raw}" must be http or https` });
  }
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

/**
 * The `x-should-retry` header: `true`/`false` (any case, trimmed), anything else is as if absent. The
 * service sends `false` on refusals that waiting cannot cure (docs/client.md, Retries).
 */
function shouldRetryHeader(value: string | null): boolean | undefined {
  const word = value?.trim().toLowerCase();
  return word === 'true' ? true : word === 'false' ? false : undefined;
}

/** Retry-After is whole seconds or an HTTP date (RFC 9110 §10.2.3). */
export function retryAfterMs(value: string | null, nowMs: number): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

export class Transport {
  readonly baseUrl: URL;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly retryBaseMs: number;
  private readonly maxRetryDelayMs: number;
  private readonly fetchImpl: typeof fetch;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;

  constructor(options: TransportOptions) {
    this.baseUrl = parseBaseUrl(options.baseUrl);
    this.timeoutMs = positive(options.timeoutMs, 10_000, 'timeoutMs');
    this.retries = Math.floor(nonNegative(options.retries, 2, 'retries'));
    this.retryBaseMs = positive(options.retryBaseMs, 250, 'retryBaseMs');
    this.maxRetryDelayMs = nonNegative(options.maxRetryDelayMs, 10_000, 'maxRetryDelayMs');
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.sleep = options.sleep ?? defaultSleep;
    this.random = options.random ?? Math.random;
  }

  async call<T>(options: CallOptions): Promise<Answer<T>> {
    const url = new URL(options.path.replace(/^\//, ''), this.baseUrl);
    for (const [key, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    const attempts = options.idempotent ? this.retries + 1 : 1;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.once<T>(url, options);
      } catch (err) {
        const error = err as CreditgateError;
        if (attempt + 1 >= attempts || !error.isTransient) throw error;
        const asked = error.retryAfterSeconds === undefined ? undefined : error.retryAfterSeconds * 1000;
        if (asked !== undefined && asked > this.maxRetryDelayMs) throw error;
        const backoff = this.random() * Math.min(this.maxRetryDelayMs, this.retryBaseMs * 2 ** attempt);
        await this.sleep(asked ?? backoff);
      }
    }
  }

  private async once<T>(url: URL, options: CallOptions): Promise<Answer<T>> {
    const headers: Record<string, string> = { accept: 'application/json', ...options.headers };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    let text: string;
    try {
      response = await this.fetchImpl(url, {
        method: options.method,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        signal: AbortSignal.timeout(this.timeoutMs),
        redirect: 'manual',
      });
      text = await response.text();
    } catch (err) {
      const name = (err as Error)?.name;
      if (name === 'TimeoutError' || name === 'AbortError') {
        throw new CreditgateError({
          code: 'TIMEOUT',
          message: `creditgate at ${this.baseUrl.origin} did not answer ${options.method} ${url.pathname} within ${this.timeoutMs} ms`,
          cause: err,
        });
      }
      const reason = (err as { cause?: { code?: string; message?: string } })?.cause;
      throw new CreditgateError({
        code: 'NETWORK_ERROR',
        message: `cannot reach creditgate at ${this.baseUrl.origin} (${reason?.code ?? reason?.message ?? (err as Error)?.message ?? 'network error'})`,
        cause: err,
      });
    }
    // A conditional read whose representation is unchanged: no body, by design (RFC 9110 §15.4.5).
    if (response.status === 304 && Object.keys(options.headers).some((name) => name.toLowerCase() === 'if-none-match')) {
      return { data: undefined as T, status: 304, headers: response.headers, replayed: false };
    }
    const body = parseJson(text);
    const retryAfter = retryAfterMs(response.headers.get('retry-after'), Date.now());
    const retryAfterSeconds = retryAfter === undefined ? undefined : Math.ceil(retryAfter / 1000);
    const shouldRetry = shouldRetryHeader(response.headers.get('x-should-retry'));
    if (body === undefined || typeof body !== 'object' || body === null) {
      const type = response.headers.get('content-type') ?? 'no content type';
      throw new CreditgateError({
        code: 'INVALID_RESPONSE',
        status: response.status,
        retryAfterSeconds,
        shouldRetry,
        message: `expected JSON from creditgate at ${this.baseUrl.origin}${url.pathname}, got ${response.status} ${type}: ${snippet(text)}`,
        body: text,
      });
    }
    if (response.status >= 200 && response.status < 300) {
      return {
        data: body as T,
        status: response.status,
        headers: response.headers,
        replayed: response.headers.get('idempotent-replayed') === 'true',
      };
    }
    const answered = { status: response.status, retryAfterSeconds, shouldRetry };
    throw errorFromBody(body as Record<string, unknown>, answered, `${options.method} ${url.pathname}`);
  }
}

interface Answered {
  status: number;
  retryAfterSeconds: number | undefined;
  shouldRetry: boolean | undefined;
}

/**
 * The two error shapes (docs/openapi.md, Shapes): flat on /api/v1 (`{error, code, message, ...}`), and
 * the application API's envelope (`{success: false, error: {code, message}, details: {...}}`), whose
 * details hold what the flat shape has beside its message (`fields`, …).
 */
function errorFromBody(body: Record<string, unknown>, { status, retryAfterSeconds, shouldRetry }: Answered, what: string): CreditgateError {
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
  const num = (v: unknown) => (typeof v === 'number' ? v : undefined);
  const object = (v: unknown) => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined);
  const envelope = body.success === false ? object(body.error) : undefined;
  const flat = envelope ? { ...object(body.details), code: envelope.code, message: envelope.message } : body;
  const code = str(flat.code) ?? (status === 429 ? 'RATE_LIMITED' : isRetryableStatus(status) ? 'SERVICE_UNAVAILABLE' : `HTTP_${status}`);
  // The webhook proxy speaks camelCase (docs/webhooks.md, The proxy); the rest of the API snake_case.
  const available = 'creditsAvailable' in flat ? flat.creditsAvailable : flat.credits_available;
  return new CreditgateError({
    code,
    status,
    error: envelope ? null : (str(body.error) ?? null),
    message: str(flat.message) ?? `${what} answered ${status}`,
    creditsRequired: num(flat.creditsRequired ?? flat.credits_required),
    creditsAvailable: available === null ? null : num(available),
    retryAfterSeconds,
    shouldRetry,
    upgradeUrl: str(flat.upgrade_url),
    budgetId: str(flat.budget_id ?? flat.budgetId),
    resetsAt: str(flat.resets_at ?? flat.resetsAt),
    requestId: str(flat.request_id),
    fields: Array.isArray(flat.fields) ? (flat.fields as Array<{ field: string; message: string }>) : undefined,
    body,
  });
}

function parseJson(text: string): unknown {
  if (text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function snippet(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  if (flat === '') return '(empty body)';
  return flat.length > 120 ? `${flat.slice(0, 120)}…` : flat;
}

function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: `${name} must be a positive number, got ${value}` });
  }
  return value;
}

function nonNegative(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value < 0) {
    throw new CreditgateError({ code: 'CONFIGURATION_ERROR', message: `${name} must be a number ≥ 0, got ${value}` });
  }
  return value;
}
