import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { MINUTE } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Deps } from '../../context.js';
import { effectiveFlags } from '../entitlements/flags.js';

/**
 * The top-up link of a refusal for credits (docs/billing.md, "Top-up link"): a page of the service,
 * PUBLIC_BASE_URL/console/top-up/{token}, where anyone holding the link may buy a credit pack for one
 * deployment. The token is stateless: key id, deployment id and expiry, signed with HMAC-SHA256 under
 * a key derived from JWT_SECRET (HKDF, one key per key id), valid 30 minutes.
 */

export const TOP_UP_LIFETIME_MS = 30 * MINUTE;

/** The key id new tokens carry; a token naming another is refused. */
const KEY_ID = 1;
const PAYLOAD_BYTES = 1 + 16 + 6;
const MAC_BYTES = 32;

const keys = new WeakMap<Config, Map<number, Buffer>>();

function keyOf(config: Pick<Config, 'jwtSecret'> & object, keyId: number): Buffer {
  let perConfig = keys.get(config as Config);
  if (!perConfig) {
    perConfig = new Map();
    keys.set(config as Config, perConfig);
  }
  let key = perConfig.get(keyId);
  if (!key) {
    key = Buffer.from(hkdfSync('sha256', config.jwtSecret, 'creditgate', `top-up-link/${keyId}`, 32));
    perConfig.set(keyId, key);
  }
  return key;
}

const UUID_HEX = /^[0-9a-f]{32}$/;

function uuidBytes(id: string): Buffer | null {
  const hex = id.replaceAll('-', '').toLowerCase();
  return UUID_HEX.test(hex) ? Buffer.from(hex, 'hex') : null;
}

function uuidOf(bytes: Buffer): string {
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** A token for `deploymentId`, valid until now + 30 minutes. */
export function signTopUpToken(config: Pick<Config, 'jwtSecret'>, deploymentId: string, now: Date): string {
  const id = uuidBytes(deploymentId);
  if (!id) throw new Error('a top-up token names a deployment by its UUID');
  const payload = Buffer.alloc(PAYLOAD_BYTES);
  payload.writeUInt8(KEY_ID, 0);
  id.copy(payload, 1);
  payload.writeUIntBE(Math.floor((now.getTime() + TOP_UP_LIFETIME_MS) / 1000), 17, 6);
  const mac = createHmac('sha256', keyOf(config, KEY_ID)).update(payload).digest();
  return Buffer.concat([payload, mac]).toString('base64url');
}

/** The deployment a token names, or null when it is malformed, signed under another key, altered or expired. */
export function readTopUpToken(config: Pick<Config, 'jwtSecret'>, token: string, now: Date): string | null {
  if (token.length > 200 || !/^[A-Za-z0-9_-]+$/.test(token)) return null;
  const raw = Buffer.from(token, 'base64url');
  if (raw.length !== PAYLOAD_BYTES + MAC_BYTES || raw.toString('base64url') !== token) return null;
  const payload = raw.subarray(0, PAYLOAD_BYTES);
  if (payload.readUInt8(0) !== KEY_ID) return null;
  const expected = createHmac('sha256', keyOf(config, KEY_ID)).update(payload).digest();
  if (!timingSafeEqual(expected, raw.subarray(PAYLOAD_BYTES))) return null;
  const expiresAtMs = payload.readUIntBE(17, 6) * 1000;
  if (now.getTime() >= expiresAtMs) return null;
  return uuidOf(payload.subarray(1, 17));
}

/** What decides whether billing is available for a deployment. */
export interface BillableDeployment {
  status: string;
  tier: string;
  flag_overrides: unknown;
  org_deleted?: boolean;
}

/**
 * Billing is available for a deployment (docs/billing.md, "Top-up link") when STRIPE_SECRET_KEY and at
 * least one CREDIT_PACKS entry are set, the deployment is active (its organization not deleted) and
 * its `billing_enabled` flag is true.
 */
export function billingAvailable(config: Pick<Config, 'stripeSecretKey' | 'creditPacks'>, deployment: BillableDeployment): boolean {
  if (!config.stripeSecretKey || Object.keys(config.creditPacks).length === 0) return false;
  if (deployment.status !== 'active' || deployment.org_deleted === true) return false;
  return effectiveFlags(deployment.tier, deployment.flag_overrides).billing_enabled;
}

/** The top-up link for a refusal for credits, or undefined when billing is not available for the deployment. */
export function topUpUrl(deps: Pick<Deps, 'config' | 'clock'>, deploymentId: string, deployment: BillableDeployment): string | undefined {
  if (!billingAvailable(deps.config, deployment)) return undefined;
  return `${deps.config.publicBaseUrl}/console/top-up/${signTopUpToken(deps.config, deploymentId, deps.clock.now())}`;
}
