import { createHmac, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import type { SendReply } from './proxy.js';

/**
 * The webhook proxy (docs/webhooks.md) against real receivers on loopback (private networks allowed for them): signing checked
 * by an independent HMAC and by the standardwebhooks package, each retry rule, timeouts, truncation,
 * methods, idempotency, the one credit per send, and bad input that costs nothing.
 */
let h: Harness;
let rx: Receiver;

beforeAll(async () => {
  // Real time as the start: receivers check signature timestamps against their own clock.
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 400 }, new Date().toISOString());
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});

type Reply = SendReply;

const creds = (t: Tenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });
const send = (t: Tenant, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
  h.request({ method: 'POST', url: '/api/v1/proxy/webhooks/send', headers: { ...creds(t), ...headers }, payload });
const available = async (t: Tenant) =>
  json<{ creditsAvailable: number }>(await h.request({ method: 'GET', url: '/api/v1/proxy/webhooks/quota', headers: creds(t) })).creditsAvailable;
const deliveries = (t: Tenant) =>
  h.deps.db.query<{ id: string; status: string; attempt_count: number; status_code: number | null; delivered_at: Date | null; event_type: string | null }>(
    'SELECT id, status, attempt_count, status_code, delivered_at, event_type FROM webhook_deliveries WHERE deployment_id = $1 ORDER BY created_at',
    [t.deploymentId],
  );

describe('a send', () => {
  it('delivers the payload once, signed; the receiver verifies it independently and with standardwebhooks', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(t);
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    rx.script({ status: 202, body: 'accepted' });
    const res = await send(t, { url: `${rx.url}/hooks?x=1`, payload: { order: 42, items: ['a', 'b'] }, secret, event_type: 'order.paid' });
    expect(res.statusCode).toBe(200);
    const reply = json<Reply>(res);
    expect(reply).toMatchObject({ success: true, statusCode: 202, responseBody: 'accepted', error: null, creditsUsed: 1, creditsRemaining: before - 1, attempts: 1 });
    expect(Date.parse(reply.deliveredAt!)).not.toBeNaN();
    expect(rx.received).toHaveLength(1);
    const got = rx.received[0]!;
    expect(got.method).toBe('POST');
    expect(got.path).toBe('/hooks?x=1');
    expect(JSON.parse(got.body.toString())).toEqual({ order: 42, items: ['a', 'b'] });
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['x-service-event']).toBe('order.paid');
    // x-service-signature: the documented rule written naively, the secret string as given (whsec_ included).
    expect(got.headers['x-service-signature']).toBe(createHmac('sha256', secret).update(got.body).digest('hex'));
    // Not the Standard Webhooks key (the decoded remainder): that one signs webhook-signature only.
    const decoded = Buffer.from(secret.slice('whsec_'.length), 'base64');
    expect(got.headers['x-service-signature']).not.toBe(createHmac('sha256', decoded).update(got.body).digest('hex'));
    expect(got.headers['x-service-webhook-id']).toBe(reply.webhookId);
    expect(Math.abs(Number(got.headers['x-service-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
    // Standard Webhooks, verified by the reference library.
    const verified = new Webhook(secret).verify(got.body.toString(), {
      'webhook-id': String(got.headers['webhook-id']),
      'webhook-timestamp': String(got.headers['webhook-timestamp']),
      'webhook-signature': String(got.headers['webhook-signature']),
    });
    expect(verified).toEqual({ order: 42, items: ['a', 'b'] });
    expect(got.headers['webhook-id']).toBe(reply.webhookId);
    // A delivery record with the documented fields.
    expect(await deliveries(t)).toEqual([
      expect.objectContaining({ id: reply.webhookId, status: 'delivered', attempt_count: 1, status_code: 202, event_type: 'order.paid' }),
    ]);
    expect(await available(t)).toBe(before - 1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('keys a plain (non-whsec_) secret with its UTF-8 bytes; the naive HMAC rule and standardwebhooks verify it', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    rx.script({ status: 200 });
    const secret = 'plain-shared-secret-123-é';
    const reply = json<Reply>(await send(t, { url: rx.url, payload: { a: 1 }, secret }));
    expect(reply).toMatchObject({ success: true, creditsUsed: 1 });
    const got = rx.received[0]!;
    expect(got.headers['x-service-signature']).toBe(createHmac('sha256', secret).update(got.body).digest('hex'));
    // Standard Webhooks keys any other secret with its UTF-8 bytes: the library's raw format.
    const headers = {
      'webhook-id': String(got.headers['webhook-id']),
      'webhook-timestamp': String(got.headers['webhook-timestamp']),
      'webhook-signature': String(got.headers['webhook-signature']),
    };
    expect(new Webhook(Buffer.from(secret, 'utf8'), { format: 'raw' }).verify(got.body.toString(), headers)).toEqual({ a: 1 });
    expect(() => new Webhook(Buffer.from('another-secret', 'utf8'), { format: 'raw' }).verify(got.body.toString(), headers)).toThrow();
  });

  it('uses PUT and PATCH when asked, forwards extra headers and drops hop-by-hop ones, host and content-length', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const method of ['PUT', 'PATCH'] as const) {
      rx.script({ status: 204 });
      const reply = json<Reply>(
        await send(t, {
          url: rx.url,
          method,
          payload: { m: method },
          headers: { 'X-Custom': 'yes', Connection: 'close, x-custom', Host: 'evil.example', 'Content-Length': '1', 'Transfer-Encoding': 'chunked' },
        }),
      );
      expect(reply).toMatchObject({ success: true, statusCode: 204 });
      const got = rx.received[0]!;
      expect(got.method).toBe(method);
      expect(got.headers['x-custom']).toBe('yes');
      expect(got.headers.host).toBe(`127.0.0.1:${rx.port}`);
      expect(got.headers['content-length']).toBe(String(got.body.length));
      expect(got.headers['transfer-encoding']).toBeUndefined();
    }
  });

  it('truncates the receiver’s answer to 4,096 characters', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    rx.script({ status: 200, body: 'x'.repeat(10_000) });
    const reply = json<Reply>(await send(t, { url: rx.url, payload: {} }));
    expect(reply.responseBody).toHaveLength(4096);
  });
});

describe('retries inside the request (up to 3 attempts), charged once', () => {
  const cases: Array<[string, Array<{ status: number; delayMs?: number; headers?: Record<string, string> }>, { success: boolean; attempts: number; statusCode: number | null }]> = [
    ['5xx then success', [{ status: 500 }, { status: 502 }, { status: 200 }], { success: true, attempts: 3, statusCode: 200 }],
    ['5xx every time', [{ status: 503 }], { success: false, attempts: 3, statusCode: 503 }],
    ['408 is retried', [{ status: 408 }, { status: 200 }], { success: true, attempts: 2, statusCode: 200 }],
    ['429 is retried', [{ status: 429 }, { status: 201 }], { success: true, attempts: 2, statusCode: 201 }],
    ['4xx is final', [{ status: 404 }], { success: false, attempts: 1, statusCode: 404 }],
    ['401 is final', [{ status: 401 }], { success: false, attempts: 1, statusCode: 401 }],
    ['redirects are not followed', [{ status: 302, headers: { location: 'http://127.0.0.1:1/' } }], { success: false, attempts: 1, statusCode: 302 }],
    ['a timeout is retried', [{ status: 200, delayMs: 1500 }, { status: 200 }], { success: true, attempts: 2, statusCode: 200 }],
  ];
  for (const [name, script, expected] of cases) {
    it(name, async () => {
      const t = await createTenant(h, { tier: 'launch' });
      const before = await available(t);
      rx.script(...script);
      const reply = json<Reply>(await send(t, { url: rx.url, payload: { n: name } }));
      expect(reply).toMatchObject({ ...expected, creditsUsed: 1 });
      expect(rx.received).toHaveLength(expected.attempts);
      // The same webhook-id on every attempt.
      expect(new Set(rx.received.map((r) => r.headers['x-service-webhook-id']))).toEqual(new Set([reply.webhookId]));
      if (!expected.success) expect(reply.error).toBeTruthy();
      expect(await available(t)).toBe(before - 1);
      expect((await deliveries(t))[0]).toMatchObject({ attempt_count: expected.attempts, status: expected.success ? 'delivered' : 'failed' });
    });
  }

  it('a receiver that is down: three connection attempts, reported, charged (an attempt was made)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(t);
    const down = await startReceiver();
    await down.close();
    const reply = json<Reply>(await send(t, { url: down.url, payload: {} }));
    expect(reply).toMatchObject({ success: false, statusCode: null, attempts: 3, creditsUsed: 1 });
    expect(reply.error).toMatch(/Connection failed/);
    expect(await available(t)).toBe(before - 1);
  });

  it('a host that does not resolve: nothing could be attempted, 403 URL_NOT_ALLOWED as an unreachable host, refunded', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(t);
    const res = await send(t, { url: 'http://does-not-exist.invalid/', payload: {} });
    expect(res.statusCode, res.body).toBe(403);
    expect(json(res)).toMatchObject({
      code: 'URL_NOT_ALLOWED',
      message: 'The host does-not-exist.invalid could not be reached (it does not resolve, or not to an address webhooks may reach)',
    });
    expect((await deliveries(t))[0]).toMatchObject({ status: 'failed', attempt_count: 0 });
    expect(await available(t)).toBe(before);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('idempotency (24 h per deployment)', () => {
  it('the same key replays the first answer without delivering or charging again; body or header key alike', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(t);
    rx.script({ status: 200, body: 'first' });
    const first = await send(t, { url: rx.url, payload: { a: 1 }, idempotency_key: 'k-1' });
    const again = await send(t, { url: rx.url, payload: { a: 1 } }, { 'idempotency-key': 'k-1' });
    expect(again.statusCode).toBe(200);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(json(again)).toEqual(json(first));
    expect(rx.received).toHaveLength(1);
    expect(await available(t)).toBe(before - 1);
  });

  it('the same key with a different body is 422; another deployment may use the same key', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    rx.script({ status: 200 });
    await send(t, { url: rx.url, payload: { a: 1 }, idempotency_key: 'k-2' });
    const reused = await send(t, { url: rx.url, payload: { a: 2 }, idempotency_key: 'k-2' });
    expect(reused.statusCode).toBe(422);
    expect(json(reused)).toMatchObject({ error: 'idempotency_key_reused', code: 'IDEMPOTENCY_KEY_REUSED' });
    const other = await createTenant(h, { tier: 'launch' });
    expect(json<Reply>(await send(other, { url: rx.url, payload: { a: 2 }, idempotency_key: 'k-2' })).success).toBe(true);
  });

  it('the same key while the first send is still running is 409', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    rx.script({ status: 200, delayMs: 300 });
    const [a, b] = await Promise.all([
      send(t, { url: rx.url, payload: { slow: true }, idempotency_key: 'k-3' }),
      new Promise((r) => setTimeout(r, 100)).then(() => send(t, { url: rx.url, payload: { slow: true }, idempotency_key: 'k-3' })),
    ]);
    expect(a.statusCode).toBe(200);
    expect(b.statusCode).toBe(409);
    expect(json(b)).toMatchObject({ error: 'idempotency_in_progress', code: 'IDEMPOTENCY_IN_PROGRESS' });
    expect(rx.received).toHaveLength(1);
  });

  it('a body key and a different header key are a 400', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const res = await send(t, { url: rx.url, payload: {}, idempotency_key: 'a' }, { 'idempotency-key': 'b' });
    expect(res.statusCode).toBe(400);
  });
});

describe('setup errors: nothing delivered, nothing charged', () => {
  it('without credits: 403 INSUFFICIENT_CREDITS with creditsRequired and creditsAvailable', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    rx.script({ status: 200 });
    const res = await send(t, { url: rx.url, payload: {} });
    expect(res.statusCode).toBe(403);
    expect(json(res)).toEqual({
      error: 'insufficient_credits',
      code: 'INSUFFICIENT_CREDITS',
      message: expect.any(String),
      creditsRequired: 1,
      creditsAvailable: 0,
    });
    expect(rx.received).toHaveLength(0);
  });

  it('bad input is 400 INVALID_REQUEST naming the field', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(t);
    rx.script({ status: 200 });
    const manyHeaders = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`x-h${i}`, 'v']));
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ payload: {} }, 'url'],
      [{ url: rx.url }, 'payload'],
      [{ url: rx.url, payload: {}, method: 'GET' }, 'method'],
      [{ url: rx.url, payload: { big: 'x'.repeat(256 * 1024) } }, 'payload'],
      [{ url: rx.url, payload: {}, headers: manyHeaders }, 'headers'],
      [{ url: rx.url, payload: {}, headers: { 'x-n': 5 } }, 'headers.x-n'],
      [{ url: rx.url, payload: {}, headers: { 'x-a': 'a'.repeat(5000), 'x-b': 'b'.repeat(5000) } }, 'headers'],
      [{ url: rx.url, payload: {}, headers: { 'bad name': 'v' } }, 'headers'],
      [{ url: rx.url, payload: {}, headers: { 'x-crlf': 'a\r\nb' } }, 'headers.x-crlf'],
      [{ url: rx.url, payload: [] }, 'payload'],
      [{ url: rx.url, payload: {}, surprise: true }, 'surprise'],
      [{ url: 'not a url', payload: {} }, 'url'],
    ];
    for (const [body, field] of cases) {
      const res = await send(t, body);
      expect(res.statusCode, JSON.stringify(body).slice(0, 100)).toBe(400);
      const err = json<{ code: string; fields: Array<{ field: string }> }>(res);
      expect(err.code).toBe('INVALID_REQUEST');
      expect(err.fields.map((f) => f.field).join(' '), JSON.stringify(body).slice(0, 100)).toContain(field);
    }
    expect(rx.received).toHaveLength(0);
    expect(await available(t)).toBe(before);
    expect(await deliveries(t)).toEqual([]);
  });
});

describe('the delivery records of proxy sends', () => {
  it('are readable by the deployment that sent them, newest first, and by nobody else', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    rx.script({ status: 500 }, { status: 200, body: 'second' });
    const first = json<Reply>(await send(t, { url: `${rx.url}/a`, payload: { n: 1 }, event_type: 'a.b' }));
    h.clock.advance(1000);
    rx.script({ status: 201 });
    const second = json<Reply>(await send(t, { url: `${rx.url}/b`, method: 'PUT', payload: { n: 2 } }));
    const list = await h.request({ method: 'GET', url: '/api/v1/proxy/webhooks/deliveries?limit=1', headers: creds(t) });
    expect(list.statusCode).toBe(200);
    const page1 = json<{ data: Array<Record<string, unknown>>; next_cursor: string | null }>(list);
    expect(page1.data).toEqual([
      expect.objectContaining({ id: second.webhookId, webhook_id: null, url: `${rx.url}/b`, method: 'PUT', status: 'delivered', status_code: 201, attempt_count: 1 }),
    ]);
    const page2 = json<{ data: Array<Record<string, unknown>>; next_cursor: string | null }>(
      await h.request({ method: 'GET', url: `/api/v1/proxy/webhooks/deliveries?limit=1&cursor=${page1.next_cursor}`, headers: creds(t) }),
    );
    expect(page2.data).toEqual([
      expect.objectContaining({ id: first.webhookId, event_type: 'a.b', payload: { n: 1 }, status: 'delivered', attempt_count: 2, response_body: 'second' }),
    ]);
    const one = await h.request({ method: 'GET', url: `/api/v1/proxy/webhooks/deliveries/${first.webhookId}`, headers: creds(t) });
    expect(json(one)).toMatchObject({ id: first.webhookId, delivered_at: first.deliveredAt });
    const other = await createTenant(h, { tier: 'launch' });
    expect((await h.request({ method: 'GET', url: `/api/v1/proxy/webhooks/deliveries/${first.webhookId}`, headers: creds(other) })).statusCode).toBe(404);
    expect(json<{ data: unknown[] }>(await h.request({ method: 'GET', url: '/api/v1/proxy/webhooks/deliveries', headers: creds(other) })).data).toEqual([]);
  });
});

describe('GET /api/v1/proxy/webhooks/quota', () => {
  it('tells credits, the price of a send, how many sends they pay for, and when the period ends', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 5 });
    const res = await h.request({ method: 'GET', url: '/api/v1/proxy/webhooks/quota', headers: creds(t) });
    expect(res.statusCode).toBe(200);
    const quota = json<{ creditsAvailable: number; creditsPerWebhook: number; webhooksAvailable: number; periodEnds: string }>(res);
    expect(quota).toMatchObject({ creditsAvailable: 105, creditsPerWebhook: 1, webhooksAvailable: 105 });
    expect(Date.parse(quota.periodEnds)).toBeGreaterThan(h.clock.now().getTime());
    const enterprise = await createTenant(h, { tier: 'enterprise' });
    expect(json(await h.request({ method: 'GET', url: '/api/v1/proxy/webhooks/quota', headers: creds(enterprise) }))).toMatchObject({
      creditsAvailable: null,
      webhooksAvailable: null,
    });
  });
});
