import type { Clock } from '../clock.js';

/** A small in-process cache with a time to live and a size bound (oldest entry evicted first). */
export class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();
  /** Bumped by every clear() and delete(): a load that began before an invalidation must not store what it read. */
  private generation = 0;
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
    const generation = this.generation;
    const value = await load();
    if (generation === this.generation) this.set(key, value);
    return value;
  }

  delete(key: string): void {
    this.generation++;
    this.entries.delete(key);
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
  }
}
