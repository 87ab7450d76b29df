import { randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto';

/**
 * Passwords (SPEC §2): scrypt with OWASP-equivalent parameters (N=2^17, r=8, p=1), 16-byte salt,
 * stored as a PHC-style string so parameters can be raised and old hashes rehashed on login.
 * One hash needs 128·N·r bytes (128 MiB at N=2^17): a semaphore caps how many run at once, so a
 * login flood queues instead of exhausting memory.
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

class Semaphore {
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  constructor(private readonly limit: number) {}
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active += 1;
    try {
      return await fn();
    } finally {
      this.active -= 1;
      this.waiting.shift()?.();
    }
  }
}

/** At most two hashes at once (256 MiB at the default cost); the rest wait their turn. */
const hashing = new Semaphore(2);

export async function hashPassword(password: string, logN: number): Promise<string> {
  const salt = randomBytes(16);
  const key = await hashing.run(() => scrypt(password, salt, logN));
  return `$scrypt$ln=${logN},r=${R},p=${P}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export interface Verification {
  ok: boolean;
  /** The hash was made with weaker parameters than configured: store a new one. */
  needsRehash: boolean;
}

const PHC = /^\$scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$/;

export async function verifyPassword(password: string, stored: string | null, logN: number): Promise<Verification> {
  const match = stored ? PHC.exec(stored) : null;
  if (!match) {
    // Spend the same time as a real check, so an unknown email cannot be told from a wrong password.
    await hashing.run(() => scrypt(password, randomBytes(16), logN));
    return { ok: false, needsRehash: false };
  }
  const storedLogN = Number(match[1]);
  const salt = Buffer.from(match[4]!, 'base64');
  const expected = Buffer.from(match[5]!, 'base64');
  const key = await hashing.run(() => scrypt(password, salt, storedLogN));
  const ok = key.length === expected.length && timingSafeEqual(key, expected);
  return { ok, needsRehash: ok && storedLogN < logN };
}
