import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { isBlockedAddress } from './ssrf.js';

/**
 * The SSRF guard (docs/webhooks.md, The proxy), written as the attack against the real proxy route with private networks refused
 * (the production default): IPv6 spellings of loopback that the old hand lists missed reach for a
 * real receiver listening on 127.0.0.1, and a host name that resolves to loopback must be refused
 * without the refusal telling the caller which address the name resolved to.
 */
let h: Harness;
let rx: Receiver;

/** A host name, not refused by name (not `localhost`), that this machine resolves only to loopback. */
let loopbackName = '';

beforeAll(async () => {
  for (const name of [hostname(), 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback']) {
    if (name === 'localhost' || name.endsWith('.localhost')) continue;
    const found = await lookup(name, { all: true }).catch(() => []);
    if (found.length > 0 && found.every((a) => a.address === '127.0.0.1' || a.address === '::1')) {
      loopbackName = name;
      break;
    }
  }
  expect(loopbackName, 'no host name on this machine resolves to loopback').not.toBe('');
  h = await createHarness({ webhookAllowPrivateNetworks: false, webhookAttemptTimeoutMs: 2_000 });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});

const creds = (t: Tenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });
const send = (t: Tenant, url: string) =>
  h.request({ method: 'POST', url: '/api/v1/proxy/webhooks/send', headers: creds(t), payload: { url, payload: { probe: true } } });
const available = async (t: Tenant) =>
  json<{ creditsAvailable: number }>(await h.request({ method: 'GET', url: '/api/v1/proxy/webhooks/quota', headers: creds(t) })).creditsAvailable;
const usage = (t: Tenant) =>
  h.deps.db.query<{ quantity: number; refunded: number }>('SELECT quantity, refunded FROM usage_records WHERE deployment_id = $1', [t.deploymentId]);

/** Any IPv4 dotted quad or IPv6 address (two groups around a colon, or a `::`) in a text. */
const ANY_ADDRESS = /\d{1,3}(?:\.\d{1,3}){3}|::|[0-9a-f]{1,4}:[0-9a-f]{0,4}:/i;

describe('IPv6 spellings of loopback aimed at a live loopback receiver', () => {
  const attacks: Array<[string, () => string]> = [
    ['IPv4-compatible ::127.0.0.1', () => `http://[::127.0.0.1]:${rx.port}/`],
    ['IPv4-translated ::ffff:0:127.0.0.1 (RFC 2765, ::ffff:0:0:0/96)', () => `http://[::ffff:0:7f00:1]:${rx.port}/`],
  ];
  for (const [name, url] of attacks) {
    it(`${name}: 403 URL_NOT_ALLOWED before any charge; the receiver sees nothing`, async () => {
      const t = await createTenant(h, { tier: 'launch' });
      const before = await available(t);
      rx.script({ status: 200 });
      const res = await send(t, url());
      expect(res.statusCode, res.body).toBe(403);
      expect(json(res)).toMatchObject({ error: 'url_not_allowed', code: 'URL_NOT_ALLOWED' });
      expect(rx.received).toHaveLength(0);
      // Refused as a literal, before the charge: no usage record, no delivery record, balance unchanged.
      expect(await usage(t)).toEqual([]);
      expect(await h.deps.db.query('SELECT id FROM webhook_deliveries WHERE deployment_id = $1', [t.deploymentId])).toEqual([]);
      expect(await available(t)).toBe(before);
    });
  }
});

describe('a host name that resolves to loopback', () => {
  it('is refused at connect time (403 URL_NOT_ALLOWED), and neither the answer nor the record names the address', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const before = await available(t);
    rx.script({ status: 200 });
    const res = await send(t, `http://${loopbackName}:${rx.port}/`);
    expect(res.statusCode, res.body).toBe(403);
    const body = json<{ code: string; message: string }>(res);
    expect(body.code).toBe('URL_NOT_ALLOWED');
    expect(body.message).toContain(loopbackName);
    expect(body.message).not.toContain('127.0.0.1');
    expect(body.message).not.toContain('::1');
    expect(body.message).not.toMatch(ANY_ADDRESS);
    expect(rx.received).toHaveLength(0);
    // The delivery record is readable by the deployment, so it must not name the address either.
    const records = await h.deps.db.query<{ error: string | null }>('SELECT error FROM webhook_deliveries WHERE deployment_id = $1', [t.deploymentId]);
    expect(records).toHaveLength(1);
    expect(records[0]!.error).not.toMatch(ANY_ADDRESS);
    // Only a name's refusal comes after the charge (it needs the DNS answer): charged, then refunded in full.
    expect(await available(t)).toBe(before);
    expect((await usage(t)).map((u) => Number(u.quantity) - Number(u.refunded))).toEqual([0]);
  });

  it('is the same name the guard refuses by address (so the test above exercises the connect-time check)', async () => {
    const found = await lookup(loopbackName, { all: true });
    expect(found.length).toBeGreaterThan(0);
    for (const a of found) expect(isBlockedAddress(a.address), a.address).toBe(true);
  });
});
