/** The `error` member of Stripe's error answers; the SDK picks its typed error from `type` and the status. */
export interface StripeErrorBody {
  type: 'invalid_request_error' | 'api_error' | 'idempotency_error' | 'card_error';
  message: string;
  param?: string;
  code?: string;
  doc_url?: string;
  /** Card errors: the issuer's reason, the failed charge, and the objects involved (stripe-node exposes them on the error). */
  decline_code?: string;
  charge?: string;
  payment_intent?: object;
  payment_method?: object;
}

/** Thrown anywhere in the stand-in; the HTTP layer turns it into `{ error: body }` with `status`. */
export class StripeApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: StripeErrorBody,
  ) {
    super(body.message);
    this.name = 'StripeApiError';
  }
}

/** 400 naming the offending parameter, as Stripe does for a bad value. */
export function invalidParam(param: string, message: string, code?: string): StripeApiError {
  return new StripeApiError(400, { type: 'invalid_request_error', message, param, ...(code ? { code } : {}) });
}

/** 400 without a parameter: the request is well formed but the state forbids it. */
export function invalidRequest(message: string, code?: string): StripeApiError {
  return new StripeApiError(400, { type: 'invalid_request_error', message, ...(code ? { code } : {}) });
}

/**
 * Stripe's `resource_missing`: 404 when the id is in the URL (`param: 'id'`), 400 when a parameter names a
 * missing object (`param: 'line_items[0][price]'`).
 */
export function noSuch(kind: string, id: string, param = 'id'): StripeApiError {
  return new StripeApiError(param === 'id' ? 404 : 400, {
    type: 'invalid_request_error',
    code: 'resource_missing',
    message: `No such ${kind}: '${id}'`,
    param,
    doc_url: 'https://stripe.com/docs/error-codes/resource-missing',
  });
}

/** The stored object, or Stripe's `resource_missing` naming `param`. */
export function findOrThrow<T>(map: ReadonlyMap<string, T>, id: string, kind: string, param = 'id'): T {
  const found = map.get(id);
  if (found === undefined) throw noSuch(kind, id, param);
  return found;
}
