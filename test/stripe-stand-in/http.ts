import type { IncomingMessage, ServerResponse } from 'node:http';
import type { StripeErrorBody } from './errors.js';

const MAX_BODY_BYTES = 1024 * 1024;

export async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new Error('request body too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body, null, 2);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function sendHtml(res: ServerResponse, status: number, html: string): void {
  res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8', 'Content-Length': Buffer.byteLength(html) });
  res.end(html);
}

export function redirect(res: ServerResponse, location: string): void {
  res.writeHead(303, { Location: location, 'Content-Length': 0 });
  res.end();
}

/** The secret key of `Authorization: Bearer sk_…` (or Basic `sk_…:`, as curl -u sends it), or null. */
export function presentedKey(req: IncomingMessage): string | null {
  const header = req.headers.authorization ?? '';
  const bearer = /^Bearer\s+(\S+)$/i.exec(header);
  if (bearer) return bearer[1] ?? null;
  const basic = /^Basic\s+(\S+)$/i.exec(header);
  if (basic) return Buffer.from(basic[1] ?? '', 'base64').toString('utf8').split(':')[0] ?? null;
  return null;
}

/** A browser's form post (the checkout and portal pages) wants a redirect; an API client wants JSON. */
export function wantsHtml(req: IncomingMessage): boolean {
  return (req.headers.accept ?? '').includes('text/html');
}

interface StoredAnswer {
  method: string;
  path: string;
  requestBody: string;
  status: number;
  body: unknown;
}

export type IdempotencyLookup = { kind: 'new' } | { kind: 'replay'; status: number; body: unknown } | { kind: 'mismatch' };

/**
 * Stripe's idempotency: the first successful answer to a key is stored; the same key with the same
 * request answers it again with no second effect, the same key with another request is a 400
 * `idempotency_error`. Answers that failed (4xx validation, injected faults) are not stored, so a
 * retry runs again, as Stripe does for requests that did not start executing; a 402 card decline is
 * stored (api-handler.ts), since the attempt was made.
 */
export function createIdempotencyStore() {
  const answers = new Map<string, StoredAnswer>();
  return {
    lookup(key: string, method: string, path: string, requestBody: string): IdempotencyLookup {
      const stored = answers.get(key);
      if (!stored) return { kind: 'new' };
      if (stored.method !== method || stored.path !== path || stored.requestBody !== requestBody) return { kind: 'mismatch' };
      return { kind: 'replay', status: stored.status, body: stored.body };
    },
    store(key: string, answer: StoredAnswer): void {
      answers.set(key, answer);
    },
  };
}

export interface FaultRule {
  remaining: number;
  status: number;
  path?: RegExp;
}

/** Injected API failures: the next matching requests answer `status` with an `api_error` and change nothing. */
export function createFaults() {
  const rules: FaultRule[] = [];
  return {
    add(count: number, status = 500, path?: RegExp): void {
      if (count > 0) rules.push({ remaining: count, status, ...(path ? { path } : {}) });
    },
    take(path: string): FaultRule | undefined {
      const rule = rules.find((r) => r.remaining > 0 && (!r.path || r.path.test(path)));
      if (!rule) return undefined;
      rule.remaining -= 1;
      if (rule.remaining === 0) rules.splice(rules.indexOf(rule), 1);
      return rule;
    },
    pending: (): FaultRule[] => rules.map((r) => ({ ...r })),
  };
}

export function faultBody(status: number): StripeErrorBody {
  return {
    type: 'api_error',
    message: `An error occurred with our connection to Stripe. (Fault injected by the Stripe stand-in: ${status}.)`,
    ...(status === 429 ? { code: 'rate_limit' } : {}),
  };
}
