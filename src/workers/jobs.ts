import type { Clock } from '../clock.js';
import type { Queryable } from '../db/client.js';
import type { Metrics } from '../lib/metrics.js';
import { type Backoff, type BackoffOptions, backoffMs } from './backoff.js';
import { type ClaimAt, type ClaimSpec, claimJobs } from './claim.js';

/**
 * The job runner (docs/jobs.md): one way to claim, lease, retry and count the work of the queues
 * that hand rows to a worker (mail, event fan-out, webhook deliveries, meter events, Stripe events,
 * template provisioning). A queue declares its table and columns (a ClaimSpec), its policy and its
 * handler; `runJobs` claims a batch, runs the handler on each job, contains a handler's failure (the
 * lease makes that job due again) and counts claims, outcomes and durations by queue.
 *
 * It imports no module: the queue modules import it, and src/workers/catalog.ts schedules the passes.
 */
export interface JobPolicy {
  /** Jobs per pass (the worker's batch). */
  batchSize: number;
  /** How long a claimed job is its worker's; null: the claim's transaction is the lease and the work runs in it. */
  leaseMs: number | null;
  /** Attempts before the job is given up (its failed or left-for-an-operator state); null: until it succeeds or fails for good. */
  maxAttempts: number | null;
  /** The wait after a failed attempt; null: a failure is not scheduled (the job is due again at once, or never). */
  backoff: Backoff | null;
  /** Jobs of a pass handled at once; 1: one after another, in claim order. */
  concurrency: number;
  /**
   * A lane that finished a job with `done` may take the next job of the same lane (JobQueue.next),
   * claimed then, at most `jobs` more in the pass and only while the pass is younger than `withinMs`.
   */
  follow?: { jobs: number; withinMs: number };
}

/** How a job ended, for the metrics: `retry` was scheduled again, `failed` was given up, `skipped` needed nothing. */
export type JobOutcome = 'done' | 'retry' | 'failed' | 'skipped';

export interface Job<Row, Setup> {
  row: Row;
  /** Where to record the outcome: the database, or the claim's transaction when that is the lease. */
  db: Queryable;
  claimedAt: Date;
  /** The end of this claim's lease (null: the transaction). A guarded write may compare it. */
  leaseUntil: Date | null;
  /** What the queue's setup made for this pass (an SMTP URL, a Stripe client). */
  setup: Setup;
}

/** The least a pass needs; a queue may ask for more (`D`). */
export interface JobDeps {
  db: Queryable & { transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> };
  clock: Clock;
  log?: { warn(obj: object, msg: string): void };
  /** Absent where a caller passes less than the app's Deps (a test's partial deps): nothing is counted. */
  metrics?: Pick<Metrics, 'jobsClaimed' | 'jobsFinished' | 'jobDuration'>;
}

export interface JobQueue<Row, D extends JobDeps = JobDeps, Setup = undefined> {
  /** The queue's name in metrics and logs: its worker's name in src/workers/catalog.ts. */
  name: string;
  table: string;
  policy: JobPolicy;
  /** The claim: a spec of this table's columns, or the table owner's claim built from one (claimJobs). */
  claim: ClaimSpec | ((db: Queryable, at: ClaimAt) => Promise<Row[]>);
  /** What a pass needs besides deps; null: the queue is off (no SMTP_URL …) and nothing is claimed. */
  setup?(deps: D): Setup | null;
  /** Runs in the claim's transaction, before its commit (the audit rows of a status the claim changed). */
  onClaim?(tx: Queryable, rows: Row[], deps: D): Promise<void>;
  /** The order jobs of one pass are handled in, when the claim's order is not enough. */
  order?(a: Row, b: Row): number;
  /** The job's id, for logs. */
  keyOf(row: Row): string;
  /**
   * The next job of `done`'s lane (a webhook's next due delivery), claimed now with the lease of `at`;
   * null when there is none. Called only with the policy's `follow` and after a `done`.
   */
  next?(done: Row, deps: D, at: ClaimAt): Promise<Row | null>;
  handle(job: Job<Row, Setup>, deps: D): Promise<JobOutcome>;
}

export interface RunOptions {
  /** Jobs to claim; the policy's batch size by default. */
  batch?: number;
  /** The queue's own claim parameters (`:organization` …); one left out is null. */
  params?: Readonly<Record<string, unknown>>;
}

/** One pass over a queue: claim, handle, count. Returns how many jobs it claimed (a full batch runs again at once). */
export async function runJobs<Row, D extends JobDeps, Setup>(deps: D, queue: JobQueue<Row, D, Setup>, options: RunOptions = {}): Promise<number> {
  const setup = queue.setup ? queue.setup(deps) : (undefined as Setup);
  if (setup === null) return 0;
  const now = deps.clock.now();
  const { leaseMs } = queue.policy;
  const at: ClaimAt = {
    now,
    limit: options.batch ?? queue.policy.batchSize,
    leaseUntil: leaseMs === null ? null : new Date(now.getTime() + leaseMs),
    ...(options.params ? { params: options.params } : {}),
  };
  const claim = (db: Queryable) => (typeof queue.claim === 'function' ? queue.claim(db, at) : claimJobs<Row>(db, queue.claim, at));
  const inOrder = (rows: Row[]) => (queue.order ? [...rows].sort(queue.order) : rows);
  const job = (row: Row, db: Queryable): Job<Row, Setup> => ({ row, db, claimedAt: now, leaseUntil: at.leaseUntil, setup });
  const counted = (n: number) => {
    if (n > 0) deps.metrics?.jobsClaimed.inc({ queue: queue.name }, n);
  };

  if (at.leaseUntil === null) {
    // The transaction is the lease: a failure rolls the claim and the work back together and the
    // pass fails (the worker loop logs it); the rows are due again for the next pass.
    const outcomes = await deps.db.transaction(async (tx) => {
      const rows = await claim(tx);
      if (queue.onClaim) await queue.onClaim(tx, rows, deps);
      const ended: JobOutcome[] = [];
      for (const row of inOrder(rows)) ended.push(await timed(deps, queue.name, () => queue.handle(job(row, tx), deps)));
      return ended;
    });
    counted(outcomes.length);
    for (const outcome of outcomes) deps.metrics?.jobsFinished.inc({ queue: queue.name, outcome });
    return outcomes.length;
  }

  const rows = queue.onClaim
    ? await deps.db.transaction(async (tx) => {
        const claimed = await claim(tx);
        await queue.onClaim!(tx, claimed, deps);
        return claimed;
      })
    : await claim(deps.db);
  counted(rows.length);
  let handled = rows.length;
  const run = async (row: Row, lease: Date | null): Promise<JobOutcome | 'error'> => {
    let outcome: JobOutcome | 'error';
    try {
      outcome = await timed(deps, queue.name, () => queue.handle({ ...job(row, deps.db), leaseUntil: lease }, deps));
    } catch (err) {
      // Nothing recorded: the lease runs out and the job is due again, for this worker or another.
      outcome = 'error';
      deps.log?.warn({ err, queue: queue.name, job: queue.keyOf(row) }, 'job failed to record; its lease makes it due again');
    }
    deps.metrics?.jobsFinished.inc({ queue: queue.name, outcome });
    return outcome;
  };
  const { follow } = queue.policy;
  await inLanes(inOrder(rows), queue.policy.concurrency, async (first) => {
    let row = first;
    let outcome = await run(row, at.leaseUntil);
    // The lane goes on with its next job while the one before succeeded (docs/jobs.md, Lanes).
    for (let more = 0; follow && queue.next && outcome === 'done' && more < follow.jobs; more++) {
      const t = deps.clock.now();
      if (t.getTime() - now.getTime() >= follow.withinMs) break;
      const lease = new Date(t.getTime() + leaseMs!);
      let next: Row | null;
      try {
        next = await queue.next(row, deps, { now: t, limit: 1, leaseUntil: lease, ...(at.params ? { params: at.params } : {}) });
      } catch (err) {
        deps.log?.warn({ err, queue: queue.name, job: queue.keyOf(row) }, 'claiming the next job of a lane failed; the next pass takes it');
        break;
      }
      if (!next) break;
      counted(1);
      handled++;
      row = next;
      outcome = await run(row, lease);
    }
  });
  return handled;
}

async function timed(deps: JobDeps, queue: string, fn: () => Promise<JobOutcome>): Promise<JobOutcome> {
  const stop = deps.metrics?.jobDuration.startTimer({ queue });
  try {
    return await fn();
  } finally {
    stop?.();
  }
}

/** `fn` over the items, at most `lanes` at a time, each lane taking the next item in order. */
async function inLanes<T>(items: readonly T[], lanes: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, lanes), items.length) }, lane));
}

/** When a job that has now failed `failures` times is tried again, by its queue's backoff. */
export function retryAt(policy: JobPolicy, failures: number, now: Date, options: BackoffOptions = {}): Date {
  if (!policy.backoff) return now;
  return new Date(now.getTime() + backoffMs(policy.backoff, failures, options));
}

/** The job has used its attempts (after `attempts` of them): it goes to its failed state instead of another try. */
export function exhausted(policy: JobPolicy, attempts: number): boolean {
  return policy.maxAttempts !== null && attempts >= policy.maxAttempts;
}
