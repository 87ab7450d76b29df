import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness, json, unique } from '../../../test/harness.js';

/**
 * SPEC §8 account safety: "passwords on a common-password list, or equal to the email, are refused
 * (400 naming the field)". The review signed up with `password`, `12345678` and the email itself.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const signup = (email: string, password: string) => h.request({ method: 'POST', url: '/auth/signup', payload: { email, password } });

describe('weak passwords are refused at signup', () => {
  it('common passwords (any case, surrounding spaces), the email and its local part: 400 VALIDATION_ERROR naming password; nothing is created', async () => {
    const email = `${unique('Ada.Lovelace')}@Example.com`;
    const local = email.slice(0, email.indexOf('@'));
    const weak = ['password', '12345678', 'PASSWORD', 'Password1', ' iloveyou ', 'qwertyuiop', email, email.toLowerCase(), local.toUpperCase()];
    for (const password of weak) {
      const res = await signup(email, password);
      expect(res.statusCode, password).toBe(400);
      const body = json<{ error: { code: string; message: string }; details: { fields: Array<{ field: string; message: string }> } }>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields).toEqual([{ field: 'password', message: expect.any(String) }]);
    }
    const rows = await h.deps.db.query('SELECT 1 FROM users WHERE lower(email) = lower($1)', [email]);
    expect(rows).toHaveLength(0);

    // A password that merely contains a common word is fine.
    expect((await signup(email, 'password of the lighthouse keeper')).statusCode).toBe(201);
  });
});
