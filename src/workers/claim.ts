import type { Queryable } from '../db/client.js';

/**
 * The one claim statement of the job queues (docs/jobs.md, Claim). Every queue takes its due rows
 * the same way:
 *
 *   UPDATE <table> j SET <lease> = :lease [, attempts = j.attempts + 1] [, …]
 *   FROM (SELECT q.<key> [, …] FROM <table> q [JOIN …]
 *         WHERE <pending> AND <due at> <= :now [AND lease past] [AND …]
 *         ORDER BY … LIMIT :limit FOR UPDATE OF q SKIP LOCKED) due
 *   WHERE j.<key> = due.<key> RETURNING …
 *
 * SKIP LOCKED lets any number of instances claim at once without waiting on each other, and the
 * lease written in the same statement keeps a claimed row from being due for anyone else after the
 * commit. The tables were built at different times, so a spec maps the shape onto each one's columns.
 * In SQL fragments `q` is the candidate row, `j` the claimed row and `due` the candidate's extra
 * columns; parameters are named (`:now`, `:limit`, `:lease`, or a queue's own such as
 * `:organization`) and numbered by the builder.
 */
export interface ClaimSpec {
  /** Names the statement (a prepared statement on PostgreSQL): one text per name. */
  name: string;
  table: string;
  /** The primary key column. */
  key: string;
  /** The row waits for work: `q.status = 'pending'`, `q.sent_at IS NULL` … */
  pending: string;
  /** When the row is due, over `q`; null: as soon as it is pending. */
  dueAt: string | null;
  lease: Lease;
  /** A column counted up at the claim, so a worker that dies mid-attempt has used the attempt. */
  countAttempt?: string;
  /** More assignments of the claim (`status = 'deploying'`, `updated_at = :now`). */
  set?: readonly string[];
  /** Joined to the candidates (`LEFT JOIN usage_records u ON …`). */
  join?: string;
  /** More columns of the candidates, read back as `due.<name>`. */
  select?: readonly string[];
  /** More conditions on the candidates. */
  where?: readonly string[];
  orderBy: string;
  /** What the claim answers, over `j` and `due`. */
  returning: string;
}

/**
 * Where a claim writes its lease (docs/jobs.md, Lease):
 * - `column`: a column of its own (`leased_until`); a row is due only once it is null or past;
 * - `due`: the due column itself is moved to the lease's end, so the row is simply not due until then;
 * - `transaction`: nothing is written; the claim's row locks are the lease, and the work runs in the
 *   claim's transaction (a crash rolls both back).
 */
export type Lease = { kind: 'column'; column: string } | { kind: 'due'; column: string } | { kind: 'transaction' };

/** When a claim runs, how many rows it takes, when its lease ends; a queue's own parameters besides (left out: null). */
export interface ClaimAt {
  now: Date;
  limit: number;
  leaseUntil: Date | null;
  params?: Readonly<Record<string, unknown>>;
}

export interface ClaimStatement {
  name: string;
  text: string;
  /** Parameter names in `$n` order. */
  names: readonly string[];
}

/** The statement of a spec, built once per name (a name stands for one text, as a prepared statement's does). */
export function claimStatement(spec: ClaimSpec): ClaimStatement {
  const cached = built.get(spec.name);
  if (cached) return cached;
  const conditions = [spec.pending];
  if (spec.dueAt !== null) conditions.push(`${spec.dueAt} <= :now`);
  if (spec.lease.kind === 'column') conditions.push(`(q.${spec.lease.column} IS NULL OR q.${spec.lease.column} <= :now)`);
  conditions.push(...(spec.where ?? []));
  const candidates =
    `SELECT ${[`q.${spec.key}`, ...(spec.select ?? [])].join(', ')} FROM ${spec.table} q${spec.join ? ` ${spec.join}` : ''}` +
    ` WHERE ${conditions.join(' AND ')} ORDER BY ${spec.orderBy} LIMIT :limit FOR UPDATE OF q SKIP LOCKED`;
  let text: string;
  if (spec.lease.kind === 'transaction') {
    text = `SELECT ${spec.returning} FROM (${candidates}) due JOIN ${spec.table} j ON j.${spec.key} = due.${spec.key}`;
  } else {
    const assignments = [`${spec.lease.column} = :lease`];
    if (spec.countAttempt) assignments.push(`${spec.countAttempt} = j.${spec.countAttempt} + 1`);
    assignments.push(...(spec.set ?? []));
    text = `UPDATE ${spec.table} j SET ${assignments.join(', ')} FROM (${candidates}) due WHERE j.${spec.key} = due.${spec.key} RETURNING ${spec.returning}`;
  }
  const statement = { name: `jobs_claim_${spec.name}`, ...numbered(text) };
  built.set(spec.name, statement);
  return statement;
}

const built = new Map<string, ClaimStatement>();

/** `:name` (not a `::type` cast) becomes `$n`: now, limit and lease first, in that order, then the rest as they appear. */
function numbered(text: string): { text: string; names: string[] } {
  const placeholder = /(?<![:\w]):([a-z][a-z_]*)/g;
  const found = new Set([...text.matchAll(placeholder)].map((m) => m[1]!));
  const names = [...['now', 'limit', 'lease'].filter((n) => found.has(n)), ...[...found].filter((n) => !['now', 'limit', 'lease'].includes(n))];
  return { text: text.replace(placeholder, (_, name: string) => `$${names.indexOf(name) + 1}`), names };
}

/** Claim due rows of one queue with its spec. */
export async function claimJobs<Row>(db: Queryable, spec: ClaimSpec, at: ClaimAt): Promise<Row[]> {
  const statement = claimStatement(spec);
  const values: Record<string, unknown> = { ...at.params, now: at.now, limit: at.limit, lease: at.leaseUntil };
  // A queue's own parameter left out is null: those are optional filters (`:organization IS NULL OR …`).
  const params = statement.names.map((name) => values[name] ?? null);
  return db.query<Row>(statement.text, params, statement.name);
}
