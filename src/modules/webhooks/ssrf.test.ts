import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { isBlockedAddress } from './ssrf.js';

/**
 * SPEC §7 SSRF guard with WEBHOOK_ALLOW_PRIVATE_NETWORKS off (the production default): every address
 * and URL form below is refused with 403 URL_NOT_ALLOWED, nothing is delivered and nothing charged —
 * including a DNS name that resolves to loopback (checked at connect time, on the address connected to).
 */
let h: Harness;
let rx: Receiver;
let t: Tenant;

/** A host name (not "localhost") that this machine resolves to a loopback address, found at start. */
let loopbackName = '';

beforeAll(async () => {
  for (const name of [hostname(), 'localhost.localdomain', 'ip6-localhost', 'localhost.']) {
    const found = await lookup(name, { all: true }).catch(() => []);
    if (found.length > 0 && found.every((a) => isBlockedAddress(a.address))) {
      loopbackName = name;
      break;
    }
  }
  expect(loopbackName, 'no host name on this machine resolves to loopback').not.toBe('');
  h = await createHarness({ webhookAllowPrivateNetworks: false, webhookAttemptTimeoutMs: 2_000 });
  rx = await startReceiver();
  t = await createTenant(h, { tier: 'launch' });
});
afterAll(async () => {
  await rx.close();
  await h.close();
});

const send = (url: string) =>
  h.request({
    method: 'POST',
    url: '/api/v1/proxy/webhooks/send',
    headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    payload: { url, payload: { probe: true } },
  });

const port = () => rx.port;
const REFUSED: Array<[string, () => string]> = [
  ['loopback', () => `http://127.0.0.1:${port()}/`],
  ['loopback, other address in 127/8', () => `http://127.8.9.10:${port()}/`],
  ['loopback, short form', () => `http://127.1:${port()}/`],
  ['loopback, decimal', () => `http://2130706433:${port()}/`],
  ['loopback, hex', () => `http://0x7f000001:${port()}/`],
  ['loopback, octal', () => `http://0177.0.0.1:${port()}/`],
  ['IPv6 loopback', () => `http://[::1]:${port()}/`],
  ['IPv4-mapped IPv6 loopback (dotted)', () => `http://[::ffff:127.0.0.1]:${port()}/`],
  ['IPv4-mapped IPv6 loopback (hex)', () => `http://[::ffff:7f00:1]:${port()}/`],
  ['unspecified', () => `http://0.0.0.0:${port()}/`],
  ['localhost', () => `http://localhost:${port()}/`],
  ['a DNS name resolving to loopback (this machine’s own name)', () => `http://${loopbackName}:${port()}/`],
  ['private 10/8', () => 'http://10.0.0.1/'],
  ['private 172.16/12', () => 'http://172.16.5.4/'],
  ['private 192.168/16', () => 'http://192.168.1.1/'],
  ['link-local / cloud metadata', () => 'http://169.254.169.254/latest/meta-data/'],
  ['CGNAT 100.64/10', () => 'http://100.64.0.1/'],
  ['multicast', () => 'http://224.0.0.1/'],
  ['reserved 240/4', () => 'http://240.0.0.1/'],
  ['broadcast', () => 'http://255.255.255.255/'],
  ['IPv6 unique local', () => 'http://[fc00::1]/'],
  ['IPv6 link-local', () => 'http://[fe80::1]/'],
  ['AWS metadata over IPv6', () => 'http://[fd00:ec2::254]/'],
  ['IPv6 multicast', () => 'http://[ff02::1]/'],
  ['NAT64 of loopback', () => 'http://[64:ff9b::7f00:1]/'],
  ['https to loopback', () => `https://127.0.0.1:${port()}/`],
  ['ftp scheme', () => 'ftp://example.com/file'],
  ['file scheme', () => 'file:///etc/passwd'],
  ['credentials in the URL', () => 'http://user:pass@example.com/'],
];

describe('refused targets (403 URL_NOT_ALLOWED, nothing delivered or charged)', () => {
  for (const [name, url] of REFUSED) {
    it(name, async () => {
      const before = await h.deps.db.query<{ n: string }>('SELECT count(*) AS n FROM credit_ledger WHERE deployment_id = $1', [t.deploymentId]);
      const res = await send(url());
      expect(res.statusCode, res.body).toBe(403);
      expect(json(res)).toMatchObject({ error: 'url_not_allowed', code: 'URL_NOT_ALLOWED' });
      expect(rx.received).toHaveLength(0);
      const quota = json<{ creditsAvailable: number }>(
        await h.request({
          method: 'GET',
          url: '/api/v1/proxy/webhooks/quota',
          headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
        }),
      );
      expect(quota.creditsAvailable).toBe(2000);
      // A connect-time refusal charged and refunded within the request; a literal one never charged.
      const after = await h.deps.db.query<{ n: string }>('SELECT count(*) AS n FROM credit_ledger WHERE deployment_id = $1', [t.deploymentId]);
      expect(Number(after[0]!.n) - Number(before[0]!.n)).toBeLessThanOrEqual(2);
    });
  }
});

describe('isBlockedAddress', () => {
  it('allows public addresses and refuses what is not an address at all', () => {
    for (const ip of ['93.184.216.34', '8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) {
      expect(isBlockedAddress(ip), ip).toBe(false);
    }
    for (const ip of ['127.0.0.1', '::1', '::ffff:10.0.0.1', '::ffff:a9fe:a9fe', '[::1]', 'fe80::1%eth0', 'not-an-ip', '']) {
      expect(isBlockedAddress(ip), ip).toBe(true);
    }
  });
});
