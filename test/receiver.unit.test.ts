import { afterAll, beforeAll, expect, it } from 'vitest';
import { type Receiver, startReceiver } from './receiver.js';

/**
 * The stand-in receiver counts only requests under its own path prefix: a delivery left to an
 * earlier receiver on a port since reused is answered 404 and kept apart.
 */
let rx: Receiver;
beforeAll(async () => {
  rx = await startReceiver();
});
afterAll(() => rx?.close());

it('records requests under its prefix without it, and others as stray with a 404', async () => {
  rx.script({ status: 204 });
  const origin = `http://127.0.0.1:${rx.port}`;
  expect(rx.url.startsWith(`${origin}/rx-`)).toBe(true);

  expect((await fetch(`${rx.url}/hooks?x=1`, { method: 'POST', body: 'a' })).status).toBe(204);
  expect((await fetch(rx.url, { method: 'POST', body: 'b' })).status).toBe(204);
  const stray = await fetch(`${origin}/hooks`, { method: 'POST', body: 'c' });
  expect(stray.status).toBe(404);
  // A path that only begins like the prefix is not under it.
  expect((await fetch(`${rx.url}x/hooks`, { method: 'POST', body: 'd' })).status).toBe(404);

  expect(rx.received.map((r) => [r.path, r.body.toString()])).toEqual([
    ['/hooks?x=1', 'a'],
    ['/', 'b'],
  ]);
  expect(rx.stray.map((r) => r.body.toString())).toEqual(['c', 'd']);
});
