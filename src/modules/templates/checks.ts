import { isIP } from 'node:net';
import { domainToASCII } from 'node:url';
import { type Config, HOST_NAME_RE } from '../../config.js';
import { ValidationError } from '../../errors.js';

/** A `config` (of a template or a deployment) is a JSON object of at most this many bytes serialized. */
export const CONFIG_MAX_BYTES = 64 * 1024;

/** The schemas check the shape; this also bounds the size (docs/input.md: limits on input). */
export function checkConfig(config: unknown, field = 'config'): Record<string, unknown> {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw ValidationError.forField(field, 'must be an object');
  }
  if (Buffer.byteLength(JSON.stringify(config)) > CONFIG_MAX_BYTES) {
    throw ValidationError.forField(field, `must be at most ${CONFIG_MAX_BYTES / 1024} KiB serialized`);
  }
  return config as Record<string, unknown>;
}

/**
 * Subdomains that would pass for the installation's own services (docs/templates.md, Template deployments: reserved subdomains):
 * refused on create, on top of TEMPLATE_RESERVED_SUBDOMAINS. A deployment that already holds one
 * keeps it (a subdomain never changes after creation).
 */
export const RESERVED_SUBDOMAINS: readonly string[] = [
  'www', 'api', 'app', 'admin', 'console', 'dashboard', 'docs', 'mail', 'smtp', 'status', 'billing', 'auth',
  'login', 'static', 'assets', 'cdn', 'support', 'help', 'blog', 'dev', 'staging', 'test', 'internal', 'root',
];

export function checkSubdomain(subdomain: string, config: Pick<Config, 'templateReservedSubdomains'>): string {
  if (RESERVED_SUBDOMAINS.includes(subdomain) || config.templateReservedSubdomains.includes(subdomain)) {
    throw ValidationError.forField('subdomain', `"${subdomain}" is reserved; choose another subdomain`);
  }
  return subdomain;
}

const hostOf = (url: string): string => {
  try {
    return new URL(url).hostname.toLowerCase().replace(/\.$/, '');
  } catch {
    return '';
  }
};
const isUnder = (domain: string, base: string) => base !== '' && (domain === base || domain.endsWith(`.${base}`));

/**
 * A custom domain is a host name of at least two labels, stored lower-case ASCII (IDNA to punycode by
 * the WHATWG URL rules, so `0x7f.1` is seen as the IP address it is) without a trailing dot. Refused:
 * IP literals, `localhost` and names under it (RFC 6761), and names equal to or under
 * TEMPLATE_BASE_DOMAIN (the subdomains' space) or PUBLIC_BASE_URL's host (this service's own).
 */
export function normalizeCustomDomain(raw: string, config: Pick<Config, 'templateBaseDomain' | 'publicBaseUrl'>): string {
  const invalid = () => ValidationError.forField('custom_domain', 'must be a host name such as app.example.com');
  const ascii = domainToASCII(raw.trim());
  const domain = ascii.replace(/\.$/, '');
  const labels = domain.split('.');
  if (domain === '' || isIP(domain) !== 0 || isIP(domain.replace(/^\[|\]$/g, '')) !== 0) {
    throw ValidationError.forField('custom_domain', 'must be a host name, not an IP address');
  }
  if (!HOST_NAME_RE.test(domain) || /^\d+$/.test(labels[labels.length - 1]!)) throw invalid();
  if (isUnder(domain, 'localhost')) throw ValidationError.forField('custom_domain', 'must not be localhost');
  if (labels.length < 2) throw invalid();
  for (const base of [config.templateBaseDomain, hostOf(config.publicBaseUrl)]) {
    if (isIP(base) === 0 && isUnder(domain, base)) throw ValidationError.forField('custom_domain', `must not be ${base} or under it`);
  }
  return domain;
}
