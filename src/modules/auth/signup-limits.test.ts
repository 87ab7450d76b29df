import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness, json, signUp, unique } from '../../../test/harness.js';
import { MINUTE } from '../../clock.js';
import { SIGNUP_TAKEN_LIMIT } from './service.js';

/**
 * Sign-up tells an address with an account apart (409), as most consoles do; what bounds that oracle is
 * a limit per client IP on such answers (docs/accounts.md, "Sign-up and existing addresses";
 * docs/decisions-accounts.md, "Sign-up"). Replayed as the attack: an address list tried from one IP.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

let ipCounter = 10;
const freshIp = () => `203.0.113.${ipCounter++}`;
const PASSWORD = 'correct horse battery staple 42';

const signUpFrom = (email: string, remoteAddress: string) =>
  h.request({ method: 'POST', url: '/auth/signup', payload: { email, password: PASSWORD }, remoteAddress });

async function userCount(): Promise<number> {
  const [row] = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM users');
  return row!.n;
}

describe('sign-up for an address that has an account', () => {
  it(`is 409 for ${SIGNUP_TAKEN_LIMIT} such tries an hour per IP; then every sign-up from that IP is 429, a new address too, until the window frees`, async () => {
    const existing = await signUp(h);
    const ip = freshIp();
    const start = h.clock.now().getTime();
    for (let i = 0; i < SIGNUP_TAKEN_LIMIT; i++) {
      h.clock.set(start + i * MINUTE);
      const res = await signUpFrom(i % 2 === 0 ? existing.email : existing.email.toUpperCase(), ip);
      expect(res.statusCode, `try ${i + 1}`).toBe(409);
      expect(json<{ error: { code: string } }>(res).error.code).toBe('CONFLICT');
    }
    const before = await userCount();
    h.clock.set(start + 30 * MINUTE);
    // Past the limit, the answer no longer depends on the address: no oracle left from this IP.
    const taken = await signUpFrom(existing.email, ip);
    const fresh = await signUpFrom(`${unique('fresh')}@example.com`.toLowerCase(), ip);
    for (const res of [taken, fresh]) {
      expect(res.statusCode).toBe(429);
      expect(json<{ error: { code: string } }>(res).error.code).toBe('RATE_LIMITED');
      expect(res.headers['retry-after']).toBe(String(30 * 60));
    }
    expect(await userCount()).toBe(before);

    // Another IP is not affected; the first slot frees an hour after the first try.
    expect((await signUpFrom(existing.email, freshIp())).statusCode).toBe(409);
    h.clock.set(start + 60 * MINUTE);
    expect((await signUpFrom(`${unique('later')}@example.com`.toLowerCase(), ip)).statusCode).toBe(201);
  });

  it('sign-ups of new addresses do not use the window', async () => {
    const ip = freshIp();
    for (let i = 0; i < SIGNUP_TAKEN_LIMIT + 2; i++) {
      expect((await signUpFrom(`${unique('new')}@example.com`.toLowerCase(), ip)).statusCode, `sign-up ${i + 1}`).toBe(201);
    }
    const existing = await signUp(h);
    expect((await signUpFrom(existing.email, ip)).statusCode).toBe(409);
  });
});
