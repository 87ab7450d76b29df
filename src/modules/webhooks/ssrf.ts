import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { AppError } from '../../errors.js';

/**
 * SPEC §7 SSRF guard. The address checked is the address connected to: host names are resolved by our
 * own `lookup` (given to undici's connector), every resolved address is checked and the connection
 * uses only checked ones, so a DNS answer that changes between a check and the connect cannot slip
 * through. IP literals never reach a lookup, so they are checked on their own (IPv4-mapped IPv6
 * unwrapped first).
 */
const blocked = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // CGNAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata (169.254.169.254)
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay (deprecated)
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  blocked.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['64:ff9b::', 96], // NAT64 (embeds IPv4)
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard
  ['2001::', 23], // IETF protocol assignments
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4 (embeds IPv4)
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
  ['fd00:ec2::254', 128], // AWS metadata over IPv6 (inside fc00::/7 too)
] as const) {
  blocked.addSubnet(net, prefix, 'ipv6');
}

/** `::ffff:a.b.c.d` and `::ffff:XXXX:XXXX` are IPv4 addresses in disguise. */
function unwrapMapped(address: string): string {
  const lower = address.toLowerCase();
  const dotted = /^(?:0{0,4}:){0,5}:?ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower) ?? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (dotted) return dotted[1]!;
  const hex = /^(?:0{0,4}:){0,5}:?ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (hex) {
    const hi = Number.parseInt(hex[1]!, 16);
    const lo = Number.parseInt(hex[2]!, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return address;
}

/** Is this IP address one a webhook may not reach (loopback, private, link-local, CGNAT, multicast, metadata, reserved)? */
export function isBlockedAddress(address: string): boolean {
  const ip = unwrapMapped(address.replace(/^\[|\]$/g, '').replace(/%.*$/, ''));
  const family = isIP(ip);
  if (family === 0) return true; // not an address at all: refuse rather than guess
  return blocked.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

export const urlNotAllowed = (message: string) => new AppError('URL_NOT_ALLOWED', message);

/**
 * The checks that need no DNS: scheme, credentials in the URL, IP literals. Host names are checked
 * at connect time by `guardedLookup`. Returns the parsed URL.
 */
export function checkTargetUrl(raw: string, allowPrivate: boolean): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new AppError('VALIDATION_ERROR', 'url is not a valid absolute URL', { fields: [{ field: 'url', message: 'must be an absolute http(s) URL' }] });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw urlNotAllowed(`Only http and https URLs are allowed, not ${url.protocol}`);
  if (url.username || url.password) throw urlNotAllowed('URLs with credentials are not allowed; send them in headers');
  if (allowPrivate) return url;
  // WHATWG URL normalises IPv4 literals (decimal, octal, hex, short forms) to dotted quads.
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) !== 0 && isBlockedAddress(host)) throw urlNotAllowed(`The address ${host} is not allowed (private, loopback, link-local or reserved)`);
  if (host === 'localhost' || host.endsWith('.localhost')) throw urlNotAllowed(`The host ${host} is not allowed`);
  return url;
}

/** Error that the lookup raises; the delivery code turns it into URL_NOT_ALLOWED. */
export class BlockedAddressError extends Error {
  readonly code = 'ERR_URL_NOT_ALLOWED';
  constructor(
    readonly hostname: string,
    readonly address: string,
  ) {
    super(`${hostname} resolves to ${address}, which is not allowed`);
  }
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `dns.lookup` replacement for undici's connector: resolves every address and refuses the
 * connection if any of them is blocked (an attacker's DNS could otherwise mix one private address in).
 */
export function guardedLookup(allowPrivate: boolean) {
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const list = addresses as LookupAddress[];
      if (!allowPrivate) {
        const bad = list.find((a) => isBlockedAddress(a.address));
        if (bad) return callback(new BlockedAddressError(hostname, bad.address) as NodeJS.ErrnoException, []);
      }
      if (list.length === 0) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
      if (options.all) return callback(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  };
}
