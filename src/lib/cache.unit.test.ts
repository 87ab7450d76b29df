import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.js';
import { TtlCache } from './cache.js';

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('TtlCache', () => {
  it('load() reads once and serves the copy until it expires', async () => {
    const clock = new ManualClock('2026-01-01T00:00:00.000Z');
    const cache = new TtlCache<number>(clock, 1000);
    let reads = 0;
    const load = async () => ++reads;
    expect(await cache.load('k', load)).toBe(1);
    expect(await cache.load('k', load)).toBe(1);
    clock.advance(1000);
    expect(await cache.load('k', load)).toBe(2);
  });

  it('callers that miss while a key loads share its one read; after an invalidation they read afresh', async () => {
    const cache = new TtlCache<string>(new ManualClock('2026-01-01T00:00:00.000Z'), 60_000);
    const first = deferred<string>();
    let reads = 0;
    const waiting = Array.from({ length: 100 }, () =>
      cache.load('hot', () => {
        reads++;
        return first.promise;
      }),
    );
    cache.delete('hot'); // revoked while it loads: the next caller must not share the old read
    const after = cache.load('hot', async () => {
      reads++;
      return 'after';
    });
    first.resolve('before');
    expect(new Set(await Promise.all(waiting))).toEqual(new Set(['before']));
    expect(await after).toBe('after');
    expect(reads).toBe(2);
  });

  it('a failed load is shared by its waiters and not remembered', async () => {
    const cache = new TtlCache<string>(new ManualClock('2026-01-01T00:00:00.000Z'), 60_000);
    const failing = () => Promise.reject(new Error('database down'));
    await expect(Promise.all([cache.load('k', failing), cache.load('k', failing)])).rejects.toThrow('database down');
    expect(await cache.load('k', async () => 'up')).toBe('up');
  });

  it('a load that raced a clear() answers once and is not stored', async () => {
    const cache = new TtlCache<string>(new ManualClock('2026-01-01T00:00:00.000Z'), 60_000);
    const row = deferred<string>();
    const pending = cache.load('key', () => row.promise);
    cache.clear(); // e.g. the key was revoked while its row was being read
    row.resolve('read before the revocation');
    expect(await pending).toBe('read before the revocation');
    expect(cache.get('key')).toBeUndefined();
    expect(await cache.load('key', async () => 'read after')).toBe('read after');
    expect(cache.get('key')).toBe('read after');
  });

  it('a load that raced a delete() of any key is not stored', async () => {
    const cache = new TtlCache<string>(new ManualClock('2026-01-01T00:00:00.000Z'), 60_000);
    const row = deferred<string>();
    const pending = cache.load('a', () => row.promise);
    cache.delete('b');
    row.resolve('stale');
    await pending;
    expect(cache.get('a')).toBeUndefined();
  });

  it('replace() keeps the entry’s expiry and adds nothing that was absent', () => {
    const clock = new ManualClock('2026-01-01T00:00:00.000Z');
    const cache = new TtlCache<number>(clock, 1000);
    cache.replace('absent', 1);
    expect(cache.get('absent')).toBeUndefined();
    cache.set('k', 1);
    clock.advance(900);
    cache.replace('k', 2);
    expect(cache.get('k')).toBe(2);
    clock.advance(100);
    expect(cache.get('k')).toBeUndefined();
  });

  it('a TTL of 0 stores nothing', async () => {
    const cache = new TtlCache<number>(new ManualClock('2026-01-01T00:00:00.000Z'), 0);
    let reads = 0;
    await cache.load('k', async () => ++reads);
    await cache.load('k', async () => ++reads);
    expect(reads).toBe(2);
  });

  it('evicts the oldest entry past its size bound', () => {
    const cache = new TtlCache<number>(new ManualClock('2026-01-01T00:00:00.000Z'), 60_000, 2);
    cache.set('a', 1);
    cache.set('b', 2);
    cache.set('c', 3);
    expect([cache.get('a'), cache.get('b'), cache.get('c')]).toEqual([undefined, 2, 3]);
  });
});
