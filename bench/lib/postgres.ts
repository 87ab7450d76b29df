import pg from 'pg';

/** The PostgreSQL the benchmark runs against: 127.0.0.1:5432, user postgres (trust), unless BENCH_POSTGRES_URL says otherwise. */
export const ADMIN_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface BenchDatabase {
  url: string;
  name: string;
  version: string;
  /** Counters of the database and the WAL, for statements and fsyncs per request. */
  stats(): Promise<PgCounters>;
  /** One statement in the bench database. */
  exec(sql: string): Promise<void>;
  drop(): Promise<void>;
}

export interface PgCounters {
  xacts: number;
  walRecords: number;
  walSyncs: number;
  walBytes: number;
}

export interface PgPerRequest {
  /** Transactions per request: every autocommit statement is one, so this counts statements on the hot path. */
  xacts: number;
  walSyncs: number;
  walBytes: number;
}

/** A fresh database for this run, so nothing of an earlier run (or of the tests) is in the numbers. */
export async function createBenchDatabase(): Promise<BenchDatabase> {
  const name = `creditgate_bench_${Date.now()}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const version = (await admin.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    version,
    async stats() {
      const { rows } = await admin.query<Record<string, string>>(
        `SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1)::text AS xacts,
                wal_records::text, wal_sync::text, wal_bytes::text FROM pg_stat_wal`,
        [name],
      );
      const r = rows[0]!;
      return { xacts: Number(r.xacts), walRecords: Number(r.wal_records), walSyncs: Number(r.wal_sync), walBytes: Number(r.wal_bytes) };
    },
    async exec(sql: string) {
      const client = new pg.Client({ connectionString: url.toString() });
      await client.connect();
      try {
        await client.query(sql);
      } finally {
        await client.end();
      }
    },
    async drop() {
      try {
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await admin.end();
      }
    },
  };
}

export function perRequest(from: PgCounters, to: PgCounters, requests: number): PgPerRequest {
  const per = (a: number, b: number, digits: number) => (requests > 0 ? Number(((b - a) / requests).toFixed(digits)) : 0);
  return { xacts: per(from.xacts, to.xacts, 2), walSyncs: per(from.walSyncs, to.walSyncs, 3), walBytes: per(from.walBytes, to.walBytes, 0) };
}
