/**
 * The one error hierarchy. Services throw AppError subclasses; the error handler (http/error-handler.ts)
 * turns them into one of the two wire shapes below. No other place writes an error body.
 */
export const ERROR_STATUS = {
  UNAUTHORIZED: 401,
  INVALID_DEPLOYMENT_CREDENTIALS: 401,
  FORBIDDEN: 403,
  INSUFFICIENT_SCOPE: 403,
  FEATURE_NOT_AVAILABLE: 403,
  INSUFFICIENT_CREDITS: 403,
  /**
   * The webhook proxy's refusal of a send a block budget would cross (docs/budgets.md): on the wire
   * `BUDGET_EXCEEDED`, 403 like its other setup errors.
   */
  PROXY_BUDGET_EXCEEDED: 403,
  URL_NOT_ALLOWED: 403,
  DEPLOYMENT_SUSPENDED: 403,
  NOT_FOUND: 404,
  VALIDATION_ERROR: 400,
  /**
   * The AI routes' refusal of a request field or content part they cannot bound (docs/ai-proxy.md,
   * Bounds): always the flat shape `{error:"invalid_request", code:"INVALID_REQUEST", message, param}`.
   */
  INVALID_REQUEST: 400,
  CONFLICT: 409,
  IDEMPOTENCY_IN_PROGRESS: 409,
  /** A usage record deleted by USAGE_RETENTION_DAYS (docs/usage-analytics.md, Retention): its ledger rows remain. */
  USAGE_RECORD_EXPIRED: 410,
  IDEMPOTENCY_KEY_REUSED: 422,
  RATE_LIMITED: 429,
  AI_QUOTA_EXCEEDED: 429,
  /** A block budget would be crossed by an AI call (docs/budgets.md, AI calls): waiting for the window's end cures it. */
  BUDGET_EXCEEDED: 429,
  INTERNAL_ERROR: 500,
  /** The AI provider answers 404/405 for a route it does not have (`/responses`; docs/ai-proxy.md). */
  AI_ROUTE_NOT_SUPPORTED: 501,
  /** Stripe refused a request the service made (a price or customer Stripe does not know: configuration). */
  PAYMENT_PROVIDER_ERROR: 502,
  /** docs/ai-proxy.md, Errors: the upstream answered 5xx, timed out or could not be reached. */
  AI_UPSTREAM_ERROR: 502,
  SERVICE_UNAVAILABLE: 503,
  /** Selling needs STRIPE_SECRET_KEY (and prices/packs) configured. */
  BILLING_NOT_CONFIGURED: 503,
  /** docs/ai-proxy.md, Errors: no AI_BASE_URL. */
  AI_NOT_CONFIGURED: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** The `error` word of the flat /api/v1 shape, where it is not the code in lower case (docs/openapi.md, Shapes). */
const FLAT_ERROR_WORD: Partial<Record<ErrorCode, string>> = {
  INVALID_DEPLOYMENT_CREDENTIALS: 'unauthorized',
  INSUFFICIENT_SCOPE: 'forbidden',
  FEATURE_NOT_AVAILABLE: 'feature_disabled',
  AI_QUOTA_EXCEEDED: 'quota_exceeded',
  RATE_LIMITED: 'rate_limit_exceeded',
  VALIDATION_ERROR: 'invalid_request',
  AI_UPSTREAM_ERROR: 'upstream_error',
  AI_NOT_CONFIGURED: 'ai_not_configured',
  AI_ROUTE_NOT_SUPPORTED: 'not_supported',
  PROXY_BUDGET_EXCEEDED: 'budget_exceeded',
};

/** The flat shape calls a validation failure INVALID_REQUEST; the envelope calls it VALIDATION_ERROR (docs/openapi.md, Shapes). */
const FLAT_CODE: Partial<Record<ErrorCode, string>> = { VALIDATION_ERROR: 'INVALID_REQUEST', PROXY_BUDGET_EXCEEDED: 'BUDGET_EXCEEDED' };

export interface FieldError {
  field: string;
  message: string;
}

export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Extra top-level fields of the flat shape / `details` of the envelope (upgrade_url, creditsRequired…). */
    readonly extra: Record<string, unknown> = {},
    /** Response headers that belong to this error (Retry-After). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'AppError';
    this.status = ERROR_STATUS[code];
  }
}

/**
 * An upstream's own words about a refusal (Stripe's message, a provider's body), kept on the error for
 * the operator's log and never in the answer: they can name the installation's key, account or
 * configuration (docs/billing.md, Selling; docs/ai-proxy.md). The error handler logs errors that carry them.
 */
export function withUpstreamDetail<E extends AppError>(error: E, detail: Record<string, unknown>): E {
  return Object.assign(error, { upstream: detail });
}

/** The upstream detail withUpstreamDetail put on an error, if any. */
export const upstreamDetailOf = (error: unknown): Record<string, unknown> | undefined =>
  (error as { upstream?: Record<string, unknown> } | null)?.upstream;

export class ValidationError extends AppError {
  constructor(
    message: string,
    readonly fields: FieldError[] = [],
  ) {
    super('VALIDATION_ERROR', message, fields.length > 0 ? { fields } : {});
  }

  /** A request refused for one field: the message names it once ("tier must be one of sandbox, trial, …"). */
  static forField(field: string, message: string, fields: FieldError[] = [{ field, message }]): ValidationError {
    return new ValidationError(`${field} ${message}`, fields);
  }
}

export class UnauthorizedError extends AppError {
  constructor(message = 'Missing or invalid credentials') {
    super('UNAUTHORIZED', message);
  }
}

export class NotFoundError extends AppError {
  constructor(what: string) {
    super('NOT_FOUND', `${what} not found`);
  }
}

export class ServiceUnavailableError extends AppError {
  constructor(message = 'The database is unavailable; nothing was changed. Retry later.') {
    super('SERVICE_UNAVAILABLE', message, {}, { 'retry-after': '1' });
  }
}

/** The longest wait a refusal that waiting cannot cure still announces in Retry-After (one hour). */
export const LONGEST_RETRY_AFTER_SECONDS = 3600;

/**
 * A refusal that waiting cannot cure (docs/ai-proxy.md, "Refusals that waiting cannot cure": an AI quota
 * used up with nothing purchased, credits owed, a spent budget). It says `x-should-retry: false`, so the
 * official OpenAI SDKs send the request once instead of sleeping on a 30-day Retry-After (which
 * overflows Node's timers: a TimeoutOverflowWarning and retries at once), names `resets_at` when time
 * changes the answer, and sends Retry-After (seconds to `resets_at`, rounded up) only within the hour.
 */
export function refusalUntil(
  code: ErrorCode,
  message: string,
  extra: Record<string, unknown>,
  resetsAt: Date | null,
  now: Date,
  /** The body's name for `resets_at` (the webhook proxy's bodies are camelCase: `resetsAt`). */
  resetsField = 'resets_at',
): AppError {
  const headers: Record<string, string> = { 'x-should-retry': 'false' };
  if (resetsAt === null) return new AppError(code, message, extra, headers);
  const seconds = Math.max(1, Math.ceil((resetsAt.getTime() - now.getTime()) / 1000));
  if (seconds <= LONGEST_RETRY_AFTER_SECONDS) headers['retry-after'] = String(seconds);
  return new AppError(code, message, { ...extra, [resetsField]: resetsAt.toISOString() }, headers);
}

/** The flat shape (docs/openapi.md, Shapes): `{error, code, message, ...extra}` for every /api/v1 path. */
export function flatErrorBody(err: AppError): Record<string, unknown> {
  return {
    error: FLAT_ERROR_WORD[err.code] ?? err.code.toLowerCase(),
    code: FLAT_CODE[err.code] ?? err.code,
    message: err.message,
    ...err.extra,
  };
}

/** The envelope (docs/openapi.md, Shapes): `{success:false, error:{code,message}, details:{timestamp,...}}`. */
export function envelopeErrorBody(err: AppError, now: Date): Record<string, unknown> {
  return {
    success: false,
    error: { code: err.code, message: err.message },
    details: { timestamp: now.toISOString(), ...err.extra },
  };
}

/**
 * An error answered in the OpenAI shape whatever its status, with OpenAI's own `code` word: a model the
 * proxy does not offer is 404 `model_not_found` (docs/ai-proxy.md, Routes), as OpenAI answers it.
 */
export class OpenAiShapedError extends AppError {
  constructor(
    code: ErrorCode,
    message: string,
    readonly openAiCode: string,
  ) {
    super(code, message);
  }
}

/**
 * The OpenAI error shape `{error:{message, type, param, code}}`, which the AI proxy's routes answer a bad
 * request with so the OpenAI SDKs raise their BadRequestError (docs/ai-proxy.md).
 */
export function openAiErrorBody(err: AppError): Record<string, unknown> {
  if (err instanceof OpenAiShapedError) return { error: { message: err.message, type: 'invalid_request_error', param: null, code: err.openAiCode } };
  const fields = (err.extra.fields as FieldError[] | undefined) ?? [];
  return {
    error: {
      message: err.message,
      type: 'invalid_request_error',
      param: fields[0]?.field ?? null,
      code: FLAT_CODE[err.code] ?? err.code,
      ...(fields.length > 0 ? { fields } : {}),
    },
  };
}
