import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
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

export interface TransactionOptions {
  /**
   * Plan every statement of the transaction for its own parameters (`plan_cache_mode =
   * force_custom_plan`), even a named one. For statements over arrays (`unnest`) whose tables start
   * empty and grow fast: a generic plan cached while a table was small keeps scanning all of it once
   * it is large (docs/adr/0004-group-commit.md). Free on PGlite, whose statements are never cached.
   */
  customPlans?: boolean;
}

export interface Database extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** One transaction; rolled back when fn throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>, options?: TransactionOptions): Promise<T>;
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

function wrap<T>(promise: Promise<T>): Promise<T> {
  return promise.catch((err: unknown) => {
    if (isConnectionError(err)) throw new ServiceUnavailableError();
    throw err;
  });
}

class PostgresDatabase implements Database {
  readonly kind = 'postgres' as const;
  constructor(readonly driver: pg.Pool) {}

  async query<T = Row>(text: string, params: readonly unknown[] = [], name?: string): Promise<T[]> {
    const result = await wrap(this.driver.query({ text, values: params as unknown[], name }));
    return result.rows as T[];
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
    const client = await wrap(this.driver.connect());
    let broken = false;
    const tx: Queryable = {
      query: async <R = Row>(text: string, params: readonly unknown[] = [], name?: string) => {
        const result = await wrap(client.query({ text, values: params as unknown[], name }));
        return result.rows as R[];
      },
    };
    try {
      // One round trip either way: without parameters both statements go as one simple query.
      await tx.query(options.customPlans ? 'BEGIN; SET LOCAL plan_cache_mode = force_custom_plan' : 'BEGIN');
      const out = await fn(tx);
      await tx.query('COMMIT');
      return out;
    } catch (err) {
      broken = err instanceof ServiceUnavailableError || isConnectionError(err);
      if (!broken) {
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

class PgliteDatabase implements Database {
  readonly kind = 'pglite' as const;
  constructor(
    readonly driver: PGlite,
    private readonly release: () => void,
  ) {}

  async query<T = Row>(text: string, params: readonly unknown[] = []): Promise<T[]> {
    const result = await this.driver.query<T>(text, params as unknown[]);
    return result.rows;
  }

  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.driver.transaction(async (t) => {
      const tx: Queryable = {
        query: async <R = Row>(text: string, params: readonly unknown[] = []) =>
          (await t.query<R>(text, params as unknown[])).rows,
      };
      return fn(tx);
    });
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
  /** Where a start-time notice goes (DATA_DIR permissions tightened); stderr when left out, as the other start messages. */
  warn?: (message: string) => void;
}

/** PostgreSQL when DATABASE_URL is a postgres URL, in-memory PGlite for memory://, else PGlite in DATA_DIR. */
export async function openDatabase(options: OpenOptions): Promise<Database> {
  const { databaseUrl } = options;
  if (databaseUrl && databaseUrl !== 'memory://') {
    const pool = new pg.Pool({
      connectionString: databaseUrl,
      max: options.poolSize ?? 20,
      connectionTimeoutMillis: 5_000,
      types: {
        getTypeParser: ((oid: number, format?: string) =>
          oid === 20 ? parseInt8 : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
      },
    });
    // A connection that dies (idle, checked out, or being discarded) emits 'error' on its client;
    // unheard, that would crash the process. The query in flight fails on its own and reports it.
    pool.on('error', () => {});
    pool.on('connect', (client) => client.on('error', () => {}));
    return new PostgresDatabase(pool);
  }
  if (databaseUrl === 'memory://') {
    const db = new PGlite();
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
    const db = new PGlite(pgdata);
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
