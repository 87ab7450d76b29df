import { randomInt } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import type { Config } from '../../config.js';

/**
 * The DNS proof of a custom domain (docs/templates.md, Custom domains): the claimant publishes a TXT
 * record `_creditgate-challenge.<domain>` holding the claim's value; verification looks it up through
 * DNS_SERVERS (or the system's resolvers) once, with a 5 s bound, and never throws.
 */
export const CHALLENGE_PREFIX = '_creditgate-challenge';
const VALUE_PREFIX = 'creditgate-verify=';
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

export interface DomainChallenge {
  type: 'TXT';
  name: string;
  value: string;
}

/** A new value for every claim: 32 base62 characters from the CSPRNG (randomInt has no modulo bias). */
export function newChallengeValue(): string {
  let out = VALUE_PREFIX;
  for (let i = 0; i < 32; i++) out += BASE62[randomInt(62)];
  return out;
}

export const challengeOf = (domain: string, value: string): DomainChallenge => ({ type: 'TXT', name: `${CHALLENGE_PREFIX}.${domain}`, value });

export type LookupReason = 'record_not_found' | 'dns_timeout' | 'dns_error';
export type LookupResult = { verified: true } | { verified: false; reason: LookupReason };

/** c-ares codes for "the name or the TXT record does not exist": the claimant has not published it (yet). */
const ABSENT = new Set(['ENODATA', 'ENOTFOUND', 'NXDOMAIN']);

/**
 * Resolve the challenge's TXT records and compare each (its strings joined, RFC 7208 §3.3 style)
 * with the expected value exactly. One try, `dnsTimeoutMs` (5 s) at most: c-ares doubles its timeout
 * per retry, so `tries: 1` is what keeps the bound, with a timer that cancels the lookup at it.
 */
export async function lookupChallenge(config: Pick<Config, 'dnsServers' | 'dnsTimeoutMs'>, challenge: DomainChallenge): Promise<LookupResult> {
  const resolver = new Resolver({ timeout: config.dnsTimeoutMs, tries: 1 });
  if (config.dnsServers.length > 0) resolver.setServers(config.dnsServers);
  // c-ares rounds short timeouts up; cancelling at the bound keeps it exact (the lookup then fails ECANCELLED).
  const timer = setTimeout(() => resolver.cancel(), config.dnsTimeoutMs);
  try {
    const records = await resolver.resolveTxt(challenge.name);
    return records.some((chunks) => chunks.join('') === challenge.value) ? { verified: true } : { verified: false, reason: 'record_not_found' };
  } catch (err) {
    const code = String((err as { code?: unknown }).code ?? '');
    if (ABSENT.has(code)) return { verified: false, reason: 'record_not_found' };
    if (code === 'ETIMEOUT' || code === 'ECANCELLED') return { verified: false, reason: 'dns_timeout' };
    return { verified: false, reason: 'dns_error' };
  } finally {
    clearTimeout(timer);
  }
}
