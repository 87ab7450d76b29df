import type { Clock } from '../clock.js';

/** A small in-process cache with a time to live and a size bound (oldest entry evicted first). */
export class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();
  /** Bumped by every clear() and delete(): a load that began before an invalidation must not store what it read. */
  private generation = 0;
  /** Loads under way, shared by every caller that misses the same key meanwhile (no stampede on a hot key). */
  private readonly loading = new Map<string, Promise<V>>();
  constructor(
    private readonly clock: Clock,
    private readonly ttlMs: number,
    private readonly maxEntries = 50_000,
  ) {}

  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.clock.now().getTime()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: V): void {
    if (this.ttlMs <= 0) return;
    if (this.entries.size >= this.maxEntries && !this.entries.has(key)) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, { value, expiresAt: this.clock.now().getTime() + this.ttlMs });
  }

  /** Replace a present entry's value and keep its expiry: new facts do not make the rest of it younger. */
  replace(key: string, value: V): void {
    const entry = this.entries.get(key);
    if (entry) entry.value = value;
  }

  /**
   * The cached value, else `load()`'s, stored only when no invalidation (clear, or delete of this key)
   * happened while it loaded: a read that raced a revocation is answered once but never cached, so the
   * next request reads the database again.
   */
  async load(key: string, load: () => Promise<V>): Promise<V> {
    const cached = this.get(key);
    if (cached !== undefined) return cached;
    // Callers that miss while a load of this key is under way share it: a hundred requests for a key
    // whose entry just expired make one read, not a hundred. An invalidation forgets the shared load, so
    // a caller after it reads afresh.
    const running = this.loading.get(key);
    if (running) return running;
    const generation = this.generation;
    const promise: Promise<V> = Promise.resolve()
      .then(load)
      .then((value) => {
        if (generation === this.generation) this.set(key, value);
        return value;
      })
      .finally(() => {
        if (this.loading.get(key) === promise) this.loading.delete(key);
      });
    this.loading.set(key, promise);
    return promise;
  }

  delete(key: string): void {
    this.generation++;
    this.entries.delete(key);
    this.loading.delete(key);
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
    this.loading.clear();
  }
}
