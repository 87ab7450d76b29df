/**
 * The console reads an error answer here and nowhere else. The API answers an error in one of three
 * shapes (docs/openapi.md, Shapes; docs/ai-proxy.md), which this reads into one ApiError:
 *   envelope  {success: false, error: {code, message}, details: {timestamp, fields?, …}}  the application API
 *   flat      {error: "word", code, message, fields?, …}                                 /api/v1 (the operator API)
 *   OpenAI    {error: {message, type, param, code, fields?}}                              the AI proxy
 * Anything else (a proxy's HTML page, an empty body) becomes HTTP_<status> with the status text.
 *
 * What a person reads is never the code: `describeError` turns every code the service answers
 * (ErrorCode in src/errors.ts) into a sentence, followed by the service's own message where that says more.
 */
import type { ErrorCode } from '../../src/errors.js';

export interface FieldMessage {
  field: string;
  message: string;
}

/** An error answer of the API, with its machine-readable code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: FieldMessage[] = [],
    /** The request id the service logs an internal error under, to quote to support. */
    readonly requestId: string | null = null,
    /** The answer's `details` as sent (e.g. a 409's `missing`), for the page that acts on them. */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function fieldsOf(value: unknown): FieldMessage[] {
  if (!Array.isArray(value)) return [];
  return value.filter((f): f is FieldMessage => isObject(f) && typeof f.field === 'string' && typeof f.message === 'string');
}

/** The ApiError of an answer's status and its body, parsed (or null when it was not JSON). */
export function apiErrorOf(status: number, statusText: string, body: unknown): ApiError {
  const b = isObject(body) ? body : {};
  // The envelope and the OpenAI shape: the code and message inside `error`; fields in `details` or beside them.
  if (isObject(b.error)) {
    const e = b.error;
    const fields = fieldsOf(isObject(b.details) ? b.details.fields : undefined);
    return new ApiError(
      status,
      typeof e.code === 'string' ? e.code : 'ERROR',
      typeof e.message === 'string' ? e.message : statusText,
      fields.length > 0 ? fields : fieldsOf(e.fields),
      isObject(b.details) && typeof b.details.request_id === 'string' ? b.details.request_id : null,
      isObject(b.details) ? b.details : {},
    );
  }
  // The flat shape: `error` is a lower-case word, `code` the one to act on.
  if (typeof b.code === 'string') {
    return new ApiError(
      status,
      b.code,
      typeof b.message === 'string' ? b.message : statusText,
      fieldsOf(b.fields),
      typeof b.request_id === 'string' ? b.request_id : null,
    );
  }
  return new ApiError(status, `HTTP_${status}`, statusText || 'Request failed');
}

/** The ApiError of a response that is not ok. */
export async function errorOf(res: Response): Promise<ApiError> {
  let body: unknown = null;
  try {
    body = await res.json();
  } catch {
    // not JSON: the status speaks
  }
  return apiErrorOf(res.status, res.statusText, body);
}

/**
 * The sentence for every code the service answers (src/errors.ts ErrorCode; the flat shape's
 * INVALID_REQUEST and BUDGET_EXCEEDED are codes of that list too). A `Record` over the union, so a new
 * code fails the console's typecheck until it has a sentence here; the unit test checks the list at run time.
 */
export const ERROR_MESSAGES: Record<ErrorCode, string> = {
  UNAUTHORIZED: 'Those credentials were not accepted.',
  INVALID_DEPLOYMENT_CREDENTIALS: 'The deployment id or secret was not accepted.',
  FORBIDDEN: 'You do not have permission to do that.',
  INSUFFICIENT_SCOPE: "The API key's scopes do not allow that.",
  FEATURE_NOT_AVAILABLE: 'That feature is not included in this plan.',
  INSUFFICIENT_CREDITS: 'There are not enough credits for that.',
  PROXY_BUDGET_EXCEEDED: 'A budget would be exceeded, so the request was refused.',
  URL_NOT_ALLOWED: 'That address is not allowed. Use a public https address.',
  DEPLOYMENT_SUSPENDED: 'This deployment is suspended. The operator of this installation can reactivate it.',
  NOT_FOUND: 'We could not find that. It may have been deleted, or it is not shared with you.',
  VALIDATION_ERROR: 'Some of what was entered is not valid.',
  INVALID_REQUEST: 'Some of what was entered is not valid.',
  CONFLICT: 'That conflicts with something that already exists or has just changed.',
  IDEMPOTENCY_IN_PROGRESS: 'The same request is still being processed. Wait a moment, then try again.',
  USAGE_RECORD_EXPIRED: 'That usage record is past the retention period and was deleted.',
  IDEMPOTENCY_KEY_REUSED: 'This request was already sent with different details. Start again from the form.',
  RATE_LIMITED: 'Too many requests in a short time. Wait a moment, then try again.',
  AI_QUOTA_EXCEEDED: 'The AI token quota for this period is used up.',
  BUDGET_EXCEEDED: 'A budget limit has been reached. It opens again when its window ends.',
  INTERNAL_ERROR: 'Something went wrong on our side. Try again; if it keeps happening, contact support.',
  AI_ROUTE_NOT_SUPPORTED: 'The AI provider does not offer that request.',
  PAYMENT_PROVIDER_ERROR: 'The payment provider refused the request. Try again later, or contact support.',
  AI_UPSTREAM_ERROR: 'The AI provider did not answer. Try again shortly.',
  SERVICE_UNAVAILABLE: 'The service is temporarily unavailable. Nothing was changed; try again in a moment.',
  BILLING_NOT_CONFIGURED: 'Billing is not set up on this installation yet.',
  AI_NOT_CONFIGURED: 'The AI proxy is not set up on this installation.',
};

/** When the fetch itself failed (offline, the service down): the browser's TypeError. */
export const UNREACHABLE_MESSAGE = 'We could not reach the service. Check your connection, then try again.';

/** An answer with a code the list does not name (a proxy's page, the AI proxy's OpenAI codes): by its status. */
export function messageForStatus(status: number): string {
  if (status === 401) return ERROR_MESSAGES.UNAUTHORIZED;
  if (status === 403) return ERROR_MESSAGES.FORBIDDEN;
  if (status === 404 || status === 410) return ERROR_MESSAGES.NOT_FOUND;
  if (status === 409) return ERROR_MESSAGES.CONFLICT;
  if (status === 413) return 'That is too large to send.';
  if (status === 429) return ERROR_MESSAGES.RATE_LIMITED;
  if (status === 502 || status === 503 || status === 504) return 'The service is not reachable right now. Try again in a moment.';
  if (status >= 500) return ERROR_MESSAGES.INTERNAL_ERROR;
  return 'The request was not accepted. Check what was entered, then try again.';
}

const KNOWN = new Set<string>(Object.keys(ERROR_MESSAGES));
/** A word that is one of the codes: a message holding one is not shown (codes are for programs). */
const CODE_WORD = /\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b/g;

/** What a person reads for an error: a sentence, the service's own words when they say more, a reference for support. */
export interface ErrorText {
  summary: string;
  detail: string | null;
  reference: string | null;
}

const sentence = (text: string) => (/[.!?)]$/.test(text) ? text : `${text}.`);

export function describeError(error: unknown): ErrorText {
  if (error instanceof ApiError) {
    const summary = KNOWN.has(error.code) ? ERROR_MESSAGES[error.code as ErrorCode] : messageForStatus(error.status);
    const own = error.message.trim();
    // The service's message names what was refused (a field, a role, a missing setting), except for an internal
    // error (nothing to say) and an answer that was not the service's (its status text only).
    const speaks =
      own !== '' &&
      error.code !== 'INTERNAL_ERROR' &&
      !error.code.startsWith('HTTP_') &&
      sentence(own) !== summary &&
      !(own.match(CODE_WORD) ?? []).some((word) => KNOWN.has(word));
    return { summary, detail: speaks ? sentence(own) : null, reference: error.requestId };
  }
  if (error instanceof TypeError && /fetch|network|load failed/i.test(error.message)) return { summary: UNREACHABLE_MESSAGE, detail: null, reference: null };
  if (error instanceof Error) return { summary: error.message, detail: null, reference: null };
  return { summary: String(error), detail: null, reference: null };
}

/** The error as one line of text. */
export function messageOf(error: unknown): string {
  const { summary, detail, reference } = describeError(error);
  return [summary, detail, reference ? `Reference: ${reference}.` : null].filter(Boolean).join(' ');
}
