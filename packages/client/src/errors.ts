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
  budgetId?: string | undefined;
  resetsAt?: string | undefined;
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
  /** BUDGET_EXCEEDED: the budget that refused the call (docs/budgets.md, Enforcement). */
  readonly budgetId: string | undefined;
  /**
   * When a refusal that waiting can cure ends: the refusing budget's window resets (BUDGET_EXCEEDED), or
   * the AI token quota's period (AI_QUOTA_EXCEEDED). An ISO 8601 date-time, as sent.
   */
  readonly resetsAt: string | undefined;
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
    this.budgetId = init.budgetId;
    this.resetsAt = init.resetsAt;
    this.requestId = init.requestId;
    this.fields = init.fields;
    this.body = init.body;
  }

  /**
   * A budget refused the call: the webhook proxy's 403 and the AI proxy's 429 `BUDGET_EXCEEDED`
   * (`budgetId`, `resetsAt`). Buying credits does not lift it; its window's reset or a higher limit does.
   */
  get isBudgetExceeded(): boolean {
    return this.code === 'BUDGET_EXCEEDED' || this.error === 'budget_exceeded';
  }

  /**
   * The platform could not be reached or answered with a transient failure: the same call may succeed
   * later. Never true for an answer that said `x-should-retry: false`, whatever its status, nor for a
   * budget's refusal, with or without that header (it holds until `resetsAt`).
   */
  get isTransient(): boolean {
    if (this.shouldRetry === false || this.isBudgetExceeded) return false;
    if (this.code === 'NETWORK_ERROR' || this.code === 'TIMEOUT') return true;
    if (this.code === 'IDEMPOTENCY_IN_PROGRESS') return true;
    return this.status !== null && RETRYABLE_STATUSES.has(this.status);
  }
}

export function isCreditgateError(value: unknown): value is CreditgateError {
  return value instanceof CreditgateError;
}

/** A refusal by a budget (docs/budgets.md, Enforcement), whichever way it came. */
export interface BudgetRefusal {
  /** The budget that refused: the most restrictive when several would be crossed. */
  budgetId: string | undefined;
  /** When that budget's window ends and the count starts over (ISO 8601). */
  resetsAt: string | undefined;
  /** What the call costs, where the answer says so. */
  creditsRequired: number | undefined;
  /** The balance, where the answer says so (null: unlimited). */
  creditsAvailable: number | null | undefined;
}

/**
 * The budget refusal in a check answer (`allowed: false`, `reason: "budget_exceeded"`), a record answer
 * (`success: false`, `error: "budget_exceeded"`), both with `payment_required`, or a CreditgateError
 * with `isBudgetExceeded` (the webhook proxy, the AI proxy); undefined for anything else.
 *
 * ```ts
 * const check = await cg.stdio.checkEntitlement({ tool_name: 'search' });
 * const budget = budgetRefusal(check);
 * if (budget) console.log(`over budget ${budget.budgetId} until ${budget.resetsAt}`);
 * ```
 */
export function budgetRefusal(value: unknown): BudgetRefusal | undefined {
  if (value instanceof CreditgateError) {
    if (!value.isBudgetExceeded) return undefined;
    return { budgetId: value.budgetId, resetsAt: value.resetsAt, creditsRequired: value.creditsRequired, creditsAvailable: value.creditsAvailable };
  }
  if (value === null || typeof value !== 'object') return undefined;
  const paymentRequired = (value as { payment_required?: unknown }).payment_required;
  if (paymentRequired === null || typeof paymentRequired !== 'object') return undefined;
  const p = paymentRequired as Record<string, unknown>;
  if (p.reason !== 'budget_exceeded') return undefined;
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
  const num = (v: unknown) => (typeof v === 'number' ? v : undefined);
  return {
    budgetId: str(p.budget_id),
    resetsAt: str(p.resets_at),
    creditsRequired: num(p.credits_required),
    creditsAvailable: p.credits_available === null ? null : num(p.credits_available),
  };
}

export function isRetryableStatus(status: number): boolean {
  return RETRYABLE_STATUSES.has(status);
}
