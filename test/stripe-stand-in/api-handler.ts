import type { IncomingMessage, ServerResponse } from 'node:http';
import { matchApiRoute } from './api-routes.js';
import { randomToken } from './clock.js';
import { StripeApiError } from './errors.js';
import { API_VERSION, type EventOrigin } from './events.js';
import { parseForm, rejectUnknown } from './forms.js';
import { type createFaults, type createIdempotencyStore, faultBody, presentedKey, readBody, sendJson } from './http.js';
import { type StandInContext, snapshot } from './state.js';

export interface ApiDeps {
  ctx: StandInContext;
  secretKey: string;
  idempotency: ReturnType<typeof createIdempotencyStore>;
  faults: ReturnType<typeof createFaults>;
  /** The context's `emit`, stamping events with the request they came from. */
  emitFor(origin: EventOrigin): StandInContext['emit'];
  onRequest?: (line: string) => void;
}

/** One `/v1/…` request: key, injected fault, idempotency replay, then the route. */
export async function handleApi(deps: ApiDeps, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const method = req.method ?? 'GET';
  const requestId = `req_${randomToken(14)}`;
  const headers = { 'Request-Id': requestId, 'Stripe-Version': API_VERSION };
  const bodyText = method === 'POST' ? await readBody(req) : url.search.slice(1);
  const status = answer(deps, { method, path: url.pathname, bodyText, requestId, req }, (code, body, extra = {}) =>
    sendJson(res, code, body, { ...headers, ...extra }),
  );
  deps.onRequest?.(`${method} ${url.pathname} → ${status}`);
}

interface ApiRequest {
  method: string;
  path: string;
  bodyText: string;
  requestId: string;
  req: IncomingMessage;
}

type Send = (status: number, body: unknown, extraHeaders?: Record<string, string>) => void;

function answer(deps: ApiDeps, request: ApiRequest, send: Send): number {
  const key = presentedKey(request.req);
  if (key !== deps.secretKey) {
    const shown = key ? `: ${key.slice(0, 8)}${'*'.repeat(Math.max(0, key.length - 12))}${key.slice(-4)}` : '';
    return fail(send, new StripeApiError(401, { type: 'invalid_request_error', message: `Invalid API Key provided${shown}` }));
  }
  const fault = deps.faults.take(request.path);
  if (fault) return fail(send, new StripeApiError(fault.status, faultBody(fault.status)));
  const matched = matchApiRoute(request.method, request.path);
  if (!matched) {
    const message = `Unrecognized request URL (${request.method}: ${request.path}). The Stripe stand-in models only the endpoints in its README.`;
    return fail(send, new StripeApiError(404, { type: 'invalid_request_error', message }));
  }
  const idempotencyKey = request.method === 'POST' ? headerValue(request.req, 'idempotency-key') : undefined;
  if (idempotencyKey) {
    const found = deps.idempotency.lookup(idempotencyKey, request.method, request.path, request.bodyText);
    if (found.kind === 'replay') {
      send(found.status, found.body, { 'Idempotent-Replayed': 'true', 'Original-Request': request.requestId });
      return found.status;
    }
    if (found.kind === 'mismatch') return fail(send, idempotencyMismatch(idempotencyKey));
  }
  try {
    const form = parseForm(request.bodyText);
    rejectUnknown(form, matched.route.allowed);
    const ctx = { ...deps.ctx, emit: deps.emitFor({ id: request.requestId, idempotency_key: idempotencyKey ?? null }) };
    const body = snapshot(matched.route.handle(ctx, form, matched.id));
    if (idempotencyKey) {
      deps.idempotency.store(idempotencyKey, { method: request.method, path: request.path, requestBody: request.bodyText, status: 200, body });
    }
    send(200, body);
    return 200;
  } catch (error) {
    // As Stripe does, a card decline (402) already happened (a PaymentIntent, a failed charge, an event):
    // its answer is stored under the key and replayed, so a retry declines again without a second attempt.
    if (error instanceof StripeApiError && error.status === 402 && idempotencyKey) {
      deps.idempotency.store(idempotencyKey, { method: request.method, path: request.path, requestBody: request.bodyText, status: 402, body: { error: error.body } });
    }
    if (error instanceof StripeApiError) return fail(send, error);
    return fail(send, new StripeApiError(500, { type: 'api_error', message: `Stripe stand-in bug: ${(error as Error).message}` }));
  }
}

function fail(send: Send, error: StripeApiError): number {
  send(error.status, { error: error.body });
  return error.status;
}

function idempotencyMismatch(key: string): StripeApiError {
  return new StripeApiError(400, {
    type: 'idempotency_error',
    message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
  });
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
