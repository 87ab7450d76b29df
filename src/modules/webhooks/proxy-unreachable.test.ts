import dns, { type LookupAddress } from 'node:dns';
import { lookup } from 'node:dns/promises';
import { syncBuiltinESMExports } from 'node:module';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import { OutboundHttp, sendWithRetries } from './deliver.js';
import type { SendReply } from './proxy.js';
import { isBlockedAddress } from './ssrf.js';

/**
 * What a proxy send answers, records and charges when the host cannot be reached or the request could
 * not be written (docs/webhooks.md, The proxy: Unreachable hosts, Refund, Order of work), replayed as the
 * attacks a security review made: a name whose DNS answer turns to loopback between attempts, a name
 * that exists internally told apart from one that does not, header values the HTTP client refuses.
 */
let h: Harness; // private networks refused: the production default
let hp: Harness; // allowed, so a loopback receiver can be the target
let rx: Receiver;
let loopbackName = '';

beforeAll(async () => {
  for (const name of [hostname(), 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback']) {
    if (name === 'localhost' || name.endsWith('.localhost')) continue;
    const found = await lookup(name, { all: true }).catch(() => []);
    if (found.length > 0 && found.every((a) => isBlockedAddress(a.address))) {
      loopbackName = name;
      break;
    }
  }
  expect(loopbackName, 'no host name on this machine resolves to loopback').not.toBe('');
  h = await createHarness({ webhookAllowPrivateNetworks: false, webhookAttemptTimeoutMs: 500 });
  hp = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 500 });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
  await hp.close();
});

const creds = (t: Tenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });
const send = (hh: Harness, t: Tenant, body: Record<string, unknown>) =>
  hh.request({ method: 'POST', url: '/api/v1/proxy/webhooks/send', headers: creds(t), payload: { payload: { probe: true }, ...body } });
const available = async (hh: Harness, t: Tenant) =>
  json<{ creditsAvailable: number }>(await hh.request({ method: 'GET', url: '/api/v1/proxy/webhooks/quota', headers: creds(t) })).creditsAvailable;
type Record_ = { status: string; error: string | null; attempt_count: number; credits_charged: number; usage_id: string | null; idempotency_key: string | null };
const records = (hh: Harness, t: Tenant) =>
  hh.deps.db.query<Record_>(
    'SELECT status, error, attempt_count, credits_charged, usage_id, idempotency_key FROM webhook_deliveries WHERE deployment_id = $1 ORDER BY created_at',
    [t.deploymentId],
  );
const netCharged = async (hh: Harness, t: Tenant) =>
  (await hh.deps.db.query<{ n: string }>('SELECT coalesce(sum(quantity - refunded), 0) AS n FROM usage_records WHERE deployment_id = $1', [t.deploymentId]))
    .map((r) => Number(r.n))[0];

/**
 * An attacker's DNS server for names under `.rebind.test`: the nth lookup gets the nth answer (the last
 * repeats). Swapped into node:dns for one test and restored after it; every other name resolves as usual.
 */
async function withDns<T>(answers: LookupAddress[][], run: () => Promise<T>): Promise<T> {
  const real = dns.lookup;
  let calls = 0;
  (dns as { lookup: unknown }).lookup = (host: string, opts: unknown, cb: (e: unknown, a: unknown, f?: number) => void) => {
    if (!host.endsWith('.rebind.test')) return (real as (...a: unknown[]) => void)(host, opts, cb);
    const answer = answers[Math.min(calls++, answers.length - 1)]!;
    if (typeof opts === 'object' && opts !== null && (opts as { all?: boolean }).all) return process.nextTick(() => cb(null, answer));
    process.nextTick(() => cb(null, answer[0]!.address, answer[0]!.family));
  };
  syncBuiltinESMExports();
  try {
    return await run();
  } finally {
    (dns as { lookup: unknown }).lookup = real;
    syncBuiltinESMExports();
  }
}

describe('a name whose answer turns to loopback between attempts', () => {
  it('the send connected once, so it is charged and answered 200 with the refusal as its error; answer, record and ledger agree', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(h, t);
    rx.script({ status: 200 });
    // Attempt 1: a public address (nothing listens for us there: a connection error, an attempt made);
    // attempts 2 and 3: loopback, refused by the guard.
    const res = await withDns([[{ address: '1.1.1.1', family: 4 }], [{ address: '127.0.0.1', family: 4 }]], () =>
      send(h, t, { url: `http://evil.rebind.test:${rx.port}/` }),
    );
    expect(res.statusCode, res.body).toBe(200);
    const reply = json<SendReply>(res);
    expect(reply).toMatchObject({ success: false, statusCode: null, creditsUsed: 1, creditsRemaining: before - 1, attempts: 1 });
    expect(reply.error).toBe('The host evil.rebind.test could not be reached (it does not resolve, or not to an address webhooks may reach)');
    expect(rx.received).toHaveLength(0);
    expect(await available(h, t)).toBe(before - 1);
    expect(await netCharged(h, t)).toBe(1);
    const [row] = await records(h, t);
    expect(row).toMatchObject({ status: 'failed', error: reply.error, attempt_count: 1, credits_charged: 1 });
    expect(row!.usage_id).not.toBeNull();
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('refused on every attempt: 403 URL_NOT_ALLOWED, refunded, and the record says nothing was charged', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(h, t);
    const res = await withDns([[{ address: '127.0.0.1', family: 4 }]], () =>
      send(h, t, { url: `http://inner.rebind.test:${rx.port}/`, idempotency_key: 'unreachable-1' }),
    );
    expect(res.statusCode, res.body).toBe(403);
    expect(json(res)).toMatchObject({ code: 'URL_NOT_ALLOWED' });
    expect(await available(h, t)).toBe(before);
    expect(await netCharged(h, t)).toBe(0);
    const [row] = await records(h, t);
    expect(row).toMatchObject({ status: 'failed', attempt_count: 0, credits_charged: 0, idempotency_key: null });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('an internal name and a nonexistent one answer alike', () => {
  it('same status, code, message (but the name), refund and record: the caller cannot tell which exists', async () => {
    const outcomes = [];
    for (const name of [loopbackName, 'no-such-host.invalid']) {
      const t = await createTenant(h, { tier: 'launch' });
      const before = await available(h, t);
      const res = await send(h, t, { url: `http://${name}:${rx.port}/` });
      const body = json<{ message: string }>(res);
      expect(body.message).toContain(name);
      const [row] = await records(h, t);
      outcomes.push({
        status: res.statusCode,
        body: JSON.stringify(body).replaceAll(name, '<name>'),
        record: { ...row!, error: row!.error?.replaceAll(name, '<name>'), usage_id: row!.usage_id === null ? null : 'set' },
        spent: before - (await available(h, t)),
      });
    }
    expect(outcomes[0]).toMatchObject({ status: 403, spent: 0 });
    expect(outcomes[0]!.body).not.toMatch(/127\.0\.0\.1|::1/);
    expect(outcomes[1]).toEqual(outcomes[0]);
  });
});

describe('header values the HTTP client would refuse', () => {
  it('are 400 INVALID_REQUEST naming the field, before the charge: nothing sent, charged or recorded', async () => {
    const t = await createTenant(hp, { tier: 'launch' });
    const before = await available(hp, t);
    rx.script({ status: 200 });
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ headers: { 'x-bad': 'a\u0001b' } }, 'headers.x-bad'],
      [{ headers: { 'x-bad': 'a\u007fb' } }, 'headers.x-bad'],
      [{ headers: { 'x-bad': '€uro' } }, 'headers.x-bad'],
      [{ event_type: 'x\r\nx-injected: 1' }, 'event_type'],
      [{ event_type: 'order\u0001paid' }, 'event_type'],
      [{ event_type: 'order paid' }, 'event_type'],
      [{ event_type: 'paiement.reçu' }, 'event_type'],
    ];
    for (const [extra, field] of cases) {
      const res = await send(hp, t, { url: rx.url, ...extra });
      expect(res.statusCode, JSON.stringify(extra)).toBe(400);
      const err = json<{ code: string; fields: Array<{ field: string }> }>(res);
      expect(err.code).toBe('INVALID_REQUEST');
      expect(err.fields.map((f) => f.field).join(' '), JSON.stringify(extra)).toContain(field);
    }
    expect(rx.received).toHaveLength(0);
    expect(await available(hp, t)).toBe(before);
    expect(await records(hp, t)).toEqual([]);
  });

  it('what a header may hold is still sent: tab, U+0080–U+00FF, and an event type of visible ASCII', async () => {
    const t = await createTenant(hp, { tier: 'launch' });
    rx.script({ status: 200 });
    const res = await send(hp, t, { url: rx.url, headers: { 'x-latin': 'caf\u00e9\tau lait' }, event_type: 'invoice:paid/v1' });
    expect(json<SendReply>(res)).toMatchObject({ success: true, creditsUsed: 1 });
    expect(rx.received[0]!.headers['x-service-event']).toBe('invoice:paid/v1');
    expect(Buffer.from(rx.received[0]!.headers['x-latin'] as string, 'latin1')).toEqual(Buffer.from('caf\u00e9\tau lait', 'latin1'));
  });

  it('a request undici refuses to write is not attempted, not retried and not charged (the delivery layer)', async () => {
    rx.script({ status: 200 });
    const http = new OutboundHttp(true, 500);
    try {
      let tries = 0;
      const counting = {
        attempt: (input: Parameters<OutboundHttp['attempt']>[0]) => {
          tries += 1;
          return http.attempt(input);
        },
      } as OutboundHttp;
      const outcome = await sendWithRetries(
        counting,
        { url: new URL(rx.url), method: 'POST', headers: { 'x-bad': 'a\u0001b' }, body: Buffer.from('{}') },
        { maxAttempts: 3, now: () => new Date(), backoffMs: () => 0 },
      );
      expect(tries).toBe(1);
      expect(outcome).toMatchObject({ attempts: 0, connected: false, last: { notAttempted: true, retryable: false, unreachable: false } });
      expect(rx.received).toHaveLength(0);
    } finally {
      await http.close();
    }
  });
});
