import type { LookupAddress } from 'node:dns';
import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { checkTargetUrl, guardedLookup, isBlockedAddress } from './ssrf.js';

/**
 * The SSRF guard (docs/webhooks.md, The proxy) with WEBHOOK_ALLOW_PRIVATE_NETWORKS off (the production default): every address
 * and URL form below is refused with 403 URL_NOT_ALLOWED, nothing is delivered and nothing charged —
 * including a DNS name that resolves to loopback (checked at connect time, on the address connected to).
 */
let h: Harness;
let rx: Receiver;
let t: Tenant;

/** A host name (not "localhost") that this machine resolves to a loopback address, found at start. */
let loopbackName = '';

beforeAll(async () => {
  for (const name of [hostname(), 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback']) {
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
  ['IPv4-compatible IPv6 loopback', () => `http://[::127.0.0.1]:${port()}/`],
  ['IPv4-translated IPv6 loopback (::ffff:0:0:0/96)', () => `http://[::ffff:0:7f00:1]:${port()}/`],
  ['6to4 of loopback', () => `http://[2002:7f00:1::]:${port()}/`],
  ['IPv6 unspecified', () => `http://[::]:${port()}/`],
  ['benchmarking 198.18/15', () => 'http://198.18.0.1/'],
  ['localhost with a trailing dot', () => `http://localhost.:${port()}/`],
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

/**
 * The classifier on its own, one row per spelling: every embedded-IPv4 form is judged by what it
 * carries or refused outright, and only ordinary public unicast passes.
 */
const ADDRESSES: Array<[string, 'refused' | 'allowed']> = [
  ['::127.0.0.1', 'refused'], // IPv4-compatible (deprecated), which ipaddr.js alone calls unicast
  ['::ffff:0:7f00:1', 'refused'], // IPv4-translated (RFC 2765)
  ['::ffff:127.0.0.1', 'refused'], // IPv4-mapped, judged by the IPv4 address
  ['::ffff:7f00:1', 'refused'],
  ['::ffff:a9fe:a9fe', 'refused'], // mapped metadata address
  ['64:ff9b::7f00:1', 'refused'], // NAT64 of loopback
  ['64:ff9b::a00:1', 'refused'], // NAT64 of 10.0.0.1
  ['64:ff9b:1::808:808', 'refused'], // local-use NAT64: embedding depends on the operator's prefix
  ['2002:7f00:1::', 'refused'], // 6to4 of loopback
  ['2002:808:808::1', 'refused'], // 6to4 at all: the embedded address is a relay, not the receiver
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'refused'], // Teredo
  ['::', 'refused'],
  ['::1', 'refused'],
  ['::1:2:3:4', 'refused'], // unassigned ::/8, outside 2000::/3
  ['0.0.0.0', 'refused'],
  ['127.0.0.1', 'refused'],
  ['10.0.0.1', 'refused'],
  ['100.64.0.1', 'refused'], // CGNAT
  ['100.100.100.200', 'refused'], // Alibaba metadata, inside CGNAT
  ['169.254.169.254', 'refused'], // cloud metadata
  ['168.63.129.16', 'refused'], // Azure's host endpoint (WireServer)
  ['::ffff:168.63.129.16', 'refused'],
  ['fd00:ec2::254', 'refused'], // AWS metadata over IPv6
  ['fc00::1', 'refused'],
  ['fe80::1', 'refused'],
  ['fe80::1%eth0', 'refused'],
  ['fec0::1', 'refused'], // site-local (deprecated)
  ['ff02::1', 'refused'],
  ['100::1', 'refused'], // discard
  ['2001:db8::1', 'refused'], // documentation
  ['3fff::1', 'refused'], // documentation (RFC 9637)
  ['224.0.0.1', 'refused'],
  ['240.0.0.1', 'refused'],
  ['255.255.255.255', 'refused'],
  ['198.18.0.1', 'refused'], // benchmarking
  ['192.0.2.1', 'refused'], // documentation
  ['[::1]', 'refused'], // brackets as in a URL's host
  ['2130706433', 'refused'], // not canonical text: URL parsing normalises it first, the classifier refuses it raw
  ['not-an-ip', 'refused'],
  ['', 'refused'],
  ['93.184.216.34', 'allowed'],
  ['8.8.8.8', 'allowed'],
  ['1.1.1.1', 'allowed'],
  ['2606:4700::1111', 'allowed'],
  ['2606:4700:4700::1111', 'allowed'],
  ['[2606:4700::1111]', 'allowed'],
  ['::ffff:8.8.8.8', 'allowed'], // a dual-stack socket's spelling of a public IPv4 address
  ['64:ff9b::5db8:d822', 'allowed'], // DNS64's spelling of 93.184.216.34 on an IPv6-only host
];

describe('isBlockedAddress', () => {
  for (const [address, verdict] of ADDRESSES) {
    it(`${address || '(empty)'} is ${verdict}`, () => {
      expect(isBlockedAddress(address)).toBe(verdict === 'refused');
    });
  }
});

describe('checkTargetUrl (no DNS)', () => {
  it('normalises numeric IPv4 spellings and IPv6 literals before classifying them', () => {
    for (const url of ['http://2130706433/', 'http://0x7f.1/', 'http://0177.0.0.1/', 'http://127.1/', 'http://[::127.0.0.1]/', 'http://[::ffff:0:7f00:1]/', 'http://[0:0:0:0:0:ffff:127.0.0.1]/']) {
      expect(() => checkTargetUrl(url, false), url).toThrow(expect.objectContaining({ code: 'URL_NOT_ALLOWED' }));
    }
    expect(checkTargetUrl('http://[2606:4700::1111]/x', false).hostname).toBe('[2606:4700::1111]');
    expect(checkTargetUrl('https://93.184.216.34/', false).hostname).toBe('93.184.216.34');
  });

  it('WEBHOOK_ALLOW_PRIVATE_NETWORKS=true lifts the address checks but not the scheme or credential checks', () => {
    for (const url of ['http://[::127.0.0.1]/', 'http://[::ffff:0:7f00:1]/', 'http://127.0.0.1/', 'http://localhost/']) {
      expect(checkTargetUrl(url, true), url).toBeInstanceOf(URL);
    }
    expect(() => checkTargetUrl('ftp://127.0.0.1/', true)).toThrow(expect.objectContaining({ code: 'URL_NOT_ALLOWED' }));
    expect(() => checkTargetUrl('http://u:p@127.0.0.1/', true)).toThrow(expect.objectContaining({ code: 'URL_NOT_ALLOWED' }));
  });
});

describe('guardedLookup (the connector’s resolver)', () => {
  const resolve = (allowPrivate: boolean, name: string) =>
    new Promise<{ err: NodeJS.ErrnoException | null; addresses: LookupAddress[] }>((done) =>
      guardedLookup(allowPrivate)(name, { all: true }, (err, addresses) => done({ err, addresses: addresses as LookupAddress[] })),
    );

  it('refuses a name that resolves to loopback without naming the address', async () => {
    const { err, addresses } = await resolve(false, loopbackName);
    expect(err).toMatchObject({ code: 'ERR_URL_NOT_ALLOWED' });
    expect(err!.message).toContain(loopbackName);
    expect(err!.message).not.toMatch(/\d{1,3}(?:\.\d{1,3}){3}|::/);
    expect(addresses).toEqual([]);
  });

  it('hands the same name’s addresses to the connector when private networks are allowed', async () => {
    const { err, addresses } = await resolve(true, loopbackName);
    expect(err).toBeNull();
    expect(addresses.length).toBeGreaterThan(0);
  });
});
