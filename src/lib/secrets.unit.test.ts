import { createHash } from 'node:crypto';
import { crc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import {
  API_KEY_PREFIX,
  DEPLOYMENT_SECRET_PREFIX,
  generateApiKey,
  generateDeploymentSecret,
  isWellFormedToken,
  keyPrefix,
  safeEqual,
  sha256Hex,
} from './secrets.js';

/** The token format (docs/accounts.md, Bearer secrets), checked against an encoding written here, not the module's own. */
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function toBase62(value: number): string {
  let n = BigInt(value);
  let out = '';
  while (n > 0n) {
    out = ALPHABET[Number(n % 62n)]! + out;
    n /= 62n;
  }
  return out.padStart(6, '0');
}

const expectedChecksum = (body: string): string => toBase62(crc32(Buffer.from(body, 'ascii')));

function parts(token: string, prefix: string) {
  return { body: token.slice(prefix.length, prefix.length + 30), checksum: token.slice(prefix.length + 30) };
}

/** Another base62 character than `c`, so a substitution is a real change. */
const other = (c: string): string => (c === 'A' ? 'B' : 'A');

describe('API keys', () => {
  it('are cg_ + 30 base62 characters + a 6-character base62 CRC-32 of those 30', () => {
    for (let i = 0; i < 200; i++) {
      const key = generateApiKey();
      expect(key).toMatch(/^cg_[0-9A-Za-z]{36}$/);
      expect(key).toHaveLength(39);
      const { body, checksum } = parts(key, 'cg_');
      expect(checksum).toBe(expectedChecksum(body));
      expect(isWellFormedToken(key, API_KEY_PREFIX)).toBe(true);
    }
  });

  it('the checksum is the CRC-32/IEEE of the body, base62 most significant digit first, left-padded with 0', () => {
    // Known CRC-32/IEEE check value: crc32("123456789") = 0xCBF43926.
    expect(crc32(Buffer.from('123456789'))).toBe(0xcbf43926);
    expect(toBase62(0xcbf43926)).toBe('3jZRME');
    expect(toBase62(0)).toBe('000000');
    expect(toBase62(61)).toBe('00000z');
    expect(toBase62(62)).toBe('000010');
    expect(toBase62(0xffffffff)).toBe('4gfFC3');
    // A hand-built token with a known body is accepted exactly when its checksum is ours.
    const body = 'abcdefghijklmnopqrstuvwxyz0123';
    expect(isWellFormedToken(`cg_${body}${expectedChecksum(body)}`, API_KEY_PREFIX)).toBe(true);
    // A body whose CRC has leading zero digits in base62 keeps them (left-padded).
    let padded: string | undefined;
    for (let n = 0; n < 1_000_000 && !padded; n++) {
      const candidate = n.toString().padStart(30, '0');
      if (crc32(Buffer.from(candidate)) < 62 ** 5) padded = candidate;
    }
    expect(padded).toBeDefined();
    const checksum = expectedChecksum(padded!);
    expect(checksum.startsWith('0')).toBe(true);
    expect(isWellFormedToken(`cg_${padded}${checksum}`, API_KEY_PREFIX)).toBe(true);
    expect(isWellFormedToken(`cg_${padded}${checksum.replace(/^0+/, '')}`, API_KEY_PREFIX)).toBe(false);
  });

  it('a mistyped key fails isWellFormedToken: any one character changed, two neighbours swapped, cut or extended', () => {
    const key = generateApiKey();
    for (let i = API_KEY_PREFIX.length; i < key.length; i++) {
      const typo = key.slice(0, i) + other(key[i]!) + key.slice(i + 1);
      expect(isWellFormedToken(typo, API_KEY_PREFIX), `position ${i}`).toBe(false);
    }
    for (let i = API_KEY_PREFIX.length; i < key.length - 1; i++) {
      if (key[i] === key[i + 1]) continue;
      const swapped = key.slice(0, i) + key[i + 1] + key[i] + key.slice(i + 2);
      expect(isWellFormedToken(swapped, API_KEY_PREFIX), `swap at ${i}`).toBe(false);
    }
    expect(isWellFormedToken(key.slice(0, -1), API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(`${key}0`, API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(key.toUpperCase(), API_KEY_PREFIX)).toBe(key.toUpperCase() === key);
    expect(isWellFormedToken(` ${key}`, API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(`${key}\n`, API_KEY_PREFIX)).toBe(false);
  });

  it('refuses the wrong prefix, non-base62 characters and junk', () => {
    const key = generateApiKey();
    const { body, checksum } = parts(key, 'cg_');
    expect(isWellFormedToken(`CG_${body}${checksum}`, API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(`cgx${body}${checksum}`, API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(`${body}${checksum}`, API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(`cg_${body.slice(0, 29)}-${checksum}`, API_KEY_PREFIX)).toBe(false);
    expect(isWellFormedToken(`cg_${body.slice(0, 29)}_${checksum}`, API_KEY_PREFIX)).toBe(false);
    for (const junk of ['', 'cg_', 'cg_nope', 'x'.repeat(39), `cg_${'é'.repeat(36)}`]) {
      expect(isWellFormedToken(junk, API_KEY_PREFIX), junk).toBe(false);
    }
    // An API key is not a deployment secret, and the other way round.
    expect(isWellFormedToken(key, DEPLOYMENT_SECRET_PREFIX)).toBe(false);
    expect(isWellFormedToken(generateDeploymentSecret(), API_KEY_PREFIX)).toBe(false);
  });

  it('key_prefix is the first 10 characters', () => {
    const key = generateApiKey();
    expect(keyPrefix(key)).toBe(key.slice(0, 10));
    expect(keyPrefix(key)).toHaveLength(10);
    expect(keyPrefix(key).startsWith('cg_')).toBe(true);
  });

  it('carry at least 178 random bits: 10,000 keys, no duplicate, every base62 character used', () => {
    expect(30 * Math.log2(62)).toBeGreaterThanOrEqual(178);
    const keys = Array.from({ length: 10_000 }, generateApiKey);
    expect(new Set(keys).size).toBe(10_000);
    expect(new Set(keys.map((k) => parts(k, 'cg_').body)).size).toBe(10_000);
    // 300,000 random characters: each of the 62 is expected ~4,800 times.
    const counts = new Map<string, number>();
    for (const k of keys) for (const c of parts(k, 'cg_').body) counts.set(c, (counts.get(c) ?? 0) + 1);
    expect([...counts.keys()].sort().join('')).toBe([...ALPHABET].sort().join(''));
    for (const [c, n] of counts) {
      expect(n, c).toBeGreaterThan(4000);
      expect(n, c).toBeLessThan(5700);
    }
  });
});

describe('deployment secrets', () => {
  it('are cgds_ + the same body and checksum', () => {
    const secrets = Array.from({ length: 10_000 }, generateDeploymentSecret);
    for (const secret of secrets.slice(0, 200)) {
      expect(secret).toMatch(/^cgds_[0-9A-Za-z]{36}$/);
      const { body, checksum } = parts(secret, 'cgds_');
      expect(checksum).toBe(expectedChecksum(body));
      expect(isWellFormedToken(secret, DEPLOYMENT_SECRET_PREFIX)).toBe(true);
    }
    expect(new Set(secrets).size).toBe(10_000);
    const secret = secrets[0]!;
    const i = 'cgds_'.length + 7;
    expect(isWellFormedToken(secret.slice(0, i) + other(secret[i]!) + secret.slice(i + 1), DEPLOYMENT_SECRET_PREFIX)).toBe(false);
  });
});

describe('hashing and comparison', () => {
  it('sha256Hex is the hex SHA-256 of the UTF-8 string', () => {
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    const key = generateApiKey();
    expect(sha256Hex(key)).toBe(createHash('sha256').update(key, 'utf8').digest('hex'));
    expect(sha256Hex(key)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('safeEqual compares exactly, including different lengths', () => {
    expect(safeEqual('same-value', 'same-value')).toBe(true);
    expect(safeEqual('same-value', 'same-valuE')).toBe(false);
    expect(safeEqual('short', 'shorter')).toBe(false);
    expect(safeEqual('', '')).toBe(true);
  });
});
