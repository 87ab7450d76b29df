import type { Queryable } from './client.js';

/**
 * A transaction-scoped lock on a name (PostgreSQL's advisory lock on its 64-bit hash): the
 * transactions that take it run one after the other, whichever instance runs them, and it is let go
 * at their commit or rollback. For a count checked before an insert (a cap) or a row that does not
 * exist yet (a payment's purchase before its grant). Names are namespaced, `creditgate-<what>:<id>`.
 */
export async function lockName(tx: Queryable, name: string): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [name]);
}
