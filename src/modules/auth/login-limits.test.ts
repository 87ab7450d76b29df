import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness, json, signUp } from '../../../test/harness.js';
import { MINUTE, SECOND } from '../../clock.js';
import { HASH_CONCURRENCY, HASH_QUEUE, passwordHashing } from './passwords.js';

/**
 * Login limits and the hash queue (docs/accounts.md, Tokens and sessions), written as the attacks of the security review: the login window is exact
 * (10 per 15 minutes per IP and email, whatever the spacing), and password hashing waits in a bounded
 * queue (past it: 429 with Retry-After, not a queue without end).
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

let ipCounter = 10;
/** Each test its own client IP, so its (IP, email) windows are its own. */
const freshIp = () => `198.51.100.${ipCounter++}`;

const login = (email: string, password: string, remoteAddress: string) =>
  h.request({ method: 'POST', url: '/auth/login', payload: { email, password }, remoteAddress });

describe('login window is exact (10 per 15 minutes per IP and email)', () => {
  it('10 failures spread over 11¼ minutes: the 11th attempt at 12½ minutes is 429, and the first slot frees exactly 15 minutes after the first attempt', async () => {
    const u = await signUp(h);
    const ip = freshIp();
    const first = h.clock.now().getTime();
    for (let i = 0; i < 10; i++) {
      h.clock.set(first + i * 75 * SECOND);
      expect((await login(u.email, 'wrong password', ip)).statusCode, `attempt ${i + 1}`).toBe(401);
    }
    h.clock.set(first + 12.5 * MINUTE);
    const refused = await login(u.email, u.password, ip);
    expect(refused.statusCode).toBe(429);
    expect(json(refused)).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });
    expect(refused.headers['retry-after']).toBe('150');

    h.clock.set(first + 15 * MINUTE - 1);
    expect((await login(u.email, u.password, ip)).statusCode).toBe(429);
    h.clock.set(first + 15 * MINUTE);
    expect((await login(u.email, u.password, ip)).statusCode).toBe(200);
    // That success took the freed slot; the next one frees 75 s after the second failure.
    const next = await login(u.email, u.password, ip);
    expect(next.statusCode).toBe(429);
    expect(next.headers['retry-after']).toBe('75');
  });

  it('10 failures just before a 15-minute boundary still count 90 s after it (the approximating counter let the 11th in)', async () => {
    const u = await signUp(h);
    const ip = freshIp();
    const boundary = Math.ceil(h.clock.now().getTime() / (15 * MINUTE) + 1) * 15 * MINUTE;
    h.clock.set(boundary - MINUTE);
    for (let i = 0; i < 10; i++) {
      expect((await login(u.email, 'wrong password', ip)).statusCode).toBe(401);
      h.clock.advance(5 * SECOND);
    }
    h.clock.set(boundary + 90 * SECOND);
    const refused = await login(u.email, u.password, ip);
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBe(String(12.5 * 60));
  });
});

describe('password hashing waits in a bounded queue', () => {
  /** Occupy every running slot and `waiting` queue places of the process's hash gate until `open()`. */
  function holdGate(waiting: number): { open: () => void; drained: Promise<unknown> } {
    let open!: () => void;
    const door = new Promise<void>((resolve) => {
      open = resolve;
    });
    const held = Array.from({ length: HASH_CONCURRENCY + waiting }, () => passwordHashing.run(() => door));
    return { open, drained: Promise.all(held) };
  }

  async function untilQueued(count: number): Promise<void> {
    const deadline = Date.now() + 5_000;
    while (passwordHashing.load.waiting < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    expect(passwordHashing.load.waiting).toBe(count);
  }

  it('with the queue full, login (known or unknown email) and signup answer 429 with Retry-After at once; a queued login completes once it drains', async () => {
    const u = await signUp(h);
    const gate = holdGate(HASH_QUEUE - 1);
    expect(passwordHashing.load).toEqual({ running: HASH_CONCURRENCY, waiting: HASH_QUEUE - 1 });

    // A real login takes the last place in the queue and waits there.
    const queued = login(u.email, u.password, freshIp());
    await untilQueued(HASH_QUEUE);

    for (const res of [
      await login(u.email, u.password, freshIp()),
      await login(`nobody-${u.email}`, 'some password 1', freshIp()),
      await h.request({ method: 'POST', url: '/auth/signup', payload: { email: `new-${u.email}`, password: 'a fine long password' } }),
    ]) {
      expect(res.statusCode).toBe(429);
      expect(json(res)).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    }
    // Refusals did not grow the queue.
    expect(passwordHashing.load).toEqual({ running: HASH_CONCURRENCY, waiting: HASH_QUEUE });

    gate.open();
    await gate.drained;
    expect((await queued).statusCode).toBe(200);
    expect((await login(u.email, u.password, freshIp())).statusCode).toBe(200);
    expect(passwordHashing.load).toEqual({ running: 0, waiting: 0 });
  });
});
