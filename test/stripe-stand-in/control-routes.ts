import type { IncomingMessage, ServerResponse } from 'node:http';
import { StripeApiError } from './errors.js';
import type { CardBehaviour } from './objects.js';
import { CARD_BEHAVIOURS } from './payment-methods.js';
import { readBody, redirect, sendHtml, sendJson, wantsHtml } from './http.js';
import { checkoutPage, invoicePage, notFoundPage, portalPage } from './pages.js';
import type { StripeStandIn } from './server.js';

/** A control request's fields, from JSON or from a page's form post. */
type ControlBody = Record<string, unknown>;

interface ControlRoute {
  method: 'GET' | 'POST';
  pattern: RegExp;
  run(standIn: StripeStandIn, body: ControlBody, id: string): unknown;
  /** Where a browser goes after the form post. */
  redirectTo?(standIn: StripeStandIn, body: ControlBody, id: string): string;
}

function flag(body: ControlBody, name: string): boolean {
  const value = body[name];
  return value === true || value === 'true' || value === '1' || value === 'on';
}

function num(body: ControlBody, name: string): number | undefined {
  const value = body[name];
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new StripeApiError(400, { type: 'invalid_request_error', message: `${name} must be a number`, param: name });
  return n;
}

function str(body: ControlBody, name: string): string | undefined {
  const value = body[name];
  return value === undefined || value === '' ? undefined : String(value);
}

/** `true`/`false` when sent, `undefined` when absent. */
function optionalFlag(body: ControlBody, name: string): boolean | undefined {
  return body[name] === undefined || body[name] === '' ? undefined : flag(body, name);
}

function behaviour(body: ControlBody, name: string): CardBehaviour | undefined {
  const value = str(body, name);
  if (value === undefined) return undefined;
  if (!(CARD_BEHAVIOURS as readonly string[]).includes(value)) {
    throw new StripeApiError(400, { type: 'invalid_request_error', message: `${name} must be one of ${CARD_BEHAVIOURS.join(', ')}`, param: name });
  }
  return value as CardBehaviour;
}

function backToPortal(_s: StripeStandIn, body: ControlBody, id: string): string {
  const portal = str(body, 'portal');
  return portal ? `/portal/${encodeURIComponent(portal)}` : `/_stand-in/state#${id}`;
}

function afterCheckout(standIn: StripeStandIn, _body: ControlBody, id: string): string {
  const session = standIn.state.checkoutSessions.get(id);
  const success = session?.status === 'complete' ? session.success_url : null;
  return success ? success.replaceAll('{CHECKOUT_SESSION_ID}', id) : `/checkout/${encodeURIComponent(id)}`;
}

const CONTROL_ROUTES: readonly ControlRoute[] = [
  {
    method: 'POST',
    pattern: /^\/_stand-in\/checkout\/([^/]+)\/complete$/,
    run: (s, b, id) => {
      const card = behaviour(b, 'card');
      return s.completeCheckout(id, { asyncPayment: flag(b, 'async_payment'), fail: flag(b, 'fail'), ...(card ? { card } : {}) });
    },
    redirectTo: afterCheckout,
  },
  { method: 'POST', pattern: /^\/_stand-in\/checkout\/([^/]+)\/settle$/, run: (s, _b, id) => s.settleAsyncPayment(id) },
  { method: 'POST', pattern: /^\/_stand-in\/checkout\/([^/]+)\/expire$/, run: (s, _b, id) => s.expireCheckout(id) },
  { method: 'POST', pattern: /^\/_stand-in\/subscriptions\/([^/]+)\/advance$/, run: (s, _b, id) => s.advanceSubscription(id), redirectTo: backToPortal },
  { method: 'POST', pattern: /^\/_stand-in\/subscriptions\/([^/]+)\/fail-renewal$/, run: (s, _b, id) => s.failRenewal(id), redirectTo: backToPortal },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/subscriptions\/([^/]+)\/cancel$/,
    run: (s, b, id) => s.cancelSubscription(id, { atPeriodEnd: flag(b, 'at_period_end') }),
    redirectTo: backToPortal,
  },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/customers\/([^/]+)\/payment_methods$/,
    run: (s, b, id) => {
      const card = behaviour(b, 'behaviour');
      const makeDefault = optionalFlag(b, 'make_default');
      return s.savePaymentMethod(id, { ...(card ? { behaviour: card } : {}), ...(makeDefault === undefined ? {} : { makeDefault }) });
    },
  },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/payment_methods\/([^/]+)\/behaviour$/,
    run: (s, b, id) => {
      const card = behaviour(b, 'behaviour');
      if (!card) throw new StripeApiError(400, { type: 'invalid_request_error', message: 'Missing behaviour', param: 'behaviour' });
      return s.setCardBehaviour(id, card);
    },
  },
  { method: 'POST', pattern: /^\/_stand-in\/invoices\/([^/]+)\/pay$/, run: (s, _b, id) => s.payInvoice(id), redirectTo: (_s, _b, id) => `/invoices/${id}` },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/clock$/,
    run: (s, b) => {
      const now = s.advanceClock(num(b, 'advance_seconds') ?? 0);
      return { now: now.toISOString(), unix: Math.floor(now.getTime() / 1000) };
    },
  },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/faults$/,
    run: (s, b) => {
      const path = str(b, 'path');
      s.failNext(num(b, 'count') ?? 1, { status: num(b, 'status') ?? 500, ...(path ? { path: new RegExp(path) } : {}) });
      return { ok: true };
    },
  },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/prices$/,
    run: (s, b) => {
      const interval = str(b, 'interval');
      if (interval !== undefined && interval !== 'month' && interval !== 'year') {
        throw new StripeApiError(400, { type: 'invalid_request_error', message: 'interval must be month or year', param: 'interval' });
      }
      return s.createPrice({
        product: str(b, 'product'),
        productName: str(b, 'product') ? undefined : (str(b, 'name') ?? 'Stand-in product'),
        unitAmount: num(b, 'unit_amount') ?? 0,
        currency: str(b, 'currency'),
        interval,
        lookupKey: str(b, 'lookup_key'),
      });
    },
  },
  { method: 'POST', pattern: /^\/_stand-in\/flush$/, run: (s, b) => s.flush({ order: str(b, 'order') === 'reverse' ? 'reverse' : 'created' }) },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/events\/([^/]+)\/deliver$/,
    run: (s, b, id) => s.deliverEvent(id, { times: num(b, 'times') ?? 1, concurrently: flag(b, 'concurrently') }),
  },
  {
    method: 'POST',
    pattern: /^\/_stand-in\/events\/([^/]+)\/resend$/,
    run: (s, b, id) => {
      const signedAt = num(b, 'signed_at');
      return s.resend(id, signedAt === undefined ? {} : { signedAt: new Date(signedAt * 1000) });
    },
  },
  { method: 'GET', pattern: /^\/_stand-in\/events$/, run: (s) => s.events() },
  { method: 'GET', pattern: /^\/_stand-in\/queue$/, run: (s) => s.queue() },
  { method: 'GET', pattern: /^\/_stand-in\/deliveries$/, run: (s) => s.deliveries() },
  { method: 'GET', pattern: /^\/_stand-in\/meter_events$/, run: (s) => s.meterEvents() },
  {
    method: 'GET',
    pattern: /^\/_stand-in\/state$/,
    run: (s) => Object.fromEntries(Object.entries(s.state).map(([name, value]) => [name, value instanceof Map ? [...value.values()] : value])),
  },
];

async function readControlBody(req: IncomingMessage): Promise<ControlBody> {
  const text = await readBody(req);
  if (!text.trim()) return {};
  if ((req.headers['content-type'] ?? '').includes('json')) {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('the body must be a JSON object');
    return parsed as ControlBody;
  }
  return Object.fromEntries(new URLSearchParams(text));
}

/** `/_stand-in/…`: simulated customer actions, time, faults and delivery controls. No key needed. */
export async function handleControl(standIn: StripeStandIn, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const method = req.method ?? 'GET';
  const match = CONTROL_ROUTES.map((route) => ({ route, found: route.method === method ? route.pattern.exec(url.pathname) : null })).find((m) => m.found);
  if (!match?.found) return sendJson(res, 404, { error: { type: 'invalid_request_error', message: `No stand-in control ${method} ${url.pathname}` } });
  const id = decodeURIComponent(match.found[1] ?? '');
  try {
    const body = method === 'POST' ? await readControlBody(req) : {};
    const result = await match.route.run(standIn, body, id);
    if (match.route.redirectTo && wantsHtml(req)) return redirect(res, match.route.redirectTo(standIn, body, id));
    sendJson(res, 200, result);
  } catch (error) {
    if (error instanceof StripeApiError) return sendJson(res, error.status, { error: error.body });
    sendJson(res, 400, { error: { type: 'invalid_request_error', message: (error as Error).message } });
  }
}

/** `GET /checkout/<id>`, `/portal/<id>`, `/invoices/<id>`: the hosted pages. */
export function handlePage(standIn: StripeStandIn, res: ServerResponse, url: URL): boolean {
  const match = /^\/(checkout|portal|invoices)\/([^/]+)$/.exec(url.pathname);
  if (!match) return false;
  const [, kind, rawId] = match;
  const id = decodeURIComponent(rawId ?? '');
  const state = standIn.state;
  const html =
    kind === 'checkout'
      ? mapped(state.checkoutSessions.get(id), (s) => checkoutPage(state, s))
      : kind === 'portal'
        ? mapped(state.portalSessions.get(id), (s) => portalPage(state, s))
        : invoicePage(state, id);
  sendHtml(res, html ? 200 : 404, html ?? notFoundPage(kind ?? 'page'));
  return true;
}

function mapped<T, R>(value: T | undefined, fn: (v: T) => R): R | undefined {
  return value === undefined ? undefined : fn(value);
}
