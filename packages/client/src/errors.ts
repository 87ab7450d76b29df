/**
 * The one error the client throws. A failure to set up a call (bad input, credentials, credits for a
 * webhook send, rate limit, the platform unreachable) is a CreditgateError carrying the service's
 * machine-readable code; answers that are not errors (a denied check, a failed webhook target) are
 * results, never exceptions.
 */

/** Codes the client itself produces, next to the service's own (UNAUTHORIZED, INSUFFICIENT_CREDITS, …). */
export type ClientErrorCode =
  /** createClient was given something unusable: no credentials, a base URL that is not http(s). */
  | 'CONFIGURATION_ERROR'
  /** The method needs credentials this client was not created with (e.g. a service-mode call with an API key). */
  | 'MISSING_CREDENTIALS'
  /** No HTTP answer: connection refused, DNS failure, reset. */
  | 'NETWORK_ERROR'
  /** No answer within timeoutMs. */
  | 'TIMEOUT'
  /** An answer that is not creditgate's JSON (an HTML error page from a proxy, a wrong base URL). */
  | 'INVALID_RESPONSE';

export interface CreditgateErrorInit {
  code: string;
  message: string;
  status?: number | null;
  error?: string | null;
  creditsRequired?: number | undefined;
  creditsAvailable?: number | null | undefined;
  retryAfterSeconds?: number | undefined;
  shouldRetry?: boolean | undefined;
  upgradeUrl?: string | undefined;
  requestId?: string | undefined;
  fields?: Array<{ field: string; message: string }> | undefined;
  body?: unknown;
  cause?: unknown;
}

const RETRYABLE_STATUSES = new Set([408, 429, 500, 502, 503, 504]);

export class CreditgateError extends Error {
  override readonly name = 'CreditgateError';
  /** UPPER_SNAKE code: the service's (`INSUFFICIENT_CREDITS`, `RATE_LIMITED`, …) or a ClientErrorCode. */
  readonly code: string;
  /** HTTP status of the answer; null when none came (network error, timeout, configuration). */
  readonly status: number | null;
  /** The service's lower_snake error word (`rate_limit_exceeded`), when it sent one. */
  readonly error: string | null;
  /** Webhook proxy: credits one send needs. */
  readonly creditsRequired: number | undefined;
  /** Webhook proxy: credits the deployment has. */
  readonly creditsAvailable: number | null | undefined;
  /** 429 and 503: the wait the service asked for, in seconds. */
  readonly retryAfterSeconds: number | undefined;
  /**
   * The answer's `x-should-retry` header: `false` when the service says repeating the call cannot help
   * (a refusal that waiting cannot cure, e.g. a quota used up until `resets_at`), `true` when it sent
   * `true`, undefined when it sent neither (or no answer came). Only `false` changes what the client
   * does: such an error is never transient and never retried (docs/client.md, Retries).
   */
  readonly shouldRetry: boolean | undefined;
  readonly upgradeUrl: string | undefined;
  readonly requestId: string | undefined;
  /** INVALID_REQUEST: which fields were wrong. */
  readonly fields: Array<{ field: string; message: string }> | undefined;
  /** The parsed answer body, as sent. */
  readonly body: unknown;

  constructor(init: CreditgateErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.code = init.code;
    this.status = init.status ?? null;
    this.error = init.error ?? null;
    this.creditsRequired = init.creditsRequired;
    this.creditsAvailable = init.creditsAvailable;
    this.retryAfterSeconds = init.retryAfterSeconds;
    this.shouldRetry = init.shouldRetry;
    this.upgradeUrl = init.upgradeUrl;
    this.requestId = init.requestId;
    this.fields = init.fields;
    this.body = init.body;
  }

  /**
   * The platform could not be reached or answered with a transient failure: the same call may succeed
   * later. Never true for an answer that said `x-should-retry: false`, whatever its status.
   */
  get isTransient(): boolean {
    if (this.shouldRetry === false) return false;
    if (this.code === 'NETWORK_ERROR' || this.code === 'TIMEOUT') return true;
    if (this.code === 'IDEMPOTENCY_IN_PROGRESS') return true;
    return this.status !== null && RETRYABLE_STATUSES.has(this.status);
  }
}

export function isCreditgateError(value: unknown): value is CreditgateError {
  return value instanceof CreditgateError;
}

export function isRetryableStatus(status: number): boolean {
  return RETRYABLE_STATUSES.has(status);
}
