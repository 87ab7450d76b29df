import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { budgetRefusal, type ClientOptions, type Credentials, CreditgateError, createClient } from '@creditgate/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, type Tenant } from '../../../test/harness.js';
import { type LiveService, type Relay, startLiveService, startRelay } from './support.js';

/**
 * The client's transport against real loopback servers that misbehave on purpose (no mocks of our
 * modules): configuration mistakes, nothing listening, HTML from a proxy, silence, 429/503 with and
 * without Retry-After, lost answers. Waits between attempts are recorded through the `sleep` option.
 */

interface Seen {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}
/** A scripted answer; 'hang' never answers, 'hang-body' sends headers and then nothing. */
type Scripted = { status: number; headers?: Record<string, string>; body?: string } | 'hang' | 'hang-body';
interface StandIn {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

const opened: StandIn[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((s) => s.close()));
});

/** A loopback HTTP server answering from a script, the last answer repeating. */
async function standIn(...script: Scripted[]): Promise<StandIn> {
  const seen: Seen[] = [];
  const server = createServer((req, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      seen.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body });
      const answer = script[Math.min(seen.length - 1, script.length - 1)]!;
      if (answer === 'hang') return;
      if (answer === 'hang-body') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"allowed":');
        return;
      }
      res.writeHead(answer.status, answer.headers ?? { 'content-type': 'application/json' });
      res.end(answer.body ?? '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const s: StandIn = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  opened.push(s);
  return s;
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Scripted => ({
  status,
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});
const unavailable = json(503, { error: 'service_unavailable', code: 'SERVICE_UNAVAILABLE', message: 'try again' });
const costs = json(200, { costs: [{ action: 'task_basic', credits: 1, description: null }] });
const everyCredential: Credentials = { apiKey: 'cg_test', serviceKey: 'svc', deploymentId: randomUUID(), deploymentSecret: 'cgds_test' };

/** A client whose waits are recorded, not slept. */
function recorded(baseUrl: string, options: Partial<ClientOptions> = {}) {
  const sleeps: number[] = [];
  const c = createClient(everyCredential, { baseUrl, sleep: async (ms) => void sleeps.push(ms), random: () => 0.5, ...options });
  return { c, sleeps };
}
async function rejection(promise: Promise<unknown>): Promise<CreditgateError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CreditgateError);
  return err as CreditgateError;
}
function thrown(fn: () => unknown): CreditgateError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CreditgateError);
    return err as CreditgateError;
  }
  throw new Error('expected a synchronous throw');
}

describe('configuration', () => {
  it('no usable credentials or base URL: CONFIGURATION_ERROR thrown synchronously', () => {
    const baseUrl = 'http://127.0.0.1:1';
    const cases: Array<[string, () => unknown]> = [
      ['no credentials', () => createClient({}, { baseUrl })],
      ['null credentials', () => createClient(null as unknown as Credentials, { baseUrl })],
      ['empty apiKey', () => createClient({ apiKey: '' }, { baseUrl })],
      ['blank serviceKey', () => createClient({ serviceKey: '   ' }, { baseUrl })],
      ['deployment id without secret', () => createClient({ deploymentId: randomUUID() }, { baseUrl })],
      ['not a url', () => createClient({ apiKey: 'cg_x' }, { baseUrl: 'not a url' })],
      ['ftp', () => createClient({ apiKey: 'cg_x' }, { baseUrl: 'ftp://x' })],
      ['empty baseUrl', () => createClient({ apiKey: 'cg_x' }, { baseUrl: '' })],
      ['negative timeout', () => createClient({ apiKey: 'cg_x' }, { baseUrl, timeoutMs: -1 })],
      ['NaN retries', () => createClient({ apiKey: 'cg_x' }, { baseUrl, retries: Number.NaN })],
    ];
    for (const [name, make] of cases) {
      const err = thrown(make);
      expect(err.code, name).toBe('CONFIGURATION_ERROR');
      expect(err.status, name).toBeNull();
    }
  });
});

describe('base URL', () => {
  it('a path prefix is kept, with or without the trailing slash', async () => {
    const s = await standIn(costs);
    for (const prefix of ['/creditgate', '/creditgate/']) await recorded(`${s.url}${prefix}`).c.service.creditCosts();
    expect(s.seen.map((r) => r.path)).toEqual(['/creditgate/api/v1/mcp/credit-costs', '/creditgate/api/v1/mcp/credit-costs']);
    expect(s.seen[0]!.headers['x-mcp-service-key']).toBe('svc');
  });
});

describe('no usable answer', () => {
  it('nothing listening: NETWORK_ERROR naming the URL after the retries, and no unhandled rejection', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const { c, sleeps } = recorded(`http://127.0.0.1:${port}`);
      const err = await rejection(c.service.creditCosts());
      expect(err).toMatchObject({ code: 'NETWORK_ERROR', status: null, isTransient: true });
      expect(err.message).toContain(`http://127.0.0.1:${port}`);
      expect(sleeps).toHaveLength(2);
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('a 502 HTML page from a proxy: INVALID_RESPONSE with status 502, retried, then thrown', async () => {
    const s = await standIn({ status: 502, headers: { 'content-type': 'text/html' }, body: '<html><h1>502 Bad Gateway</h1></html>' });
    const { c, sleeps } = recorded(s.url);
    const err = await rejection(c.service.creditCosts());
    expect(err).toMatchObject({ code: 'INVALID_RESPONSE', status: 502 });
    expect(err.message).toContain('502');
    expect(err.body).toContain('Bad Gateway');
    expect(s.seen).toHaveLength(3);
    expect(sleeps).toHaveLength(2);
  });

  it('a 200 HTML login page: INVALID_RESPONSE, not retried', async () => {
    const s = await standIn({ status: 200, headers: { 'content-type': 'text/html' }, body: '<form action="/login">Sign in</form>' });
    const { c, sleeps } = recorded(s.url);
    const err = await rejection(c.service.creditCosts());
    expect(err).toMatchObject({ code: 'INVALID_RESPONSE', status: 200, isTransient: false });
    expect(s.seen).toHaveLength(1);
    expect(sleeps).toEqual([]);
  });

  it('a redirect (a proxy sending to its login) is not followed: INVALID_RESPONSE with the 302, not retried', async () => {
    const s = await standIn({ status: 302, headers: { location: '/login' } });
    const { c } = recorded(s.url);
    expect(await rejection(c.service.creditCosts())).toMatchObject({ code: 'INVALID_RESPONSE', status: 302 });
    expect(s.seen.map((r) => r.path)).toEqual(['/api/v1/mcp/credit-costs']);
  });

  it('no answer within timeoutMs: TIMEOUT, whether the headers or the body never come', async () => {
    for (const silence of ['hang', 'hang-body'] as const) {
      const s = await standIn(silence);
      const { c } = recorded(s.url, { timeoutMs: 200, retries: 0 });
      const started = Date.now();
      const err = await rejection(c.stdio.checkEntitlement({ tool_name: 'search' }));
      expect(err, silence).toMatchObject({ code: 'TIMEOUT', status: null, isTransient: true });
      expect(Date.now() - started).toBeLessThan(5_000);
    }
  });
});

describe('retries', () => {
  it('429 with Retry-After: 2 → waits 2 s (as recorded), then succeeds', async () => {
    const s = await standIn(json(429, { error: 'rate_limit_exceeded', code: 'RATE_LIMITED', message: 'Retry in 2 seconds.' }, { 'retry-after': '2' }), costs);
    const { c, sleeps } = recorded(s.url);
    expect((await c.service.creditCosts()).costs).toHaveLength(1);
    expect(sleeps).toEqual([2000]);
    expect(s.seen).toHaveLength(2);
  });

  it('Retry-After as an HTTP date on a 503 is waited for too', async () => {
    const at = new Date(Date.now() + 4_000).toUTCString();
    const s = await standIn(json(503, { error: 'service_unavailable', code: 'SERVICE_UNAVAILABLE', message: 'later' }, { 'retry-after': at }), costs);
    const { c, sleeps } = recorded(s.url);
    await c.service.creditCosts();
    expect(sleeps).toHaveLength(1);
    // The date has whole seconds: between 2 and 4 s from now, whatever the millisecond it was made at.
    expect(sleeps[0]).toBeGreaterThanOrEqual(2_000);
    expect(sleeps[0]).toBeLessThanOrEqual(4_000);
  });

  it('a Retry-After longer than maxRetryDelayMs is not waited for: thrown at once with retryAfterSeconds', async () => {
    const s = await standIn(json(429, { error: 'rate_limit_exceeded', code: 'RATE_LIMITED', message: 'Retry in 30 seconds.' }, { 'retry-after': '30' }), costs);
    const { c, sleeps } = recorded(s.url, { maxRetryDelayMs: 5_000 });
    const err = await rejection(c.service.creditCosts());
    expect(err).toMatchObject({ code: 'RATE_LIMITED', status: 429, error: 'rate_limit_exceeded', retryAfterSeconds: 30 });
    expect(sleeps).toEqual([]);
    expect(s.seen).toHaveLength(1);
  });

  it('x-should-retry: false is tried exactly once, whatever its status and Retry-After; without it the same 429 is retried', async () => {
    const refusal = { error: 'quota_exceeded', code: 'AI_QUOTA_EXCEEDED', message: 'Used up until the reset.', resets_at: '2026-02-01T00:00:00.000Z' };
    const final = await standIn(json(429, refusal, { 'retry-after': '1', 'x-should-retry': 'false' }), costs);
    const once = recorded(final.url);
    const err = await rejection(once.c.service.creditCosts());
    expect(err).toMatchObject({ code: 'AI_QUOTA_EXCEEDED', status: 429, retryAfterSeconds: 1, shouldRetry: false, isTransient: false });
    expect(final.seen).toHaveLength(1);
    expect(once.sleeps).toEqual([]);
    // Not JSON (a proxy's page) but still told not to retry: the header is read there too.
    const page = await standIn({ status: 503, headers: { 'content-type': 'text/html', 'x-should-retry': 'False' }, body: '<html/>' }, costs);
    const proxied = await rejection(recorded(page.url).c.service.creditCosts());
    expect(proxied).toMatchObject({ code: 'INVALID_RESPONSE', status: 503, shouldRetry: false, isTransient: false });
    expect(page.seen).toHaveLength(1);
    // Without the header (and with `true`, which changes nothing) a 429 is retried after its Retry-After.
    for (const extra of [{}, { 'x-should-retry': 'true' }] as Array<Record<string, string>>) {
      const limited = await standIn(json(429, { error: 'rate_limit_exceeded', code: 'RATE_LIMITED', message: 'wait' }, { 'retry-after': '1', ...extra }), costs);
      const again = recorded(limited.url);
      expect((await again.c.service.creditCosts()).costs).toHaveLength(1);
      expect(again.sleeps).toEqual([1000]);
      expect(limited.seen).toHaveLength(2);
    }
    // `true` on a status the client does not retry does not make it retried.
    const invalid = await standIn(json(400, { error: 'invalid_request', code: 'INVALID_REQUEST', message: 'no' }, { 'x-should-retry': 'true' }), costs);
    expect(await rejection(recorded(invalid.url).c.service.creditCosts())).toMatchObject({ status: 400, shouldRetry: true, isTransient: false });
    expect(invalid.seen).toHaveLength(1);
  });

  it('503 twice then success: full-jitter waits of random × base × 2^attempt, capped at maxRetryDelayMs', async () => {
    const s = await standIn(unavailable, unavailable, costs);
    const { c, sleeps } = recorded(s.url, { retryBaseMs: 100 });
    await c.service.creditCosts();
    expect(sleeps).toEqual([50, 100]);
    const capped = await standIn(unavailable, unavailable, unavailable, costs);
    const slow = recorded(capped.url, { retryBaseMs: 1_000, maxRetryDelayMs: 1_500, retries: 3 });
    await slow.c.service.creditCosts();
    expect(slow.sleeps).toEqual([500, 750, 750]);
    expect(capped.seen).toHaveLength(4);
  });

  it('every retried write carries an idempotency id, the same one on every attempt', async () => {
    const ok = json(200, { success: true, credits_used: 1, credits_remaining: 5, error: null, usage_id: randomUUID(), invocation_id: 'x' });
    const writes: Array<[string, string, (c: ReturnType<typeof recorded>['c']) => Promise<unknown>]> = [
      ['stdio record', 'invocation_id', (c) => c.stdio.recordUsage({ tool_name: 'search' })],
      ['service usage', 'invocation_id', (c) => c.service.recordUsage({ deployment_id: randomUUID(), tool_name: 'search' })],
      ['stdio reserve', 'invocation_id', (c) => c.stdio.checkEntitlement({ tool_name: 'search', reserve: true })],
      ['service reserve', 'invocation_id', (c) => c.service.checkEntitlement({ deployment_id: randomUUID(), tool_name: 'search', reserve: true })],
      ['refund', 'idempotency_key', (c) => c.refundUsage(randomUUID(), { reason: 'tool failed' })],
      ['webhook send', 'idempotency_key', (c) => c.webhooks.send({ url: 'https://example.com/hook', payload: { a: 1 } })],
    ];
    for (const [name, field, call] of writes) {
      const s = await standIn(unavailable, { status: 502, headers: { 'content-type': 'text/html' }, body: '<html/>' }, ok);
      await call(recorded(s.url).c);
      expect(s.seen, name).toHaveLength(3);
      const ids = s.seen.map((r) => (JSON.parse(r.body) as Record<string, unknown>)[field]);
      expect(typeof ids[0], name).toBe('string');
      expect((ids[0] as string).length, name).toBeGreaterThan(0);
      expect(new Set(ids).size, `${name}: ${ids.join(', ')}`).toBe(1);
    }
  });

  it("a budget's refusal is tried once, with or without x-should-retry: the AI proxy's 429 BUDGET_EXCEEDED carries budgetId and resetsAt", async () => {
    const budgetId = randomUUID();
    const resetsAt = '2026-02-01T00:00:00.000Z';
    const refusal = { error: 'budget_exceeded', code: 'BUDGET_EXCEEDED', message: 'A budget of this organization would be exceeded', budget_id: budgetId, resets_at: resetsAt };
    const quota = json(200, { tier: 'launch', used: 0, limit: 1, remaining: 1, resets_at: resetsAt, credits_available: 0 });
    // As the AI proxy answers it, and as a proxy in between might pass it on (the header dropped).
    for (const headers of [{ 'x-should-retry': 'false', 'retry-after': '1' }, { 'retry-after': '1' }, {}] as Array<Record<string, string>>) {
      const s = await standIn(json(429, refusal, headers), quota);
      const { c, sleeps } = recorded(s.url);
      const err = await rejection(c.ai.quota());
      expect(err, JSON.stringify(headers)).toMatchObject({ code: 'BUDGET_EXCEEDED', status: 429, error: 'budget_exceeded', budgetId, resetsAt, isBudgetExceeded: true, isTransient: false });
      expect(budgetRefusal(err)).toEqual({ budgetId, resetsAt, creditsRequired: undefined, creditsAvailable: undefined });
      expect(s.seen).toHaveLength(1);
      expect(sleeps).toEqual([]);
    }
    // The same fields spelt in camelCase, as the webhook proxy spells its credits.
    const camel = await standIn(json(403, { error: 'budget_exceeded', code: 'BUDGET_EXCEEDED', message: 'over', budgetId, resetsAt, creditsRequired: 1 }));
    expect(budgetRefusal(await rejection(recorded(camel.url).c.webhooks.quota()))).toEqual({ budgetId, resetsAt, creditsRequired: 1, creditsAvailable: undefined });
    // An AI quota refusal has resetsAt but is not a budget's.
    const spent = await standIn(json(429, { error: 'quota_exceeded', code: 'AI_QUOTA_EXCEEDED', message: 'used up', resets_at: resetsAt }, { 'x-should-retry': 'false' }));
    const quotaErr = await rejection(recorded(spent.url).c.ai.quota());
    expect(quotaErr).toMatchObject({ code: 'AI_QUOTA_EXCEEDED', resetsAt, budgetId: undefined, isBudgetExceeded: false });
    expect(budgetRefusal(quotaErr)).toBeUndefined();
  });

  it('budgets: reads and changes are retried, a create or a delete is sent once (the route takes no idempotency key)', async () => {
    const org = randomUUID();
    const budget = randomUUID();
    const ok = (data: unknown) => json(200, { success: true, data, message: 'OK' });
    const busy = json(503, { success: false, error: { code: 'SERVICE_UNAVAILABLE', message: 'busy' }, details: { timestamp: '2026-01-01T00:00:00.000Z' } });
    const list = await standIn(busy, ok([]));
    expect(await recorded(list.url).c.budgets.list(org)).toEqual([]);
    expect(list.seen.map((r) => `${r.method} ${r.path}`)).toEqual([`GET /organizations/${org}/budgets`, `GET /organizations/${org}/budgets`]);
    const update = await standIn(busy, ok({ id: budget }));
    expect(await recorded(update.url).c.budgets.update(org, budget, { limit_credits: null })).toEqual({ id: budget });
    expect(update.seen).toHaveLength(2);
    expect(update.seen.map((r) => JSON.parse(r.body))).toEqual([{ limit_credits: null }, { limit_credits: null }]);
    for (const [name, call] of [
      ['create', (c: ReturnType<typeof recorded>['c']) => c.budgets.create(org, { scope: 'organization', limit_credits: 5, window: 'day' })],
      ['delete', (c: ReturnType<typeof recorded>['c']) => c.budgets.delete(org, budget)],
    ] as const) {
      const s = await standIn(busy, ok({ id: budget }));
      const err = await rejection(call(recorded(s.url).c));
      expect(err, name).toMatchObject({ code: 'SERVICE_UNAVAILABLE', status: 503, message: 'busy', error: null, isTransient: true });
      expect(s.seen, name).toHaveLength(1);
    }
  });

  it('409 IDEMPOTENCY_IN_PROGRESS is retried; 422 IDEMPOTENCY_KEY_REUSED, 400 and 401 are not', async () => {
    const ok = json(200, { success: true, credits_used: 1, credits_remaining: 5, error: null, usage_id: null, invocation_id: 'inv-1' });
    const busy = await standIn(json(409, { error: 'idempotency_in_progress', code: 'IDEMPOTENCY_IN_PROGRESS', message: 'still running' }), ok);
    const first = recorded(busy.url);
    expect(await first.c.stdio.recordUsage({ tool_name: 'search', invocation_id: 'inv-1' })).toMatchObject({ success: true });
    expect(busy.seen).toHaveLength(2);
    expect(first.sleeps).toHaveLength(1);
    for (const [status, code] of [
      [422, 'IDEMPOTENCY_KEY_REUSED'],
      [400, 'INVALID_REQUEST'],
      [401, 'UNAUTHORIZED'],
    ] as const) {
      const s = await standIn(json(status, { error: code.toLowerCase(), code, message: 'no' }), ok);
      const err = await rejection(recorded(s.url).c.stdio.recordUsage({ tool_name: 'search' }));
      expect(err).toMatchObject({ code, status, isTransient: false });
      expect(s.seen, code).toHaveLength(1);
    }
  });
});

describe('against the real service through a relay', () => {
  let live: LiveService;
  let relay: Relay;
  let t: Tenant;
  beforeAll(async () => {
    live = await startLiveService();
    relay = await startRelay(live.baseUrl);
    t = await createTenant(live.h, { tier: 'launch' });
  });
  afterAll(async () => {
    await relay.close();
    await live.close();
  });
  const usageCount = async () =>
    (await live.h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1', [t.deploymentId]))[0]!.n;

  it('relay down → NETWORK_ERROR naming the URL; up → works', async () => {
    const c = createClient({ apiKey: t.apiKey }, { baseUrl: relay.baseUrl, retries: 0 });
    expect((await c.stdio.checkEntitlement({ tool_name: 'search' })).allowed).toBe(true);
    relay.down();
    const err = await rejection(c.stdio.checkEntitlement({ tool_name: 'search' }, { forceRefresh: true }));
    expect(err.code).toBe('NETWORK_ERROR');
    expect(err.message).toContain(relay.baseUrl);
    relay.up();
    expect((await c.stdio.checkEntitlement({ tool_name: 'search' }, { forceRefresh: true })).allowed).toBe(true);
  });

  it('an outage between attempts: the retried record lands once', async () => {
    const before = await usageCount();
    relay.down();
    const c = createClient({ apiKey: t.apiKey }, { baseUrl: relay.baseUrl, sleep: async () => relay.up() });
    expect(await c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ success: true, replayed: false });
    expect(await usageCount()).toBe(before + 1);
  });

  it('an answer lost after the service recorded: the retry is replayed and deducts once', async () => {
    const before = await usageCount();
    let lost = 0;
    // A proxy that forwards to the service and drops the connection instead of the first answer.
    const lossy = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        const upstream = await fetch(`${live.baseUrl}${req.url}`, {
          method: req.method,
          headers: { authorization: req.headers.authorization ?? '', 'content-type': 'application/json' },
          body: Buffer.concat(chunks),
        });
        const text = await upstream.text();
        if (lost++ === 0) return void req.socket.destroy();
        res.writeHead(upstream.status, {
          'content-type': upstream.headers.get('content-type') ?? '',
          'idempotent-replayed': upstream.headers.get('idempotent-replayed') ?? 'false',
        });
        res.end(text);
      });
    });
    await new Promise<void>((resolve) => lossy.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(lossy.address() as AddressInfo).port}`;
      const c = createClient({ apiKey: t.apiKey }, { baseUrl: url, sleep: async () => {} });
      const answer = await c.stdio.recordUsage({ tool_name: 'search' });
      expect(answer).toMatchObject({ success: true, credits_used: 1, replayed: true });
      expect(lost).toBe(2);
      expect(await usageCount()).toBe(before + 1);
    } finally {
      lossy.closeAllConnections();
      await new Promise<void>((resolve) => lossy.close(() => resolve()));
    }
  });
});
