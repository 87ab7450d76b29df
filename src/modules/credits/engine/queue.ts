import type { Deps } from '../../../context.js';
import { type Database, isConnectionError, type Queryable, type Transaction } from '../../../db/client.js';
import { ServiceUnavailableError } from '../../../errors.js';
import { noteDeduction } from '../balance-cache.js';
import { applyBatch, applyOne } from './plan.js';
import { NotOptimistic, RowMemory, type Written } from './remembered.js';
import type { BatchDeduction, BatchOp, BatchOutcome, BatchSettings, OpBudgets } from './types.js';
import type { BudgetCounter } from '../budget-rules.js';

/**
 * Group commit for deductions (docs/adr/0004-group-commit.md). Requests that arrive while a
 * batch is in flight (or within `windowMs`) are applied together in ONE transaction: the balance rows
 * of the batch are locked once (in deployment order, so batches of several instances never deadlock),
 * each deployment's requests are applied in arrival order by the spending rule (credits/rules.ts: monthly
 * first, then purchased, never past what other holders reserved), and the ledger rows, usage records,
 * invocation answers, meter events and threshold events are written by one set-based statement each.
 * A request is answered only after its batch committed. A batch whose statements fail is rolled back
 * and its requests run one by one, each a batch of one, so one bad request fails alone.
 */

/** `queuedAt`: performance.now() at arrival, for creditgate_deduction_batch_wait_seconds. */
type Pending =
  | { item: BatchDeduction; op?: undefined; queuedAt: number; resolve: (outcome: BatchOutcome) => void; reject: (err: unknown) => void }
  | { op: BatchOp; item?: undefined; queuedAt: number; resolve: (value: unknown) => void; reject: (err: unknown) => void };

const deploymentOf = (p: Pending) => (p.item ? p.item.deploymentId : p.op.deploymentId);

type OpResult = { ok: true; value: unknown } | { ok: false; error: unknown };

/**
 * Every statement of a batch planned for its own arrays: a plan cached while `invocations` was small
 * keeps scanning the whole table once it has grown (docs/adr/0004-group-commit.md, "Plans").
 */
const PLANNED_FOR_ITS_ARRAYS = { customPlans: true } as const;
/**
 * A batch on remembered rows locks its balance rows and invocation ids in one statement, in no order
 * it can choose: rather than wait (or deadlock) behind another transaction, it gives up after this
 * long and the batch takes the locking path (docs/adr/0004-group-commit.md).
 */
const REMEMBERED_TRANSACTION = { customPlans: true, lockTimeoutMs: 100 } as const;

export class DeductionBatcher {
  private queue: Pending[] = [];
  private inFlight = 0;
  /**
   * The deployments of the batches in flight, each with its batch: a batch that starts while others
   * are in flight takes only requests of other deployments, so no two batches wait on one balance row
   * and each deployment's requests are applied in arrival order, one batch after the other.
   */
  private readonly busy = new Map<string, object>();
  private timer: NodeJS.Timeout | null = null;
  private idleWaiters: Array<() => void> = [];
  /**
   * Batches committed and requests in them, for the metrics and the benchmark; `optimistic`: batches
   * committed in one round trip on remembered balance rows; `stale`: optimistic attempts that found a
   * row changed (or a claim taken) and ran the locking path instead.
   */
  readonly stats = { batches: 0, requests: 0, fallbacks: 0, ops: 0, optimistic: 0, stale: 0 };
  /** The balance rows this instance's batches last committed, with their row versions (see RowMemory). */
  private readonly memory: RowMemory;

  private readonly db: Database;
  private readonly reportToMeter: boolean;

  constructor(
    /**
     * With `caches`, each answer writes through to the balance an advisory check reads (credits/balance-cache.ts);
     * with `metrics`, batch sizes and fallbacks are counted.
     */
    private readonly deps: Pick<Deps, 'db' | 'config'> & Partial<Pick<Deps, 'caches' | 'metrics'>>,
    private readonly settings: BatchSettings,
    private readonly onFallback: (err: unknown, size: number) => void = () => {},
  ) {
    this.db = deps.db;
    this.memory = new RowMemory(settings.rememberMs ?? 0);
    this.reportToMeter = deps.config.stripeMeterEventName !== undefined;
  }

  submit(item: BatchDeduction): Promise<BatchOutcome> {
    return new Promise<BatchOutcome>((resolve, reject) => {
      this.queue.push({ item, queuedAt: performance.now(), resolve, reject });
      this.schedule();
    });
  }

  /**
   * Run a money change that is not a deduction in the next batch's transaction (see BatchOp); resolves
   * with `apply`'s value once the batch committed, or rejects with its error (nothing of it written).
   * If the batch fails as a whole, the op runs in a transaction of its own. With `budgets`, `apply` is
   * handed the budget windows locked for it (engine/types.ts OpBudgets).
   */
  within<T>(deploymentId: string, apply: (tx: Queryable, windows: BudgetCounter[]) => Promise<T>, budgets?: OpBudgets): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ op: { deploymentId, apply, budgets }, queuedAt: performance.now(), resolve: resolve as (value: unknown) => void, reject });
      this.schedule();
    });
  }

  /** Resolves once every submitted request is answered (shutdown, tests). */
  async drain(): Promise<void> {
    if (this.queue.length === 0 && this.inFlight === 0) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.inFlight >= this.settings.maxInFlight || this.queue.length === 0) return;
    if (this.queue.length >= this.settings.maxBatch || this.settings.windowMs === 0 || this.inFlight > 0) {
      this.flush();
      return;
    }
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.flush();
    }, this.settings.windowMs);
  }

  private flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.inFlight < this.settings.maxInFlight && this.queue.length > 0) {
      const token = {};
      const batch = this.take(this.settings.maxBatch, token);
      // Every request waiting belongs to a deployment a batch in flight carries.
      if (batch.length === 0) break;
      this.inFlight++;
      const started = performance.now();
      let released = false;
      // The batch's place is given up once its transaction is over, before its requests are answered:
      // the next batch is on its way to the database while this one's answers are written out.
      const release = () => {
        if (released) return;
        released = true;
        this.deps.metrics?.deductionBatchDuration.observe((performance.now() - started) / 1000);
        for (const p of batch) if (this.busy.get(deploymentOf(p)) === token) this.busy.delete(deploymentOf(p));
        this.inFlight--;
        if (this.queue.length > 0) this.schedule();
      };
      void this.run(batch, token, release).finally(() => {
        release();
        if (this.inFlight === 0 && this.queue.length === 0) for (const wake of this.idleWaiters.splice(0)) wake();
      });
    }
  }

  /**
   * Up to `room` waiting requests for the batch `token`, in arrival order, skipping those of deployments
   * another batch in flight carries (they stay queued, in their order, for the batch after it).
   */
  private take(room: number, token: object): Pending[] {
    let taken: Pending[];
    if (this.busy.size === 0) taken = this.queue.splice(0, room);
    else {
      taken = [];
      const left: Pending[] = [];
      for (const p of this.queue) {
        const owner = this.busy.get(deploymentOf(p));
        if (taken.length < room && (owner === undefined || owner === token)) taken.push(p);
        else left.push(p);
      }
      this.queue = left;
    }
    for (const p of taken) this.busy.set(deploymentOf(p), token);
    return taken;
  }

  /**
   * Apply `batch` and answer its requests. `release` is called once its transaction committed (the
   * rows it wrote remembered), before the answers, so the next batch can start; a failed batch keeps
   * its place until its requests ran one by one.
   */
  private async run(batch: Pending[], token: object, release: () => void): Promise<void> {
    if (this.db.kind === 'pglite') {
      // PGlite runs each statement synchronously on this thread and answers through promises only:
      // a batch would run from BEGIN to COMMIT without letting one socket be read, so each batch would
      // hold only the requests that were already waiting. Give pending I/O one turn to join first.
      await new Promise<void>((resolve) => setImmediate(resolve));
      batch.push(...this.take(this.settings.maxBatch - batch.length, token));
    }
    const wait = this.deps.metrics?.deductionBatchWait;
    if (wait) {
      const now = performance.now();
      for (const p of batch) wait.observe((now - p.queuedAt) / 1000);
    }
    const deductions = batch.filter((p): p is Extract<Pending, { item: BatchDeduction }> => p.item !== undefined);
    const ops = batch.filter((p): p is Extract<Pending, { op: BatchOp }> => p.op !== undefined);
    const items = deductions.map((p) => p.item);
    // Once the batch's COMMIT is sent (with the writes, or after the ops), a lost connection leaves
    // it unknown whether the batch committed.
    let progress = { committing: false };
    let outcomes: BatchOutcome[] | undefined;
    let opResults: OpResult[] = [];
    let written: Written | undefined;
    try {
      const remembered = ops.length === 0 ? this.memory.plan(items) : undefined;
      if (remembered) {
        try {
          [outcomes, written] = await this.db.transaction(
            (tx) => applyBatch(tx, items, this.reportToMeter, [], { progress }, remembered),
            REMEMBERED_TRANSACTION,
          );
          this.stats.optimistic++;
          this.deps.metrics?.deductionBatchRemembered.inc({ outcome: 'committed' });
        } catch (err) {
          if (err instanceof ServiceUnavailableError || isConnectionError(err)) throw err;
          if (!(err instanceof NotOptimistic)) {
            // The database refused the one-round-trip batch (a row changed since it was remembered, an
            // id claimed meanwhile, a deadlock with another instance): nothing was written.
            this.stats.stale++;
            this.deps.metrics?.deductionBatchRemembered.inc({ outcome: 'stale' });
            this.memory.contended(items.map((it) => it.deploymentId), remembered.now);
          }
          progress = { committing: false };
        }
      }
      if (!outcomes) {
        const p = progress;
        [outcomes, written, opResults] = await this.db.transaction(async (tx) => {
          const [out, versions, windows] = await applyBatch(
            tx,
            items,
            this.reportToMeter,
            ops.map((o) => o.op),
            // The ops run after the writes, so their COMMIT cannot go with them.
            ops.length === 0 ? { progress: p } : undefined,
          );
          const done = await applyOps(tx, ops.map((o) => o.op), windows);
          p.committing = true;
          return [out, versions, done] as const;
        }, PLANNED_FOR_ITS_ARRAYS);
      }
    } catch (err) {
      // Whatever happened (one by one, or unknown), these rows are read again by the next batch.
      this.memory.forget(batch.map(deploymentOf));
      if (progress.committing && (err instanceof ServiceUnavailableError || isConnectionError(err))) {
        // Whether the batch committed is unknown, so nothing is retried here (a request with an
        // invocation id is safe for its client to retry; it replays if the batch did commit).
        for (const p of batch) p.reject(err);
        return;
      }
      // An error the database answered (the writes' or COMMIT's own) means nothing was committed.
      this.stats.fallbacks++;
      this.deps.metrics?.deductionBatchFallbacks.inc();
      this.onFallback(err, batch.length);
      await this.oneByOne(batch);
      return;
    }
    // Rows an op changed after the writes are not what the batch remembers of them.
    if (written) this.memory.remember(written, ops.map((o) => o.op.deploymentId));
    this.stats.batches++;
    this.stats.requests += batch.length;
    this.stats.ops += ops.length;
    this.deps.metrics?.deductionBatchSize.observe(batch.length);
    release();
    // When the release started the next batch, its statements are sent first: answering runs the
    // answered requests on to their responses in this turn's microtasks, and the next batch's connect
    // and send would queue behind all of them (about 2 ms for 48 records; docs/adr/0004-group-commit.md).
    // Not on PGlite, whose next batch waits a turn before it starts anyway.
    if (this.inFlight > 0 && this.db.kind !== 'pglite') await new Promise<void>((resolve) => setImmediate(resolve));
    for (const [i, p] of deductions.entries()) this.answer(p, outcomes[i]!);
    for (const [i, p] of ops.entries()) {
      const r = opResults[i]!;
      if (!r.ok) {
        p.reject(r.error);
        continue;
      }
      // The deductions' answers wrote through to the cached balance without the op's change.
      this.deps.caches?.balances.delete(p.op.deploymentId);
      p.resolve(r.value);
    }
  }

  private answer(p: Extract<Pending, { item: BatchDeduction }>, outcome: BatchOutcome): void {
    if (this.deps.caches && outcome.claimed) noteDeduction({ caches: this.deps.caches }, p.item.deploymentId, outcome.result);
    p.resolve(outcome);
  }

  /**
   * Each request of a failed batch as a batch of one, in a transaction of its own: a bad request fails
   * alone. The database unreachable (a failover, a server down) ends it: the requests not tried yet are
   * refused with the same error at once, nothing of theirs written (503 with Retry-After, to be retried
   * with their invocation ids), instead of each waiting for a connection attempt of its own while the
   * batch holds its place in flight (docs/operations.md, "PostgreSQL failover with Patroni"). One try
   * is still made: the batch may have failed on one dead pooled connection, and the next is fresh.
   */
  private async oneByOne(batch: Pending[]): Promise<void> {
    for (const [i, p] of batch.entries()) {
      try {
        if (p.op) p.resolve(await this.db.transaction((tx) => applyAlone(tx, p.op!, this.reportToMeter)));
        // A hold or a release goes back untouched to its verb (credits/invocations.ts), which settles
        // it as a batch of one with whatever its invocation row holds.
        else if (p.item.hold || p.item.release) this.answer(p, { claimed: false });
        else this.answer(p, await this.db.transaction((tx) => applyOne(tx, p.item, this.reportToMeter)));
      } catch (err) {
        p.reject(err);
        if (err instanceof ServiceUnavailableError || isConnectionError(err)) {
          for (const rest of batch.slice(i + 1)) rest.reject(err);
          return;
        }
      }
    }
  }
}

/**
 * The batch's ops, in arrival order, each under a savepoint: an op that throws is undone alone and
 * answered with its error. A lost connection fails the batch (it then runs one by one).
 */
async function applyOps(tx: Queryable, ops: BatchOp[], windows: BudgetCounter[][]): Promise<OpResult[]> {
  const results: OpResult[] = [];
  for (const [i, op] of ops.entries()) {
    await tx.query('SAVEPOINT credits_op');
    try {
      const value = await op.apply(tx, windows[i] ?? []);
      await tx.query('RELEASE SAVEPOINT credits_op');
      results.push({ ok: true, value });
    } catch (error) {
      if (error instanceof ServiceUnavailableError || isConnectionError(error)) throw error;
      await tx.query('ROLLBACK TO SAVEPOINT credits_op');
      results.push({ ok: false, error });
    }
  }
  return results;
}

/** An op in a transaction of its own: with budgets, its balance row and windows are locked first, in the batch's order. */
async function applyAlone(tx: Transaction, op: BatchOp, reportToMeter: boolean): Promise<unknown> {
  if (!op.budgets) return op.apply(tx, []);
  const [, , windows] = await applyBatch(tx, [], reportToMeter, [op]);
  return op.apply(tx, windows[0] ?? []);
}
