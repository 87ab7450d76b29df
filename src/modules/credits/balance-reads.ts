import type { Database } from '../../db/client.js';
import type { Metrics } from '../../lib/metrics.js';
import type { BalanceRow } from './service.js';

interface Waiter {
  resolve: (row: BalanceRow | undefined) => void;
  reject: (err: unknown) => void;
}

export interface BalanceReadSettings {
  /** Gathered reads under way at once; the reads asked for meanwhile wait and go together next. */
  maxInFlight: number;
  /** Deployments per statement. */
  maxBatch: number;
}

/**
 * The balance reads of advisory checks, gathered (docs/adr/0005-cached-checks.md): the reads asked for
 * in one turn of the event loop, or while a statement is under way, go together as ONE
 * `SELECT … WHERE deployment_id = ANY($1)`, and the reads of one deployment that wait together share its
 * row. At rest a read goes at the end of its turn (one round trip, as before); under load the
 * statement under way is the window, so the reads per statement grow with the load and no timer adds
 * latency. At 1,000 deployments checked ten times a second each, the 1 s balance cache still asks for
 * about 1,000 reads a second; one statement each took about a third of the server's CPU at
 * saturation (docs/benchmarks.md).
 *
 * A read answers the row as stored, or undefined when there is none; the caller brings a row past its
 * `sync_before` up to date (credits/service.ts `readBalance`). It only reads: every write of a balance
 * stays with the deduction batcher and the credits verbs.
 */
export class BalanceReads {
  private waiting = new Map<string, Waiter[]>();
  private inFlight = 0;
  private scheduled = false;
  /** Statements sent and reads they answered, for the metrics and the tests. */
  readonly stats = { statements: 0, reads: 0 };

  constructor(
    private readonly db: Pick<Database, 'query'>,
    private readonly settings: BalanceReadSettings = { maxInFlight: 1, maxBatch: 500 },
    private readonly metrics?: Pick<Metrics, 'balanceReadBatchSize'>,
  ) {}

  read(deploymentId: string): Promise<BalanceRow | undefined> {
    return new Promise<BalanceRow | undefined>((resolve, reject) => {
      const waiters = this.waiting.get(deploymentId);
      if (waiters) waiters.push({ resolve, reject });
      else this.waiting.set(deploymentId, [{ resolve, reject }]);
      this.schedule();
    });
  }

  /**
   * Send at the end of this turn of the event loop, once: the reads of every request that arrived in
   * the same turn go together (on PGlite, whose statements finish before the next request is read,
   * this is the only gathering there is).
   */
  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.settings.maxInFlight) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.send();
    });
  }

  private send(): void {
    if (this.waiting.size === 0 || this.inFlight >= this.settings.maxInFlight) return;
    let batch: Map<string, Waiter[]>;
    if (this.waiting.size <= this.settings.maxBatch) {
      batch = this.waiting;
      this.waiting = new Map();
    } else {
      batch = new Map();
      for (const [id, waiters] of this.waiting) {
        if (batch.size >= this.settings.maxBatch) break;
        batch.set(id, waiters);
      }
      for (const id of batch.keys()) this.waiting.delete(id);
    }
    this.inFlight++;
    this.stats.statements++;
    const ids = [...batch.keys()];
    let reads = 0;
    for (const waiters of batch.values()) reads += waiters.length;
    this.stats.reads += reads;
    this.metrics?.balanceReadBatchSize.observe(reads);
    // Started inside a promise: a driver that threw instead of rejecting must still answer every waiter.
    Promise.resolve()
      .then(() =>
        ids.length === 1
          ? this.db.query<BalanceRow>('SELECT * FROM credit_balances WHERE deployment_id = $1', ids, 'balance_read')
          : this.db.query<BalanceRow>('SELECT * FROM credit_balances WHERE deployment_id = ANY($1::uuid[])', [ids], 'balance_read_many'),
      )
      .then(
        (rows) => {
          const byId = new Map<string, BalanceRow>();
          for (const row of rows) byId.set(row.deployment_id, row);
          for (const [id, waiters] of batch) {
            const row = byId.get(id);
            for (const w of waiters) w.resolve(row);
          }
        },
        (err: unknown) => {
          for (const waiters of batch.values()) for (const w of waiters) w.reject(err);
        },
      )
      .finally(() => {
        this.inFlight--;
        this.schedule();
      });
    if (this.waiting.size > 0) this.schedule();
  }
}
