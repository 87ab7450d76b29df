import { HOST_NAME_RE } from '../../config.js';
import { ValidationError } from '../../errors.js';

/** A `config` (of a template or a deployment) is a JSON object of at most this many bytes serialized. */
export const CONFIG_MAX_BYTES = 64 * 1024;

/** The schemas check the shape; this also bounds the size (SPEC §10: limits on input). */
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
 * A custom domain is a host name with at least two labels and a top-level label that is not all
 * digits (so not an IP address), stored in lower case. Names under TEMPLATE_BASE_DOMAIN are the
 * subdomains' space and are refused.
 */
export function normalizeCustomDomain(raw: string, baseDomain: string): string {
  const domain = raw.toLowerCase().replace(/\.$/, '');
  const labels = domain.split('.');
  if (!HOST_NAME_RE.test(domain) || labels.length < 2 || /^\d+$/.test(labels[labels.length - 1]!)) {
    throw ValidationError.forField('custom_domain', 'must be a host name such as app.example.com');
  }
  if (domain === baseDomain || domain.endsWith(`.${baseDomain}`)) {
    throw ValidationError.forField('custom_domain', `must not be under ${baseDomain}, where the subdomains live`);
  }
  return domain;
}
