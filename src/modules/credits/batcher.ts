import { randomUUID } from 'node:crypto';
import type { Deps } from '../../context.js';
import { type ArrayElement, pgArray } from '../../db/arrays.js';
import { type Database, isConnectionError, type Queryable, type Statement, type Transaction } from '../../db/client.js';
import { ServiceUnavailableError } from '../../errors.js';
import { reachedThresholds, thresholdKey } from '../quotas/thresholds.js';
import { noteDeduction } from './balance-cache.js';
import { type DeductInput, type DeductResult, deductWithRetry } from './deduct.js';
import { SUBSCRIBED } from './meter-outbox.js';
import { IDEMPOTENCY_WINDOW_MS } from './invocations.js';
import { expireReservations } from './reservations.js';
import { NotOptimistic, type OptimisticPlan, RowMemory, type Written } from './row-memory.js';
import { type BalanceRow, syncBalance } from './service.js';

/**
 * Group commit for deductions (docs/adr/0004-group-commit.md). Requests that arrive while a
 * batch is in flight (or within `windowMs`) are applied together in ONE transaction: the balance rows
 * of the batch are locked once (in deployment order, so batches of several instances never deadlock),
 * each deployment's requests are applied in arrival order by the same rule as DEDUCT_SQL (monthly first,
 * then purchased, never past what other holders reserved), and the ledger rows, usage records,
 * invocation answers, meter events and threshold events are written by one set-based statement each.
 * A request is answered only after its batch committed. A batch whose statements fail is rolled back
 * and its requests run one by one through the single-request path, so one bad request fails alone.
 */

export interface BatchSettings {
  /** How long the first request of a batch waits for company when no batch is in flight (0: none). */
  windowMs: number;
  /** Requests per batch at most. */
  maxBatch: number;
  /** Batches (connections) in flight at once, per instance. */
  maxInFlight: number;
  /** How long a committed balance row is remembered for a one-round-trip batch (0: every batch reads and locks its rows). */
  rememberMs?: number;
}

/** A deduction for the batcher. With `claimInvocation` the request's invocation row is created in the batch. */
export interface BatchDeduction extends Omit<DeductInput, 'recordFailure' | 'recordInvocation'> {
  organizationId: string;
  /** A fresh idempotent record: claim (deployment, invocationId) and mark it recorded with the answer. */
  claimInvocation?: { requestHash: string };
  /**
   * A reservation (check with `reserve: true`, docs/metering.md) instead of a deduction: claim the invocation
   * as `reserved` until `expiresAt` and hold `cost` by the same rule and in the same arrival order as
   * the deductions; no ledger or usage row. A refused hold leaves no invocation row. `result.deducted`
   * says whether the credits are held.
   */
  hold?: { expiresAt: Date };
  /**
   * A release of this invocation's reservation (docs/metering.md, Reservations) instead of a deduction: its held credits go
   * back (`reserved` shrinks) in arrival order with the batch. `cost` is ignored; the outcome's `cost` is
   * what was given back, and `result.deducted` false means nothing was held.
   */
  release?: true;
}

/**
 * `claimed: false`: the invocation id exists already in a state the batch does not settle (a replay,
 * a reuse, an overdue reservation…), or the batch failed; the caller takes the full single-request path.
 * `cost`: what the request deducted or would have (a spent reservation's price was fixed when it was
 * held), or for a release what was given back.
 */
export type BatchOutcome = { claimed: false } | { claimed: true; result: DeductResult; cost: number };

/**
 * A money change that is not a deduction (an AI hold or settlement, a refund), run inside a batch's
 * transaction so it shares the batch's commit: its deployment's balance row is locked with the batch's
 * (in deployment order), then `apply` runs after the batch's writes under a savepoint, so an op that
 * fails (a refusal, a bad request) undoes only itself.
 */
export interface BatchOp {
  deploymentId: string;
  apply: (tx: Queryable) => Promise<unknown>;
}

/** `queuedAt`: performance.now() at arrival, for creditgate_deduction_batch_wait_seconds. */
type Pending =
  | { item: BatchDeduction; op?: undefined; queuedAt: number; resolve: (outcome: BatchOutcome) => void; reject: (err: unknown) => void }
  | { op: BatchOp; item?: undefined; queuedAt: number; resolve: (value: unknown) => void; reject: (err: unknown) => void };

const deploymentOf = (p: Pending) => (p.item ? p.item.deploymentId : p.op.deploymentId);

type OpResult = { ok: true; value: unknown } | { ok: false; error: unknown };

type Kind = 'deduct' | 'spend' | 'hold' | 'release';

interface Change {
  /**
   * deduct: a deduction (fresh invocation or none); spend: a record that spends its own reservation;
   * hold: a reservation held (deducted: true) or refused; release: a reservation given back.
   */
  kind: Kind;
  /** Credits deducted, held or given back. */
  cost: number;
  /** Of this deployment's `reserved`, what the change frees (a spend's own hold). */
  release: number;
  deploymentId: string;
  organizationId: string;
  index: number;
  deducted: boolean;
  usageId: string;
  monthlyTaken: number;
  purchasedTaken: number;
  after: Pick<BalanceRow, 'monthly_allocation' | 'monthly_used' | 'purchased_balance' | 'reserved'>;
  periodStart: Date;
}

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
   * If the batch fails as a whole, the op runs in a transaction of its own.
   */
  within<T>(deploymentId: string, apply: (tx: Queryable) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ op: { deploymentId, apply }, queuedAt: performance.now(), resolve: resolve as (value: unknown) => void, reject });
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
          const [out, versions] = await applyBatch(
            tx,
            items,
            this.reportToMeter,
            ops.map((o) => o.op.deploymentId),
            // The ops run after the writes, so their COMMIT cannot go with them.
            ops.length === 0 ? { progress: p } : undefined,
          );
          const done = await applyOps(tx, ops.map((o) => o.op));
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

  /** The single-request path for each request of a failed batch: a bad request fails alone. */
  private async oneByOne(batch: Pending[]): Promise<void> {
    for (const p of batch) {
      try {
        if (p.op) p.resolve(await this.db.transaction(p.op.apply));
        else this.answer(p, await deductOne(this.deps, p.item));
      } catch (err) {
        p.reject(err);
      }
    }
  }
}

/**
 * The batch's ops, in arrival order, each under a savepoint: an op that throws is undone alone and
 * answered with its error. A lost connection fails the batch (it then runs one by one).
 */
async function applyOps(tx: Queryable, ops: BatchOp[]): Promise<OpResult[]> {
  const results: OpResult[] = [];
  for (const op of ops) {
    await tx.query('SAVEPOINT credits_op');
    try {
      const value = await op.apply(tx);
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

/** One request on its own: its own transaction when it claims an invocation. */
async function deductOne(deps: Pick<Deps, 'db' | 'config'>, item: BatchDeduction): Promise<BatchOutcome> {
  // A hold's single-request path is the caller's (credits/invocations.ts reserveInvocation), which
  // also handles every existing-id case.
  if (item.hold || item.release) return { claimed: false };
  const db = deps.db;
  const input = { ...item, recordInvocation: item.claimInvocation };
  if (!item.claimInvocation || item.invocationId === null) {
    return { claimed: true, result: await deductWithRetry(deps, db, input, true), cost: item.cost };
  }
  return db.transaction(async (tx) => {
    const claimed = await tx.query(
      `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6)
       ON CONFLICT (deployment_id, invocation_id) DO NOTHING RETURNING invocation_id`,
      [item.deploymentId, item.invocationId, item.organizationId, item.toolName, item.claimInvocation!.requestHash, item.now],
    );
    if (claimed.length === 0) return { claimed: false } as const;
    const result = await deductWithRetry(deps, tx, input, true);
    if (!result.deducted) {
      await tx.query(`UPDATE invocations SET status = 'denied', updated_at = $3 WHERE deployment_id = $1 AND invocation_id = $2`, [
        item.deploymentId,
        item.invocationId,
        item.now,
      ]);
    }
    return { claimed: true, result, cost: item.cost } as const;
  });
}

const latest = (a: Date, b: Date) => (a.getTime() >= b.getTime() ? a : b);
const keyOf = (deploymentId: string, invocationId: string) => `${deploymentId}\u0000${invocationId}`;

/** An existing invocation row the batch settles: a reservation being spent by its record, or released. */
interface HeldRow {
  deployment_id: string;
  invocation_id: string;
  tool_name: string;
  reserved_amount: number;
  reservation_expires_at: Date;
  created_at: Date;
}

/**
 * Apply a batch inside the caller's transaction. Returns one outcome per item, in order. Throws only on
 * a database error (the batch is then rolled back and retried one by one).
 */
export async function applyBatch(
  tx: Transaction,
  items: BatchDeduction[],
  reportToMeter: boolean,
  /** Balance rows the batch's ops change: locked with the others, in deployment order. */
  alsoLock: string[] = [],
  /**
   * Send the batch's writes with COMMIT in one round trip (`Transaction.queryAndCommit`): only when
   * nothing else runs in the transaction after them. `progress.committing` turns true as they go.
   */
  commit?: { progress: { committing: boolean } },
  /**
   * The batch's balance rows as this instance last committed them (RowMemory.plan): nothing is read or
   * locked first; the writes go in one round trip and fail as a whole, with nothing written, if any
   * row changed since or any invocation id is taken (the caller then runs the locking path).
   */
  remembered?: OptimisticPlan,
): Promise<[BatchOutcome[], Written]> {
  const outcomes: Array<BatchOutcome | undefined> = new Array(items.length);
  const batchNow = items.map((it) => it.now).reduce(latest, new Date(0));
  const nothingWritten: Written = { versions: [], now: batchNow };
  /** Per item: what it deducts, holds or gives back, and what of `reserved` it frees. */
  const terms = items.map((it) => ({ kind: (it.hold ? 'hold' : it.release ? 'release' : 'deduct') as Kind, cost: it.cost, release: it.releaseReserved }));

  // Steps 1, 1b and 2 go in one round trip (Transaction.pipeline, with the transaction's BEGIN): none
  // of them needs another's answer to be sent, and PostgreSQL runs them in this order, so the lock
  // order (invocation rows, then balance rows in deployment order) is kept.
  const claims = items.map((it, index) => ({ it, index })).filter(({ it }) => (it.claimInvocation || it.hold) && it.invocationId !== null);
  // Every key a record or a release could settle; what is not held comes back empty.
  const settleable = items.filter((it) => (it.claimInvocation || it.release) && it.invocationId !== null);
  // Every deployment the batch may touch; a row locked and then not needed costs nothing.
  const lockIds = [...new Set([...items.map((it) => it.deploymentId), ...alsoLock])].sort();
  // Ops of one deployment alone lock their row themselves, as on their own: no order to keep.
  const lockBalances = !(lockIds.length === 0 || (items.length === 0 && lockIds.length === 1));
  const statements: Statement[] = [];
  // 1. Claim fresh invocation ids in one statement; the first of duplicates wins, the others take the full path.
  //    Records are claimed `pending` (step 4 marks them), holds `reserved` (a refused hold's row is deleted in step 4).
  if (claims.length > 0) {
    statements.push({
      text: `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, reserved_amount,
                                reservation_expires_at, created_at, updated_at)
       SELECT d, i, o, t, h, CASE WHEN x IS NULL THEN 'pending' ELSE 'reserved' END, CASE WHEN x IS NULL THEN 0 ELSE c END, x, a, a
       FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::timestamptz[], $7::bigint[], $8::timestamptz[])
         AS u(d, i, o, t, h, a, c, x)
       ON CONFLICT (deployment_id, invocation_id) DO NOTHING
       RETURNING deployment_id, invocation_id`,
      params: [
        claims.map(({ it }) => it.deploymentId),
        claims.map(({ it }) => it.invocationId),
        claims.map(({ it }) => it.organizationId),
        claims.map(({ it }) => it.toolName),
        claims.map(({ it }) => it.claimInvocation?.requestHash ?? null),
        claims.map(({ it }) => it.now),
        claims.map(({ it }) => it.cost),
        claims.map(({ it }) => it.hold?.expiresAt ?? null),
      ].map(pgArray),
      name: 'credits_batch_claim',
    });
  }
  // 1b. Reservations this batch may settle: the record of a held call spends its hold (the price was
  //     fixed when it was held), a release gives it back. Their rows are locked in key order (as every
  //     batch does, so batches never deadlock on them) before any balance row, as the single path locks
  //     them. Rows this batch just claimed are its own and are told apart below.
  if (settleable.length > 0) {
    statements.push({
      text: `SELECT i.deployment_id, i.invocation_id, i.tool_name, i.reserved_amount, i.reservation_expires_at, i.created_at
       FROM invocations i JOIN unnest($1::uuid[], $2::text[]) AS k(d, inv) ON i.deployment_id = k.d AND i.invocation_id = k.inv
       WHERE i.status = 'reserved'
       ORDER BY i.deployment_id, i.invocation_id
       FOR UPDATE OF i`,
      params: [pgArray(settleable.map((it) => it.deploymentId)), pgArray(settleable.map((it) => it.invocationId))],
      name: 'credits_batch_lock_held',
    });
  }
  // 2. Lock the balance rows once, in deployment order.
  if (lockBalances) {
    statements.push({
      // BalanceRow's columns, not updated_at: one timestamp fewer to parse per row.
      text: `SELECT deployment_id, organization_id, period_start, period_end, sync_before, monthly_allocation, monthly_used,
                    purchased_balance, reserved, ai_tokens_used, ai_tokens_over_limit, ai_tokens_reserved, ai_credits_reserved, purchased_consumed,
                    credits_owed
             FROM credit_balances WHERE deployment_id = ANY($1::uuid[]) ORDER BY deployment_id FOR UPDATE`,
      params: [pgArray(lockIds)],
      name: 'credits_batch_lock',
    });
  }
  // Nothing to send (ops of one deployment alone): BEGIN then goes with the first op's statement.
  // Remembered rows: the claims are made by the writes themselves, and no existing row is settled.
  const answers = remembered
    ? [
        ...(claims.length > 0 ? [claims.map(({ it }) => ({ deployment_id: it.deploymentId, invocation_id: it.invocationId }))] : []),
        ...(settleable.length > 0 ? [[]] : []),
        ...(lockBalances ? [[...remembered.rows.values()].map((r) => r.row)] : []),
      ]
    : statements.length > 0
      ? await tx.pipeline(statements)
      : [];
  const won = (claims.length > 0 ? answers.shift() : []) as Array<{ deployment_id: string; invocation_id: string }>;
  const held = (settleable.length > 0 ? answers.shift() : []) as unknown as HeldRow[];
  const locked = (lockBalances ? answers.shift() : []) as unknown as BalanceRow[];

  const claimedHere = new Set<string>();
  const losers: number[] = [];
  if (claims.length > 0) {
    const free = new Set(won.map((r) => keyOf(r.deployment_id, r.invocation_id)));
    for (const key of free) claimedHere.add(key);
    for (const { it, index } of claims) {
      const key = keyOf(it.deploymentId, it.invocationId!);
      if (free.has(key)) free.delete(key);
      else if (it.claimInvocation && !claimedHere.has(key)) losers.push(index);
      else outcomes[index] = { claimed: false };
    }
  }

  // Only a reservation still inside its hold is spent here (an overdue one may be expired by a sweep
  // of this very batch); every other existing id (a replay, a reuse, another tool) takes the full
  // path after the batch.
  const settling = [
    ...losers,
    ...items.map((it, index) => ({ it, index })).filter(({ it }) => it.release && it.invocationId !== null).map(({ index }) => index),
  ].sort((a, b) => a - b);
  if (settling.length > 0) {
    const rowsByKey = new Map(held.map((r) => [keyOf(r.deployment_id, r.invocation_id), r]));
    const idempotencyFloor = batchNow.getTime() - IDEMPOTENCY_WINDOW_MS;
    for (const index of settling) {
      const it = items[index]!;
      const key = keyOf(it.deploymentId, it.invocationId!);
      const row = claimedHere.has(key) ? undefined : rowsByKey.get(key);
      // The first request of a key that settles its row takes it; the others see what it left, after
      // the batch. One that declines it (a record of another tool, an overdue hold) leaves it to the
      // next: a release beside a record of another tool still gives the hold back, as in either serial
      // order (the money model of credits/engine.model.test.ts found it answering "nothing held").
      if (it.release) {
        // An overdue hold is left to the single path: this batch's own sweep of overdue holds (step 3)
        // could expire it under the release and give its credits back twice.
        const overdue = row !== undefined && row.reservation_expires_at.getTime() <= batchNow.getTime();
        if (claimedHere.has(key) || overdue) outcomes[index] = { claimed: false };
        else if (row) {
          terms[index] = { kind: 'release', cost: row.reserved_amount, release: 0 };
          rowsByKey.delete(key);
        } else outcomes[index] = { claimed: true, result: { ...NOTHING_HELD }, cost: 0 };
        continue;
      }
      const spendable =
        row !== undefined &&
        row.tool_name === it.toolName &&
        row.created_at.getTime() > idempotencyFloor &&
        row.reservation_expires_at.getTime() > batchNow.getTime();
      if (spendable) {
        terms[index] = { kind: 'spend', cost: row.reserved_amount, release: row.reserved_amount };
        rowsByKey.delete(key);
      } else outcomes[index] = { claimed: false };
    }
  }

  // Bring stale balance rows up to date.
  const byDeployment = new Map<string, number[]>();
  for (const [index, it] of items.entries()) {
    if (outcomes[index]) continue;
    const list = byDeployment.get(it.deploymentId) ?? [];
    list.push(index);
    byDeployment.set(it.deploymentId, list);
  }
  const deployments = [...byDeployment.keys()].sort();
  if (deployments.length === 0) return [outcomes as BatchOutcome[], nothingWritten];
  const rows = new Map<string, BalanceRow>();
  for (const row of locked) rows.set(row.deployment_id, row);
  for (const id of deployments) {
    const indexes = byDeployment.get(id)!;
    const now = indexes.map((i) => items[i]!.now).reduce(latest);
    const row = rows.get(id);
    if (!row) throw new Error(`no balance row for deployment ${id}`);
    if (row.sync_before.getTime() <= now.getTime()) {
      if (remembered) throw new NotOptimistic();
      rows.set(id, await syncBalance(tx, id, now, items[indexes[0]!]!.actor));
    }
  }

  // 3. Each deployment's requests in arrival order, by DEDUCT_SQL's rule; a refusal while other
  //    reservations hold credits first releases the overdue ones (deductWithRetry's slow path).
  const changes: Change[] = [];
  for (const id of deployments) {
    const indexes = byDeployment.get(id)!;
    let applied = applyDeployment(rows.get(id)!, indexes, terms);
    const refusedWhileHeld = applied.changes.some((c) => !c.deducted) && rows.get(id)!.reserved > 0;
    if (refusedWhileHeld && remembered) throw new NotOptimistic();
    if (refusedWhileHeld) {
      const now = indexes.map((i) => items[i]!.now).reduce(latest);
      if ((await expireReservations(tx, now, id)) > 0) {
        const fresh = await tx.query<BalanceRow>('SELECT * FROM credit_balances WHERE deployment_id = $1', [id]);
        rows.set(id, fresh[0]!);
        applied = applyDeployment(fresh[0]!, indexes, terms);
      }
    }
    changes.push(...applied.changes);
    rows.set(id, applied.row);
  }

  const versions = await writeBatch(tx, items, changes, rows, reportToMeter, commit, remembered);
  for (const c of changes) {
    outcomes[c.index] = {
      claimed: true,
      result: { found: true, deducted: c.deducted, usageId: c.kind === 'deduct' || c.kind === 'spend' ? c.usageId : null, ...c.after },
      cost: c.cost,
    };
  }
  return [outcomes as BatchOutcome[], { versions: versions.map((v) => ({ ...v, row: rows.get(v.id)! })), now: batchNow }];
}

/** A release of an id that holds nothing: no balance row was read. */
const NOTHING_HELD: DeductResult = {
  found: false,
  deducted: false,
  usageId: null,
  monthly_allocation: null,
  monthly_used: 0,
  purchased_balance: 0,
  reserved: 0,
};

/** DEDUCT_SQL's arithmetic for one deployment's requests, in order, on a copy of its locked row. */
function applyDeployment(
  start: BalanceRow,
  indexes: number[],
  terms: Array<{ kind: Kind; cost: number; release: number }>,
): { row: BalanceRow; changes: Change[] } {
  const row = { ...start };
  const changes: Change[] = [];
  for (const index of indexes) {
    const { kind, cost, release } = terms[index]!;
    const allocation = row.monthly_allocation;
    const monthlyLeft = allocation === null ? null : Math.max(0, allocation - row.monthly_used);
    const spendable = monthlyLeft === null ? Number.POSITIVE_INFINITY : monthlyLeft + row.purchased_balance - (row.reserved - release);
    let deducted = spendable >= cost;
    let monthlyTaken = 0;
    let purchasedTaken = 0;
    if (kind === 'release') {
      // Always possible: the row was locked as held, so `reserved` counts it.
      deducted = true;
      row.reserved -= cost;
    } else if (kind === 'hold') {
      // reservations.ts holdCredits' rule: held only while what is spendable covers it.
      if (deducted) row.reserved += cost;
    } else if (deducted) {
      monthlyTaken = monthlyLeft === null ? cost : Math.min(cost, monthlyLeft);
      purchasedTaken = cost - monthlyTaken;
      row.monthly_used += monthlyTaken;
      row.purchased_balance -= purchasedTaken;
      row.purchased_consumed += purchasedTaken;
      row.reserved -= release;
    }
    changes.push({
      kind,
      cost,
      release,
      deploymentId: row.deployment_id,
      organizationId: row.organization_id,
      index,
      deducted,
      usageId: randomUUID(),
      monthlyTaken,
      purchasedTaken,
      after: {
        monthly_allocation: row.monthly_allocation,
        monthly_used: row.monthly_used,
        purchased_balance: row.purchased_balance,
        reserved: row.reserved,
      },
      periodStart: row.period_start,
    });
  }
  return { row, changes };
}

/**
 * The answer a recorded invocation replays (docs/metering.md, Idempotency; the single path's `RecordResult` of a deduction),
 * built in the statement from the columns it already has: `q` the credits used, `rem` the credits
 * remaining (NULL when the allocation is unlimited), `u` the usage record, `inv` the invocation id.
 * Sending it as JSON text instead cost the server a stringify and an escaped array element per record,
 * and a batch of 48 about 8 KB more to send (docs/benchmarks.md).
 */
const RECORDED_ANSWER = `jsonb_build_object('success', true, 'credits_used', x.q, 'credits_remaining', x.rem, 'error', NULL,
                           'usage_id', x.u, 'invocation_id', x.inv)`;

/**
 * The parts of a batch's write statement that only some batches need; a part with nothing to write is
 * left out of the statement. PostgreSQL plans the statement for every batch (its arrays' lengths), and
 * each part costs planning and executor start-up (its tables and indexes opened and locked) even when
 * its arrays are empty: for a batch of records only, the four parts below were half of its planning
 * time (docs/benchmarks.md, "A write statement of the parts a batch needs").
 */
export interface WriteShape {
  /** One round trip on remembered rows (RowMemory): claims by the insert, row versions checked. */
  remembered: boolean;
  /** Remembered rows the batch does not write (every request of theirs refused): checked, not written. */
  unchanged: boolean;
  /** Reservations refused: their invocation rows deleted. */
  refused: boolean;
  /** Reservations released. */
  released: boolean;
  /** Meter events for Stripe (docs/billing.md, Usage to Stripe meters). */
  metered: boolean;
  /** `quota.threshold` events. */
  alerts: boolean;
}

/**
 * The batch's writes in ONE statement (one round trip while the balance rows are locked): the balance
 * rows, refused holds, releases, ledger rows, usage records (joined to their ledger rows), invocation
 * answers, meter events and `quota.threshold` events, each a data-modifying CTE over arrays. The CTEs
 * touch disjoint rows (a batch settles each invocation key once), so their order does not matter.
 * Threshold events are fanned out to webhooks by the dispatcher, as those of DEDUCT_SQL are.
 * Parameters are named (`$change_usage`) and numbered by `numberParams`, as parts come and go.
 */
function writeBatchSql(shape: WriteShape): string {
  const ctes = [
    `bal AS (
  UPDATE credit_balances b
  SET monthly_used = u.used, purchased_balance = u.purchased, purchased_consumed = u.consumed, reserved = u.reserved, updated_at = u.at
  FROM unnest($bal_id::uuid[], $bal_used::bigint[], $bal_purchased::bigint[], $bal_consumed::bigint[], $bal_reserved::bigint[],
              $bal_at::timestamptz[]${shape.remembered ? ', $bal_version::xid[]' : ''})
    AS u(id, used, purchased, consumed, reserved, at${shape.remembered ? ', version' : ''})
  WHERE b.deployment_id = u.id${
    shape.remembered
      ? `
    -- Only the row version the batch computed from (RowMemory): any other writer since gives a new one.
    AND b.xmin = u.version`
      : ''
  }
  RETURNING b.deployment_id AS id, b.xmin::text AS version
)`,
  ];
  if (shape.unchanged) {
    ctes.push(`unchanged AS (
  -- The batch's other rows (every request refused): their refusals were computed from the remembered
  -- version too, so it must still be the one this statement sees.
  SELECT 1 FROM credit_balances b JOIN unnest($unchanged_id::uuid[], $unchanged_version::xid[]) AS c(id, version) ON b.deployment_id = c.id
  WHERE b.xmin = c.version
)`);
  }
  if (shape.refused) {
    ctes.push(`refused AS (
  -- As the single path's rollback: a refused reservation leaves no invocation behind.
  DELETE FROM invocations i USING unnest($refused_deployment::uuid[], $refused_invocation::text[]) AS x(d, inv)
  WHERE i.deployment_id = x.d AND i.invocation_id = x.inv AND i.status = 'reserved'
  RETURNING 1
)`);
  }
  if (shape.released) {
    ctes.push(`released AS (
  -- Locked as held in step 1b.
  UPDATE invocations i SET status = 'released', updated_at = x.t
  FROM unnest($released_deployment::uuid[], $released_invocation::text[], $released_at::timestamptz[]) AS x(d, inv, t)
  WHERE i.deployment_id = x.d AND i.invocation_id = x.inv AND i.status = 'reserved'
  RETURNING 1
)`);
  }
  ctes.push(
    `led AS (
  -- The deductions among the changes: monthly_after is NULL exactly when the allocation is (unlimited).
  INSERT INTO credit_ledger (organization_id, deployment_id, kind, amount, monthly_delta, purchased_delta,
                             monthly_after, purchased_after, actor, usage_id, created_at)
  SELECT o, d, 'deduct', -q, CASE WHEN ma IS NULL THEN 0 ELSE -mt END, -pt, ma, pa, a, id, t
  FROM unnest($change_usage::uuid[], $change_organization::uuid[], $change_deployment::uuid[], $change_credits::bigint[],
              $change_deducted::boolean[], $change_monthly::bigint[], $change_purchased::bigint[], $change_at::timestamptz[],
              $ledger_monthly_after::bigint[], $ledger_purchased_after::bigint[], $ledger_actor::text[])
    AS x(id, o, d, q, s, mt, pt, t, ma, pa, a)
  WHERE s
  RETURNING id, usage_id
)`,
    `used AS (
  -- Every deduction, and every final refusal (docs/metering.md, Denials: a record either way).
  INSERT INTO usage_records (id, organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, metadata,
                             success, error, ledger_id, invocation_id, monthly_taken, purchased_taken, period_start, "timestamp")
  SELECT x.id, o, d, m, q, tn, mu, md::jsonb, s, e, led.id, i, mt, pt, ps, t
  FROM unnest($change_usage::uuid[], $change_organization::uuid[], $change_deployment::uuid[], $change_credits::bigint[],
              $change_deducted::boolean[], $change_monthly::bigint[], $change_purchased::bigint[], $change_at::timestamptz[],
              $usage_metric::text[], $usage_tool::text[], $usage_mcp_user::text[], $usage_metadata::text[], $usage_error::text[],
              $usage_invocation::text[], $usage_period_start::timestamptz[])
    AS x(id, o, d, q, s, mt, pt, t, m, tn, mu, md, e, i, ps)
  LEFT JOIN led ON led.usage_id = x.id
  RETURNING 1
)`,
    shape.remembered
      ? `answered AS (
  -- Fresh invocations claimed and answered at once (recorded with their answer, or denied): an id
  -- taken meanwhile is not inserted, and the check below then refuses the whole statement.
  INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, usage_id, response, created_at, updated_at)
  SELECT x.d, x.inv, x.o, x.tn, x.h, CASE WHEN x.ok THEN 'recorded' ELSE 'denied' END, CASE WHEN x.ok THEN x.u ELSE NULL END,
         CASE WHEN x.ok THEN ${RECORDED_ANSWER} ELSE NULL END, x.t, x.t
  FROM unnest($change_usage::uuid[], $change_organization::uuid[], $change_deployment::uuid[], $change_deducted::boolean[],
              $change_at::timestamptz[], $usage_tool::text[], $usage_invocation::text[], $answer_hash::text[], $change_credits::bigint[],
              $answer_remaining::bigint[])
    AS x(u, o, d, ok, t, tn, inv, h, q, rem)
  WHERE x.h IS NOT NULL
  ON CONFLICT (deployment_id, invocation_id) DO NOTHING
  RETURNING 1
)`
      : `answered AS (
  -- Claimed invocations (those with a request hash) recorded with their answer, or denied; a spent reservation recorded.
  UPDATE invocations i
  SET status = CASE WHEN x.ok THEN 'recorded' ELSE 'denied' END,
      usage_id = CASE WHEN x.ok THEN x.u ELSE NULL END,
      request_hash = x.h, reserved_amount = 0, reservation_expires_at = NULL, updated_at = x.t,
      response = CASE WHEN x.ok THEN ${RECORDED_ANSWER} ELSE NULL END
  FROM unnest($change_usage::uuid[], $change_deployment::uuid[], $change_deducted::boolean[], $change_at::timestamptz[],
              $usage_invocation::text[], $answer_hash::text[], $change_credits::bigint[], $answer_remaining::bigint[])
    AS x(u, d, ok, t, inv, h, q, rem)
  WHERE x.h IS NOT NULL AND i.deployment_id = x.d AND i.invocation_id = x.inv
  RETURNING 1
)`,
  );
  if (shape.metered) {
    ctes.push(`met AS (
  -- Meter events of subscribed organizations (docs/billing.md), as DEDUCT_SQL's met step.
  INSERT INTO meter_event_outbox (identifier, organization_id, deployment_id, stripe_customer_id, value, event_at, next_attempt_at)
  SELECT x.u, x.o, x.d, o.stripe_customer_id, x.v, x.t, x.t
  FROM unnest($meter_usage::uuid[], $meter_organization::uuid[], $meter_deployment::uuid[], $meter_value::bigint[], $meter_at::timestamptz[])
    AS x(u, o, d, v, t)
  JOIN organizations o ON o.id = x.o
  WHERE ${SUBSCRIBED}
  ON CONFLICT (identifier) DO NOTHING
  RETURNING 1
)`);
  }
  if (shape.alerts) {
    ctes.push(`alert AS (
  -- quota.threshold, once per threshold per period by its dedupe key (quotas/thresholds.ts).
  INSERT INTO outbox_events (organization_id, deployment_id, type, data, dedupe_key, created_at)
  SELECT o, d, 'quota.threshold', data::jsonb, k, t
  FROM unnest($alert_organization::uuid[], $alert_deployment::uuid[], $alert_data::text[], $alert_key::text[], $alert_at::timestamptz[])
    AS x(o, d, data, k, t)
  ON CONFLICT (dedupe_key) DO NOTHING
  RETURNING 1
)`);
  }
  const fresh = shape.remembered
    ? `,
       -- Every remembered row still the one computed from, and every id claimed here; else nothing
       -- of the statement stays (a division by zero, SQLSTATE 22012, refuses it as a whole).
       1 / ((SELECT count(*) FROM bal) = cardinality($bal_id::uuid[])${
         shape.unchanged ? `\n            AND (SELECT count(*) FROM unchanged) = cardinality($unchanged_id::uuid[])` : ''
       }
            AND (SELECT count(*) FROM answered) = cardinality(array_remove($answer_hash::text[], NULL)))::int AS fresh`
    : '';
  return `WITH ${ctes.join(', ')}
SELECT (SELECT count(*) FROM used)::int AS usage,
       (SELECT coalesce(json_agg(json_build_object('id', id, 'version', version)), '[]') FROM bal) AS versions${fresh}`;
}

/** A statement with named parameters (`$bal_id`), numbered in order of first appearance. */
interface NumberedStatement {
  text: string;
  /** The parameter names, in their numbers' order ($1 first). */
  names: string[];
  /** The prepared statement's name: one per shape, on each connection. */
  name: string;
}

function numberParams(text: string, name: string): NumberedStatement {
  const names: string[] = [];
  const numbered = text.replace(/\$([a-z][a-z_]*)/g, (_, param: string) => {
    let at = names.indexOf(param);
    if (at < 0) at = names.push(param) - 1;
    return `$${at + 1}`;
  });
  return { text: numbered, names, name };
}

/** Each shape's statement, built once. */
const WRITE_STATEMENTS = new Map<string, NumberedStatement>();

export function writeStatement(shape: WriteShape): NumberedStatement {
  // R remembered, U unchanged, F refused, L released, M metered, A alerts.
  const key = `${shape.remembered ? 'R' : ''}${shape.unchanged ? 'U' : ''}${shape.refused ? 'F' : ''}${shape.released ? 'L' : ''}${
    shape.metered ? 'M' : ''
  }${shape.alerts ? 'A' : ''}`;
  let statement = WRITE_STATEMENTS.get(key);
  if (!statement) {
    statement = numberParams(writeBatchSql(shape), key === '' ? 'credits_batch_write' : `credits_batch_write_${key}`);
    WRITE_STATEMENTS.set(key, statement);
  }
  return statement;
}

/** What a batch writes, as writeBatch sorted it: WRITE_COLUMNS makes the statement's arrays of it. */
interface BatchWrite {
  items: BatchDeduction[];
  rows: Map<string, BalanceRow>;
  remembered: OptimisticPlan | undefined;
  /** Deployments whose balance row the batch writes. */
  touched: string[];
  /** Remembered rows it does not write. */
  untouched: string[];
  refusedHolds: Change[];
  releases: Change[];
  /** Deductions and spent reservations, deducted or refused: each a usage record. */
  changes: Change[];
  metered: Change[];
  alerts: ThresholdEvent[];
  /** Per deployment, the time of its last change in the batch. */
  lastChange: Map<string, Date>;
}

/** A claimed invocation's answer is stored; a spent reservation refused (an adjustment took its credits meanwhile) stays held, as on the single path. */
const claimsInvocation = (w: BatchWrite, c: Change) => w.items[c.index]!.claimInvocation !== undefined && (c.kind === 'deduct' || c.deducted);

/** Every array a write statement can name (`$bal_id`), made from what the batch writes. */
const WRITE_COLUMNS = {
    bal_id: (w: BatchWrite) => w.touched,
    bal_used: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.monthly_used),
    bal_purchased: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.purchased_balance),
    bal_consumed: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.purchased_consumed),
    bal_reserved: (w: BatchWrite) => w.touched.map((id) => w.rows.get(id)!.reserved),
    bal_at: (w: BatchWrite) => w.touched.map((id) => w.lastChange.get(id)!),
    bal_version: (w: BatchWrite) => w.touched.map((id) => w.remembered!.rows.get(id)!.version),
    unchanged_id: (w: BatchWrite) => w.untouched,
    unchanged_version: (w: BatchWrite) => w.untouched.map((id) => w.remembered!.rows.get(id)!.version),
    refused_deployment: (w: BatchWrite) => w.refusedHolds.map((c) => c.deploymentId),
    refused_invocation: (w: BatchWrite) => w.refusedHolds.map((c) => w.items[c.index]!.invocationId),
    released_deployment: (w: BatchWrite) => w.releases.map((c) => c.deploymentId),
    released_invocation: (w: BatchWrite) => w.releases.map((c) => w.items[c.index]!.invocationId),
    released_at: (w: BatchWrite) => w.releases.map((c) => w.items[c.index]!.now),
    // Every change, read by the ledger, usage and answer inserts alike.
    change_usage: (w: BatchWrite) => w.changes.map((c) => c.usageId),
    change_organization: (w: BatchWrite) => w.changes.map((c) => c.organizationId),
    change_deployment: (w: BatchWrite) => w.changes.map((c) => c.deploymentId),
    change_credits: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? c.cost : 0)),
    change_deducted: (w: BatchWrite) => w.changes.map((c) => c.deducted),
    change_monthly: (w: BatchWrite) => w.changes.map((c) => c.monthlyTaken),
    change_purchased: (w: BatchWrite) => w.changes.map((c) => c.purchasedTaken),
    change_at: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.now),
    // The usage record's own.
    usage_metric: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.action),
    usage_tool: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.toolName),
    usage_mcp_user: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.mcpUserId),
    usage_metadata: (w: BatchWrite) =>
      w.changes.map((c) => {
        const m = w.items[c.index]!.metadata;
        return m === undefined || m === null ? null : JSON.stringify(m);
      }),
    usage_error: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? null : 'insufficient_credits')),
    usage_invocation: (w: BatchWrite) => w.changes.map((c) => w.items[c.index]!.invocationId),
    usage_period_start: (w: BatchWrite) => w.changes.map((c) => c.periodStart),
    // The claimed ones' request hash (which marks them), and the credits_remaining of the answer stored
    // for a replay (RECORDED_ANSWER builds the rest from the columns above).
    answer_hash: (w: BatchWrite) => w.changes.map((c) => (claimsInvocation(w, c) ? w.items[c.index]!.claimInvocation!.requestHash : null)),
    answer_remaining: (w: BatchWrite) => w.changes.map((c) => (claimsInvocation(w, c) && c.deducted ? remaining(c.after) : null)),
    // The ledger row's own, for deductions.
    ledger_monthly_after: (w: BatchWrite) =>
      w.changes.map((c) => (!c.deducted || c.after.monthly_allocation === null ? null : Math.max(0, c.after.monthly_allocation - c.after.monthly_used))),
    ledger_purchased_after: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? c.after.purchased_balance : null)),
    ledger_actor: (w: BatchWrite) => w.changes.map((c) => (c.deducted ? w.items[c.index]!.actor : null)),
    meter_usage: (w: BatchWrite) => w.metered.map((c) => c.usageId),
    meter_organization: (w: BatchWrite) => w.metered.map((c) => c.organizationId),
    meter_deployment: (w: BatchWrite) => w.metered.map((c) => c.deploymentId),
    meter_value: (w: BatchWrite) => w.metered.map((c) => c.cost),
    meter_at: (w: BatchWrite) => w.metered.map((c) => w.items[c.index]!.now),
    alert_organization: (w: BatchWrite) => w.alerts.map((a) => a.organizationId),
    alert_deployment: (w: BatchWrite) => w.alerts.map((a) => a.deploymentId),
    alert_data: (w: BatchWrite) => w.alerts.map((a) => JSON.stringify(a.data)),
    alert_key: (w: BatchWrite) => w.alerts.map((a) => a.dedupeKey),
    alert_at: (w: BatchWrite) => w.alerts.map((a) => a.at),
} satisfies Record<string, (w: BatchWrite) => ArrayElement[]>;
type WriteColumn = keyof typeof WRITE_COLUMNS;
/** The arrays a write statement may name (tests hold every statement to them). */
export const WRITE_COLUMN_NAMES: readonly string[] = Object.keys(WRITE_COLUMNS);

/** The batch's writes: one statement (writeBatchSql), of the parts the batch needs. */
async function writeBatch(
  tx: Transaction,
  items: BatchDeduction[],
  all: Change[],
  rows: Map<string, BalanceRow>,
  reportToMeter: boolean,
  commit: { progress: { committing: boolean } } | undefined,
  remembered: OptimisticPlan | undefined,
): Promise<Array<{ id: string; version: string }>> {
  const touched = [...new Set(all.filter((c) => c.deducted).map((c) => c.deploymentId))];
  const refusedHolds = all.filter((c) => c.kind === 'hold' && !c.deducted);
  const releases = all.filter((c) => c.kind === 'release');
  const changes = all.filter((c) => c.kind === 'deduct' || c.kind === 'spend');
  if (touched.length === 0 && refusedHolds.length === 0 && changes.length === 0) return [];
  const done = changes.filter((c) => c.deducted);
  // Remembered rows the batch does not write (every request refused) are checked, not written.
  const untouched = remembered ? [...remembered.rows.keys()].filter((id) => !touched.includes(id)).sort() : [];
  const metered = reportToMeter ? done.filter((c) => c.cost > 0) : [];
  const alerts = thresholdEvents(items, done, rows);
  const lastChange = new Map<string, Date>();
  for (const c of all) lastChange.set(c.deploymentId, latest(lastChange.get(c.deploymentId) ?? new Date(0), items[c.index]!.now));
  const statement = writeStatement({
    remembered: remembered !== undefined,
    unchanged: untouched.length > 0,
    refused: refusedHolds.length > 0,
    released: releases.length > 0,
    metered: metered.length > 0,
    alerts: alerts.length > 0,
  });
  const write: BatchWrite = { items, rows, remembered, touched, untouched, refusedHolds, releases, changes, metered, alerts, lastChange };
  const params = statement.names.map((name) => pgArray(WRITE_COLUMNS[name as WriteColumn](write)));
  if (commit) commit.progress.committing = true;
  const [answer] = await (commit ? tx.queryAndCommit.bind(tx) : tx.query.bind(tx))<{ versions: Array<{ id: string; version: string }> }>(
    statement.text,
    params,
    statement.name,
  );
  return answer!.versions;
}

interface ThresholdEvent {
  organizationId: string;
  deploymentId: string;
  data: Record<string, unknown>;
  dedupeKey: string;
  at: Date;
}

/**
 * The monthly `quota.threshold` events the batch's deductions reached, per deployment (emitThresholds'
 * rule and payload: a threshold reached by usage that grew in this batch; the dedupe key makes it once
 * per period).
 */
function thresholdEvents(
  items: BatchDeduction[],
  done: Change[],
  rows: Map<string, BalanceRow>,
): ThresholdEvent[] {
  const events = [];
  const byDeployment = new Map<string, Change[]>();
  for (const c of done) {
    const list = byDeployment.get(c.deploymentId);
    if (list) list.push(c);
    else byDeployment.set(c.deploymentId, [c]);
  }
  for (const [id, mine] of byDeployment) {
    const first = mine[0]!;
    const last = mine[mine.length - 1]!;
    const row = rows.get(id)!;
    const before = first.after.monthly_used - first.monthlyTaken;
    const after = last.after.monthly_used;
    if (after <= before) continue;
    for (const threshold of reachedThresholds(after, row.monthly_allocation)) {
      events.push({
        organizationId: row.organization_id,
        deploymentId: id,
        data: {
          deployment_id: id,
          quota: 'monthly_credits',
          threshold,
          used: after,
          limit: row.monthly_allocation,
          period_end: row.period_end.toISOString(),
        },
        dedupeKey: thresholdKey(id, 'monthly_credits', threshold, row.period_start),
        at: items[last.index]!.now,
      });
    }
  }
  return events;
}

function remaining(b: Pick<BalanceRow, 'monthly_allocation' | 'monthly_used' | 'purchased_balance' | 'reserved'>): number | null {
  if (b.monthly_allocation === null) return null;
  return Math.max(0, Math.max(0, b.monthly_allocation - b.monthly_used) + b.purchased_balance - b.reserved);
}
