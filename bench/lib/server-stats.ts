/**
 * What the benchmark server children (webhooks-server.ts, mcp-server.ts) report over IPC besides
 * their own seed and verify: SQL statements by label, counted by wrapping app.deps.db (a
 * transaction counts as one "BEGIN … COMMIT" plus its statements), and a way to make every pool
 * connection publish its pg_stat counters before the runner reads them.
 */
import type { FastifyInstance } from 'fastify';
import type { Database, Queryable } from '../../src/db/client.js';

const labelOf = (text: string, name: string | undefined) => name ?? text.trim().replace(/\s+/g, ' ').slice(0, 48);

/** Wraps db so every statement is counted; returns a snapshot function. */
export function countStatements(db: Database): () => Record<string, number> {
  const statements: Record<string, number> = {};
  const count = (label: string) => {
    statements[label] = (statements[label] ?? 0) + 1;
  };
  const query = db.query.bind(db);
  const transaction = db.transaction.bind(db);
  const patched = db as { query: Queryable['query']; transaction: Database['transaction'] };
  patched.query = (text, params, name) => {
    count(labelOf(text, name));
    return query(text, params, name);
  };
  patched.transaction = (fn, options) =>
    transaction((tx) => {
      count('BEGIN … COMMIT');
      return fn({
        query: (text, params, name) => {
          count(`tx: ${labelOf(text, name)}`);
          return tx.query(text, params, name);
        },
        pipeline: (list) => {
          for (const s of list) count(`tx: ${labelOf(s.text, s.name)}`);
          return tx.pipeline(list);
        },
        queryAndCommit: (text, params, name) => {
          count(`tx: ${labelOf(text, name)}`);
          return tx.queryAndCommit(text, params, name);
        },
      });
    }, options);
  return () => ({ ...statements });
}

/**
 * One short statement on every pool connection at once (not counted): a PostgreSQL backend
 * publishes its pg_stat counters at the end of a transaction at most once a second.
 */
export async function flushPoolStats(app: FastifyInstance): Promise<null> {
  const pool = app.deps.db.driver as unknown as { query(text: string): Promise<unknown> };
  await Promise.all(Array.from({ length: app.deps.config.databasePoolSize }, () => pool.query('SELECT pg_sleep(0.05)')));
  return null;
}
