import { randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto';
import { BoundedGate } from '../../lib/bounded-gate.js';

/**
 * Passwords (docs/accounts.md, Tokens and sessions): scrypt with OWASP-equivalent parameters (N=2^17, r=8, p=1), 16-byte salt,
 * stored as a PHC-style string so parameters can be raised and old hashes rehashed on login.
 * One hash needs 128·N·r bytes (128 MiB at N=2^17): a bounded gate caps how many run at once and how
 * many wait (docs/accounts.md, "Hash queue": past it, login answers 429 with Retry-After).
 */
const R = 8;
const P = 1;
const KEY_LENGTH = 32;

function scrypt(password: string, salt: Buffer, logN: number): Promise<Buffer> {
  const N = 2 ** logN;
  return new Promise((resolve, reject) => {
    scryptCb(password, salt, KEY_LENGTH, { N, r: R, p: P, maxmem: 256 * N * R }, (err, key) =>
      err ? reject(err) : resolve(key),
    );
  });
}

/**
 * Hashes running at once: two hold 256 MiB at the default cost and leave two of libuv's four pool
 * threads (where scrypt runs) to DNS, file and other crypto work. Raising it raises peak memory.
 */
export const HASH_CONCURRENCY = 2;
/** Hashes waiting: 32 behind 2 running is a few seconds at the default cost; the 35th gets 429 at once. */
export const HASH_QUEUE = 32;

/**
 * Every scrypt of the process (hash, verify, and the dummy verify for unknown emails) passes this gate,
 * so a flood of logins costs at most HASH_CONCURRENCY hashes of memory and HASH_QUEUE waiting requests;
 * the rest are refused with 429 RATE_LIMITED and Retry-After. One per process: memory is per process.
 */
export const passwordHashing = new BoundedGate(HASH_CONCURRENCY, HASH_QUEUE, 'password checks');

export async function hashPassword(password: string, logN: number): Promise<string> {
  const salt = randomBytes(16);
  const key = await passwordHashing.run(() => scrypt(password, salt, logN));
  return `$scrypt$ln=${logN},r=${R},p=${P}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export interface Verification {
  ok: boolean;
  /** The hash was made with weaker parameters than configured: store a new one. */
  needsRehash: boolean;
  /** The scrypt work spent, in units of 2^ln summed over the hashes run: the same for every refusal. */
  work: number;
}

const PHC = /^\$scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/;

export async function verifyPassword(password: string, stored: string | null, logN: number): Promise<Verification> {
  const match = stored ? PHC.exec(stored) : null;
  if (!match) {
    // Spend the same time as a real check, so an unknown email cannot be told from a wrong password.
    await passwordHashing.run(() => scrypt(password, randomBytes(16), logN));
    return { ok: false, needsRehash: false, work: 2 ** logN };
  }
  const storedLogN = Number(match[1]);
  const salt = Buffer.from(match[4]!, 'base64');
  const expected = Buffer.from(match[5]!, 'base64');
  const key = await passwordHashing.run(() => scrypt(password, salt, storedLogN));
  const ok = key.length === expected.length && timingSafeEqual(key, expected);
  let work = 2 ** storedLogN;
  if (!ok) {
    // A hash from before PASSWORD_HASH_LOG_N was raised is cheaper to check: a refusal pads it up to
    // the configured cost (2^s + 2^s + 2^(s+1) + … + 2^(n-1) = 2^n), or its quicker 401 would tell an
    // existing account from an unknown email (docs/accounts.md, Passwords).
    for (let n = storedLogN; n < logN; n++) {
      await passwordHashing.run(() => scrypt(password, randomBytes(16), n));
      work += 2 ** n;
    }
  }
  return { ok, needsRehash: ok && storedLogN < logN, work };
}
