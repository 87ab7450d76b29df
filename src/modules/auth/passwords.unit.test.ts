import { describe, expect, it } from 'vitest';
import { hashPassword, verifyPassword } from './passwords.js';

/**
 * A refusal costs the configured work whatever the account's hash (docs/accounts.md, Passwords): an
 * unknown email, a wrong password against a current hash, and one against a hash made before
 * PASSWORD_HASH_LOG_N was raised all spend 2^ln of scrypt, so no 401 comes back quicker than another.
 * Small costs keep it quick; the sums are what is compared, not the clock.
 */
describe('the work of a password check', () => {
  const LOG_N = 12;

  it('a wrong password against an older, cheaper hash is padded to the configured work, as an unknown email is', async () => {
    const unknown = await verifyPassword('guess', null, LOG_N);
    const current = await verifyPassword('guess', await hashPassword('right password', LOG_N), LOG_N);
    const older = await verifyPassword('guess', await hashPassword('right password', LOG_N - 3), LOG_N);
    expect(unknown).toEqual({ ok: false, needsRehash: false, work: 2 ** LOG_N });
    expect(current).toEqual({ ok: false, needsRehash: false, work: 2 ** LOG_N });
    expect(older).toEqual({ ok: false, needsRehash: false, work: 2 ** LOG_N });
  });

  it('the right password against an older hash passes at once and asks for a new hash', async () => {
    expect(await verifyPassword('right password', await hashPassword('right password', LOG_N - 3), LOG_N)).toEqual({
      ok: true,
      needsRehash: true,
      work: 2 ** (LOG_N - 3),
    });
  });
});
