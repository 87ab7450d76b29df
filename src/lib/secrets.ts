import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import { crc32 } from 'node:zlib';

/**
 * Bearer secrets (docs/accounts.md, Bearer secrets): prefix + 30 base62 random characters (178.6 bits) + 6 base62 characters
 * of CRC-32 over the random part, so a mistyped key is refused without a database read.
 * Stored only as SHA-256 (they are high-entropy: a slow hash adds nothing).
 */
export const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const BODY_LENGTH = 30;
const CHECKSUM_LENGTH = 6;

export const API_KEY_PREFIX = 'cg_';
export const DEPLOYMENT_SECRET_PREFIX = 'cgds_';

export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    // 248 = 62 * 4: bytes at or above it are rejected so every character is equally likely.
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

export function base62Checksum(body: string): string {
  let value = crc32(Buffer.from(body, 'utf8'));
  let out = '';
  while (value > 0) {
    out = BASE62[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out.padStart(CHECKSUM_LENGTH, '0');
}

function makeToken(prefix: string): string {
  const body = randomBase62(BODY_LENGTH);
  return `${prefix}${body}${base62Checksum(body)}`;
}

export const generateApiKey = (): string => makeToken(API_KEY_PREFIX);
export const generateDeploymentSecret = (): string => makeToken(DEPLOYMENT_SECRET_PREFIX);

/** True when `token` is as long as a token with `prefix` is: a cheap first refusal, before anything is hashed. */
export const hasTokenLength = (token: string, prefix: string): boolean => token.length === prefix.length + BODY_LENGTH + CHECKSUM_LENGTH;

/** True when `token` has the shape and a matching checksum; no database read needed to refuse it. */
export function isWellFormedToken(token: string, prefix: string): boolean {
  if (token.length !== prefix.length + BODY_LENGTH + CHECKSUM_LENGTH || !token.startsWith(prefix)) return false;
  const body = token.slice(prefix.length, prefix.length + BODY_LENGTH);
  const checksum = token.slice(prefix.length + BODY_LENGTH);
  if (!/^[0-9A-Za-z]+$/.test(body) || !/^[0-9A-Za-z]+$/.test(checksum)) return false;
  return base62Checksum(body) === checksum;
}

export function sha256Hex(value: string): string {
  return hash('sha256', value);
}

/** API key prefix shown in lists: the first 10 characters. */
export const keyPrefix = (key: string): string => key.slice(0, 10);

export function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}
