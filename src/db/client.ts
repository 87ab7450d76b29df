import { execFile } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { DEFAULT_PGLITE_SHARED_BUFFERS_MB } from '../config.js';
import { ServiceUnavailableError } from '../errors.js';
import { makePrivateDir, PRIVATE_DIR_MODE, securePrivateDataDir, tightenMode } from '../lib/data-dir.js';

export type Row = Record<string, unknown>;

/** Anything that runs SQL: the database itself or an open transaction. */
export interface Queryable {
  /**
   * Run one statement. `name` makes it a named prepared statement on PostgreSQL (parsed once per
   * connection); use it on hot paths, with a name unique to the text.
   */
  query<T = Row>(text: string, params?: readonly unknown[], name?: string): Promise<T[]>;
}

/** One statement of a pipeline (Transaction.pipeline). */
export interface Statement {
  text: string;
  params?: readonly unknown[];
  /** A named prepared statement on PostgreSQL (see Queryable.query). */
  name?: string;
}

/**
 * An open transaction. On PostgreSQL its BEGIN travels with its first statement: the connection
 * pipelines (sends the next message without waiting for the previous answer), so BEGIN costs no round
 * trip of its own (docs/adr/0004-group-commit.md, "Round trips").
 */
export interface Transaction extends Queryable {
  /**
   * Statements run in order and sent together: one round trip on PostgreSQL, one after another on
   * PGlite. Resolves with each statement's rows, in order. Rejects with the first failure: the
   * statements after it fail too (the transaction is aborted), and the transaction is rolled back.
   */
  pipeline(statements: readonly Statement[]): Promise<Row[][]>;
  /**
   * The transaction's last statement, sent with COMMIT in one round trip; nothing may run in the
   * transaction after it. Resolves once both succeeded. An error with a SQLSTATE (the statement's or
   * COMMIT's) means nothing was committed; a lost connection (ServiceUnavailableError) leaves it
   * unknown, as with any COMMIT.
   */
  queryAndCommit<T = Row>(text: string, params?: readonly unknown[], name?: string): Promise<T[]>;
}

export interface TransactionOptions {
  /**
   * Plan every statement of the transaction for its own parameters (`plan_cache_mode =
   * force_custom_plan`), even a named one. For statements over arrays (`unnest`) whose tables start
   * empty and grow fast: a generic plan cached while a table was small keeps scanning all of it once
   * it is large (docs/adr/0004-group-commit.md). Free on PGlite, whose statements are never cached.
   */
  customPlans?: boolean;
  /**
   * Give up a lock wait after this long (`lock_timeout`, SQLSTATE 55P03) instead of waiting: for a
   * transaction that has another way to do its work and should yield rather than queue (or deadlock)
   * behind others. Ignored on PGlite, which has one connection and never waits for a lock.
   */
  lockTimeoutMs?: number;
}

export interface Database extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** One transaction; rolled back when fn throws (unless it ended with `queryAndCommit`). */
  transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T>;
  ping(): Promise<void>;
  close(): Promise<void>;
  /** The underlying driver, for the migrator and drizzle. */
  readonly driver: pg.Pool | PGlite;
}

function parseInt8(value: string): number {
  const n = Number(value);
  // Credits and token counts are far below 2^53; a larger value is a bug, not a number to round.
  if (!Number.isSafeInteger(n)) throw new Error(`bigint ${value} exceeds the safe integer range`);
  return n;
}

/** Connection-level failures that mean "the database is not there" rather than "the query is wrong". */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: string }).code ?? '';
  return (
    code.startsWith('08') ||
    ['57P01', '57P02', '57P03', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND'].includes(code) ||
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/.test(
      err.message,
    )
  );
}

/**
 * A statement the database gave up on that may succeed if sent again (docs/operations.md, Database
 * faults): a statement or lock timeout an operator set (57014, 55P03), a deadlock (40P01) or a
 * serialization failure (40001). Its transaction was rolled back.
 */
export function isTransientError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return ['57014', '55P03', '40P01', '40001'].includes((err as { code?: string }).code ?? '');
}

function wrap<T>(promise: Promise<T>): Promise<T> {
  return promise.catch((err: unknown) => {
    if (isConnectionError(err)) throw new ServiceUnavailableError();
    throw err;
  });
}

/**
 * Waits for every promise (none is left unheard) and resolves with their values, or rejects with the
 * first rejection in order: in a pipeline, the statements after a failed one fail only because it did.
 */
async function settleInOrder<T>(promises: Promise<T>[]): Promise<T[]> {
  const settled = await Promise.allSettled(promises);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    if (isConnectionError(failed.reason)) throw new ServiceUnavailableError();
    throw failed.reason;
  }
  return settled.map((s) => (s as PromiseFulfilledResult<T>).value);
}

class PostgresDatabase implements Database {
  readonly kind = 'postgres' as const;
  /** Statement names, or none when the pooler in front cannot keep them (OpenOptions.preparedStatements). */
  private readonly named: (name: string | undefined) => string | undefined;
  constructor(
    readonly driver: pg.Pool,
    preparedStatements = true,
  ) {
    this.named = preparedStatements ? (name) => name : () => undefined;
  }

  async query<T = Row>(text: string, params: readonly unknown[] = [], name?: string): Promise<T[]> {
    const result = await wrap(this.driver.query({ text, values: params as unknown[], name: this.named(name) }));
    return result.rows as T[];
  }

  async transaction<T>(fn: (tx: Transaction) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
    const client = await wrap(this.driver.connect());
    // new: nothing sent yet; open: BEGIN sent; over: committed or rolled back by queryAndCommit.
    const at: { state: 'new' | 'open' | 'over' } = { state: 'new' };
    const begin = [
      'BEGIN',
      ...(options.customPlans ? ['SET LOCAL plan_cache_mode = force_custom_plan'] : []),
      ...(options.lockTimeoutMs !== undefined ? [`SET LOCAL lock_timeout = ${Math.max(1, Math.round(options.lockTimeoutMs))}`] : []),
    ].join('; ');
    /** Every statement queued at once (the pool's connections pipeline); BEGIN first if not sent yet. */
    const send = (statements: readonly Statement[]): Promise<pg.QueryResult[]> => {
      if (at.state === 'over') return Promise.reject(new Error('the transaction is over (queryAndCommit ran)'));
      const all = at.state === 'new' ? [{ text: begin }, ...statements] : statements;
      const skip = all.length - statements.length;
      at.state = 'open';
      // Pipelined queries are written as they are queued: corked, they leave in one write.
      const stream = (client as unknown as { connection?: { stream?: Partial<Pick<Socket, 'cork' | 'uncork'>> } }).connection?.stream;
      stream?.cork?.();
      let sent: Promise<pg.QueryResult>[];
      try {
        sent = all.map((s) => client.query({ text: s.text, values: s.params as unknown[] | undefined, name: this.named(s.name) }));
      } finally {
        stream?.uncork?.();
      }
      return settleInOrder(sent).then((results) => results.slice(skip));
    };
    const tx: Transaction = {
      query: async <R = Row>(text: string, params: readonly unknown[] = [], name?: string) => {
        const [result] = await send([{ text, params, name }]);
        return result!.rows as R[];
      },
      pipeline: async (statements) => (await send(statements)).map((r) => r.rows as Row[]),
      queryAndCommit: async <R = Row>(text: string, params: readonly unknown[] = [], name?: string) => {
        const pending = send([{ text, params, name }, { text: 'COMMIT' }]);
        // Ended either way: a failed statement aborted the transaction, and its COMMIT rolled it back.
        at.state = 'over';
        const [result, commit] = await pending;
        if (commit!.command !== 'COMMIT') throw new Error(`COMMIT answered ${commit!.command}`);
        return result!.rows as R[];
      },
    };
    let broken = false;
    try {
      const out = await fn(tx);
      if (at.state === 'open') await wrap(client.query('COMMIT'));
      return out;
    } catch (err) {
      broken = err instanceof ServiceUnavailableError || isConnectionError(err);
      if (!broken && at.state === 'open') {
        try {
          await client.query('ROLLBACK');
        } catch {
          broken = true;
        }
      }
      throw err;
    } finally {
      client.release(broken);
    }
  }

  async ping(): Promise<void> {
    await this.query('SELECT 1');
  }

  async close(): Promise<void> {
    await this.driver.end();
  }
}

/**
 * PGlite attaches the statement (`query`), every parameter (`params`) and its options
 * (`queryOptions`) to its errors, where PostgreSQL's driver attaches none: parameters hold emails,
 * password hashes and tokens, and an error is logged whole (docs/operations.md, "Secrets in logs").
 * They are taken off before the error leaves the database layer; its code, constraint, table and
 * message stay.
 */
const PGLITE_ERROR_FIELDS = ['query', 'params', 'queryOptions'] as const;

function withoutStatement(err: unknown): unknown {
  if (typeof err === 'object' && err !== null) for (const field of PGLITE_ERROR_FIELDS) if (field in err) delete (err as Record<string, unknown>)[field];
  return err;
}

const scrubbed = <T>(promise: Promise<T>): Promise<T> =>
  promise.catch((err: unknown) => {
    throw withoutStatement(err);
  });

class PgliteDatabase implements Database {
  readonly kind = 'pglite' as const;
  constructor(
    readonly driver: PGlite,
    private readonly release: () => void,
  ) {}

  async query<T = Row>(text: string, params: readonly unknown[] = []): Promise<T[]> {
    const result = await scrubbed(this.driver.query<T>(text, params as unknown[]));
    return result.rows;
  }

  async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
    // The statement's error, or COMMIT's, or ROLLBACK's: each without the statement and its values.
    return scrubbed(this.driver.transaction(async (t) => {
      // PGlite runs in this thread: no round trips to save, so a pipeline is its statements in turn.
      let over = false;
      const run = async <R = Row>(text: string, params: readonly unknown[] = []): Promise<R[]> => {
        if (over) throw new Error('the transaction is over (queryAndCommit ran)');
        return (await scrubbed(t.query<R>(text, params as unknown[]))).rows;
      };
      const tx: Transaction = {
        query: run,
        pipeline: async (statements) => {
          const out: Row[][] = [];
          for (const s of statements) out.push(await run(s.text, s.params));
          return out;
        },
        // PGlite commits when fn returns, which must be right after this.
        queryAndCommit: async <R = Row>(text: string, params: readonly unknown[] = []) => {
          const rows = await run<R>(text, params);
          over = true;
          return rows;
        },
      };
      return fn(tx);
    }));
  }

  async ping(): Promise<void> {
    await this.query('SELECT 1');
  }

  async close(): Promise<void> {
    await this.driver.close();
    this.release();
  }
}

export interface OpenOptions {
  databaseUrl: string | undefined;
  dataDir: string;
  poolSize?: number;
  /** PGlite's shared_buffers in MB (PGLITE_SHARED_BUFFERS_MB, docs/operations-memory.md); PostgreSQL ignores it. */
  sharedBuffersMb?: number;
  /**
   * Named prepared statements on PostgreSQL (DATABASE_PREPARED_STATEMENTS; default true). False for a
   * pooler in transaction mode that cannot keep them, such as PgBouncer before 1.21: every statement is
   * then parsed each time (docs/operations.md, "PgBouncer").
   */
  preparedStatements?: boolean;
  /** Where a start-time notice goes (DATA_DIR permissions tightened); stderr when left out, as the other start messages. */
  warn?: (message: string) => void;
}

/**
 * PGlite as a service's database, not a browser tab's (docs/operations-memory.md): its own start
 * parameters (single user, no parallel workers, no fsync: `-F`, as PGlite ships) with a smaller
 * shared_buffers, PostgreSQL's 128 MB being most of an idle embedded service's memory.
 */
function embeddedOptions(sharedBuffersMb: number): { startParams: string[] } {
  return { startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${sharedBuffersMb}MB`] };
}

/** Make a new PGlite data directory in a child process that exits when it is done. */
async function initEmbedded(pgdata: string, embedded: { startParams: string[] }): Promise<void> {
  const module = import.meta.resolve('@electric-sql/pglite');
  const script = `const { PGlite } = await import(${JSON.stringify(module)});
const db = new PGlite(${JSON.stringify(pgdata)}, ${JSON.stringify(embedded)});
await db.waitReady;
await db.close();`;
  await new Promise<void>((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', script], { timeout: 120_000 }, (err, _stdout, stderr) =>
      err ? reject(new Error(`the embedded database could not be created in ${pgdata}: ${stderr || err.message}`)) : resolve(),
    );
  });
}

/** PostgreSQL when DATABASE_URL is a postgres URL, in-memory PGlite for memory://, else PGlite in DATA_DIR. */
export async function openDatabase(options: OpenOptions): Promise<Database> {
  const { databaseUrl } = options;
  if (databaseUrl && databaseUrl !== 'memory://') {
    const pool = new pg.Pool({
      connectionString: databaseUrl,
      max: options.poolSize ?? 20,
      connectionTimeoutMillis: 5_000,
      // A transaction's statements may be sent without waiting for the previous answer (Transaction.pipeline).
      pipeline: true,
      types: {
        getTypeParser: ((oid: number, format?: string) =>
          oid === 20 ? parseInt8 : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
      },
    });
    // A connection that dies (idle, checked out, or being discarded) emits 'error' on its client;
    // unheard, that would crash the process. The query in flight fails on its own and reports it.
    pool.on('error', () => {});
    pool.on('connect', (client) => client.on('error', () => {}));
    return new PostgresDatabase(pool, options.preparedStatements ?? true);
  }
  const embedded = embeddedOptions(options.sharedBuffersMb ?? DEFAULT_PGLITE_SHARED_BUFFERS_MB);
  if (databaseUrl === 'memory://') {
    const db = new PGlite('memory://', embedded);
    await db.waitReady;
    return new PgliteDatabase(db, () => {});
  }
  const warn = options.warn ?? ((message: string) => void process.stderr.write(`creditgate: ${message}\n`));
  for (const notice of securePrivateDataDir(options.dataDir)) warn(notice);
  const release = acquireDataDirLock(options.dataDir);
  try {
    // PGlite's file layer creates its files 0666 whatever the umask, so the owner-only DATA_DIR (and
    // its owner-only pgdata, as PostgreSQL insists for a data directory) is what keeps them private.
    const pgdata = join(options.dataDir, 'pgdata');
    makePrivateDir(pgdata);
    const loose = tightenMode(pgdata, PRIVATE_DIR_MODE);
    if (loose) warn(loose);
    // A new data directory is made (initdb) by a child process: the memory initdb touches would stay
    // with this process for good (WebAssembly memory never shrinks).
    if (!existsSync(join(pgdata, 'PG_VERSION'))) await initEmbedded(pgdata, embedded);
    const db = new PGlite(pgdata, embedded);
    await db.waitReady;
    return new PgliteDatabase(db, release);
  } catch (err) {
    release();
    throw err;
  }
}

export class DataDirLockedError extends Error {}

/**
 * PGlite has no lock of its own: two processes on one data directory would corrupt it.
 * The lock file holds the owner's pid; a lock whose process is gone is taken over.
 */
export function acquireDataDirLock(dataDir: string): () => void {
  const file = join(dataDir, 'creditgate.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      return () => rmSync(file, { force: true });
    } catch (err) {
      if ((err as { code?: string }).code !== 'EEXIST') throw err;
      const owner = Number(readFileSync(file, 'utf8').trim());
      if (Number.isInteger(owner) && owner > 0 && isAlive(owner)) {
        throw new DataDirLockedError(
          `DATA_DIR ${dataDir} is in use by process ${owner}. The embedded database allows one process; ` +
            'stop the other one, use another DATA_DIR, or run on PostgreSQL (DATABASE_URL).',
        );
      }
      if (existsSync(file)) rmSync(file, { force: true });
    }
  }
  throw new DataDirLockedError(`could not take the lock in ${dataDir}`);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM';
  }
}
