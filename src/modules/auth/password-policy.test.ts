import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness, json, unique } from '../../../test/harness.js';

/**
 * docs/accounts.md, "Password rule": passwords on a common-password list, equal to the email, or too
 * guessable are refused (400 naming the field). The reviews signed up with `password`, `12345678`, the
 * email itself, then `aaaaaaaa`, `abcdefgh` and `Summer2024!`.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const signup = (email: string, password: string, fullName?: string) =>
  h.request({ method: 'POST', url: '/auth/signup', payload: { email, password, ...(fullName ? { full_name: fullName } : {}) } });

type Refusal = { error: { code: string; message: string }; details: { fields: Array<{ field: string; message: string }> } };

describe('weak passwords are refused at signup', () => {
  it('common passwords (any case, surrounding spaces), the email and its local part: 400 VALIDATION_ERROR naming password; nothing is created', async () => {
    const email = `${unique('Ada.Lovelace')}@Example.com`;
    const local = email.slice(0, email.indexOf('@'));
    const weak = ['password', '12345678', 'PASSWORD', 'Password1', ' iloveyou ', 'qwertyuiop', email, email.toLowerCase(), local.toUpperCase()];
    for (const password of weak) {
      const res = await signup(email, password);
      expect(res.statusCode, password).toBe(400);
      const body = json<Refusal>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields).toEqual([{ field: 'password', message: expect.any(String) }]);
    }
    const rows = await h.deps.db.query('SELECT 1 FROM users WHERE lower(email) = lower($1)', [email]);
    expect(rows).toHaveLength(0);

    // A password that merely contains a common word is fine.
    expect((await signup(email, 'password of the lighthouse keeper')).statusCode).toBe(201);
  });

  it('guessable passwords (score below 3 of 4): aaaaaaaa, abcdefgh, Summer2024!, and ones made of the email or the name', async () => {
    const email = `${unique('grace.hopper')}@example.com`.toLowerCase();
    const local = email.slice(0, email.indexOf('@'));
    for (const password of ['aaaaaaaa', 'abcdefgh', 'Summer2024!', `${local}42`, 'Hopper1906!']) {
      const res = await signup(email, password, 'Grace Hopper');
      expect(res.statusCode, password).toBe(400);
      const body = json<Refusal>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields).toEqual([{ field: 'password', message: expect.stringMatching(/too (easy to guess|common)/) }]);
    }
    expect(await h.deps.db.query('SELECT 1 FROM users WHERE lower(email) = $1', [email])).toHaveLength(0);
    expect((await signup(email, 'kx8-Vu2p-Lm9q', 'Grace Hopper')).statusCode).toBe(201);
  });

  it('only the first 64 characters are scored: a weak start padded past them is still weak', async () => {
    const email = `${unique('pad')}@example.com`.toLowerCase();
    const res = await signup(email, `${'a'.repeat(64)}kx8-Vu2p-Lm9q-unguessable-tail`);
    expect(res.statusCode).toBe(400);
    expect(json<Refusal>(res).details.fields[0]?.field).toBe('password');
  });

  it('login never scores: an account whose password predates the rule still signs in', async () => {
    const email = `${unique('legacy')}@example.com`.toLowerCase();
    expect((await signup(email, 'kx8-Vu2p-Lm9q')).statusCode).toBe(201);
    // As a hash stored before the rule existed: the weak password set directly.
    const { hashPassword } = await import('./passwords.js');
    await h.deps.db.query('UPDATE users SET password_hash = $2 WHERE lower(email) = $1', [email, await hashPassword('aaaaaaaa', h.config.passwordHashLogN)]);
    const login = await h.request({ method: 'POST', url: '/auth/login', payload: { email, password: 'aaaaaaaa' } });
    expect(login.statusCode).toBe(200);
  });
});
