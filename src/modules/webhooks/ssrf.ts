import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { AppError } from '../../errors.js';

/**
 * The SSRF guard (docs/webhooks.md, The proxy). The address checked is the address connected to: host names are resolved by our
 * own `lookup` (given to undici's connector), every resolved address is checked and the connection
 * uses only checked ones, so a DNS answer that changes between a check and the connect cannot slip
 * through. IP literals never reach a lookup, so `checkTargetUrl` checks them on their own.
 *
 * The rule is an allow-list, not a deny-list: an address may be reached only if ipaddr.js classifies
 * it as plain `unicast`. ipaddr.js's `unicast` means "in none of the special-purpose ranges it knows",
 * so refusing everything that is not positively ordinary fails closed: a range nobody listed is
 * refused, where the hand-written deny lists this replaced failed open (a security review found `::127.0.0.1`
 * and `::ffff:0:7f00:1` connected to and charged for). On top of that:
 *  - IPv6 forms whose destination *is* the IPv4 address they carry (IPv4-mapped `::ffff:0:0/96`, which
 *    a dual-stack socket sends over IPv4; NAT64 `64:ff9b::/96`, which DNS64 networks synthesise for
 *    every IPv4-only receiver and whose translator forwards to the embedded address) are judged by
 *    that embedded IPv4 address, so `::ffff:8.8.8.8` passes and `64:ff9b::7f00:1` does not.
 *  - every other IPv6 address must lie in 2000::/3, the only block IANA allocates global unicast
 *    from: ipaddr.js calls the unassigned rest of ::/8 `unicast`, and that is where the deprecated
 *    IPv4-compatible form `::a.b.c.d` (RFC 4291 §2.5.5.1) lives.
 *  - the transition forms that embed an IPv4 address without it being the destination — 6to4
 *    2002::/16 (the embedded address is a relay), Teredo 2001::/32, IPv4-translated ::ffff:0:0:0/96,
 *    local-use NAT64 64:ff9b:1::/48 (where its IPv4 sits depends on the operator's prefix length,
 *    RFC 6052 §2.2) — are refused whatever they embed: ipaddr.js does not call them `unicast`, and the
 *    pinned list below keeps the ones that review named refused even if the library's table changes.
 */
const WELL_KNOWN_NAT64 = ipaddr.parseCIDR('64:ff9b::/96');
const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

/**
 * Refused even if a future ipaddr.js called them `unicast`: the ranges docs/webhooks.md names (CGNAT,
 * cloud metadata), the benchmarking block, and the IPv6 spellings of IPv4 that the review found connected to.
 */
const PINNED = [
  '100.64.0.0/10', // CGNAT (Alibaba's metadata service 100.100.100.200 is in it)
  '198.18.0.0/15', // benchmarking (RFC 2544)
  '169.254.169.254/32', // cloud metadata (AWS, GCP, Azure, OpenStack)
  '168.63.129.16/32', // Azure's host endpoint (WireServer: goal state, extension settings), a public address in form
  'fd00:ec2::254/128', // AWS metadata over IPv6
  '::/96', // IPv4-compatible, deprecated; also :: and ::1
  '::ffff:0:0:0/96', // IPv4-translated (RFC 2765, RFC 6145)
  '64:ff9b:1::/48', // local-use NAT64 (RFC 8215)
  '2002::/16', // 6to4
  '2001::/32', // Teredo
].map((cidr) => ipaddr.parseCIDR(cidr));

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** The IPv4 address an IPv6 address really goes to, for the forms where that is what it means. */
function destinationIPv4(ip: ipaddr.IPv6): ipaddr.IPv4 | null {
  if (ip.isIPv4MappedAddress()) return ip.toIPv4Address();
  if (ip.match(WELL_KNOWN_NAT64)) return ipaddr.fromByteArray(ip.toByteArray().slice(12)) as ipaddr.IPv4;
  return null;
}

function isOrdinaryUnicast(ip: Address): boolean {
  if (ip.kind() === 'ipv6') {
    const v6 = ip as ipaddr.IPv6;
    // A zone id makes the address meaningful on one link only: link-local by nature.
    if (v6.zoneId !== undefined) return false;
    const embedded = destinationIPv4(v6);
    if (embedded) return isOrdinaryUnicast(embedded);
    if (!v6.match(GLOBAL_UNICAST_V6)) return false;
  }
  if (PINNED.some(([net, bits]) => net.kind() === ip.kind() && ip.match(net, bits))) return false;
  return ip.range() === 'unicast';
}

/** Is this IP address one a webhook may not reach (anything but ordinary public unicast)? */
export function isBlockedAddress(address: string): boolean {
  const text = address.replace(/^\[|\]$/g, '');
  // Node's isIP accepts only the canonical dotted quad and IPv6 text, which is what URL parsing and
  // dns.lookup produce; anything else (ipaddr.js would read "2130706433" or "0x7f.1") is not
  // an address we were handed, so refuse rather than guess.
  if (isIP(text) === 0) return true;
  try {
    return !isOrdinaryUnicast(ipaddr.parse(text));
  } catch {
    return true;
  }
}

const REFUSED_KINDS = 'private, loopback, link-local, multicast, metadata or reserved';

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
  if (isIP(host) !== 0) {
    // Naming the literal is safe: it is the caller's own input (normalised), not something DNS told us.
    if (isBlockedAddress(host)) throw urlNotAllowed(`The address ${host} is not allowed (${REFUSED_KINDS})`);
    return url;
  }
  // RFC 6761 reserves the whole localhost. tree for loopback; a trailing dot is the same name.
  const name = host.replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) throw urlNotAllowed(`The host ${host} is not allowed`);
  return url;
}

/**
 * Error that the lookup raises; the delivery code turns it into URL_NOT_ALLOWED and stores its message
 * on the delivery record. It deliberately does not carry the resolved address (docs/webhooks.md, The proxy): the message
 * reaches the caller and the record is readable by the tenant, and telling them what a name resolves to
 * inside our network is exactly the reconnaissance an SSRF probe is after.
 */
export class BlockedAddressError extends Error {
  readonly code = 'ERR_URL_NOT_ALLOWED';
  constructor(readonly hostname: string) {
    super(`The host ${hostname} resolves to an address that is not allowed (${REFUSED_KINDS})`);
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
        if (list.some((a) => isBlockedAddress(a.address))) return callback(new BlockedAddressError(hostname) as NodeJS.ErrnoException, []);
      }
      if (list.length === 0) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
      if (options.all) return callback(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  };
}
