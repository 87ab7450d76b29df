import type { Database, Queryable } from '../../db/client.js';

/**
 * The rollups' backfill (docs/usage-analytics.md, "Rollups"): records older than the rollups
 * (`rolled_up = false`, marked by migration 0025) are counted a few pages at a time by setting the
 * flag through the parent table, whose update trigger then adds each record whole — in the same
 * transaction, and exactly once (a record's row lock orders the backfill and a refund of it). The
 * `usage-rollup-backfill` worker walks each partition of usage_records by page (a TID range, no
 * index needed), then checks that no record is left (a refund may have moved an uncounted record
 * behind the walk) and starts again if one is, else marks the backfill done.
 */

const PAGES_PER_STEP = 256;

/** The relations that hold records: the partitions of usage_records, or the table itself. */
async function relations(db: Queryable): Promise<string[]> {
  const parts = await db.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = to_regclass('usage_records') ORDER BY c.relname`,
  );
  return parts.length > 0 ? parts.map((p) => p.name) : ['usage_records'];
}

/** The backfill's state: NULL lag when it is done. */
export async function rollupBackfillLag(db: Queryable, now: Date): Promise<number> {
  const rows = await db.query<{ started_at: Date; done_at: Date | null }>('SELECT started_at, done_at FROM usage_rollup_backfill WHERE id = 1', [], 'rollup_backfill_state');
  const state = rows[0];
  if (!state || state.done_at !== null) return 0;
  return Math.max(0, Math.round((now.getTime() - state.started_at.getTime()) / 1000));
}

/**
 * One step of the backfill: count the uncounted records of the next pages. Returns the records
 * counted plus 1 while there is more to do (so the worker runs again at once), 0 when done.
 */
export async function backfillRollupsStep(db: Database, now: Date): Promise<number> {
  return db.transaction(async (tx) => {
    const rows = await tx.query<{ relation: string | null; next_page: number; done_at: Date | null }>(
      'SELECT relation, next_page, done_at FROM usage_rollup_backfill WHERE id = 1 FOR UPDATE',
    );
    const state = rows[0];
    if (!state || state.done_at !== null) return 0;
    const all = await relations(tx);
    let relation = state.relation !== null && all.includes(state.relation) ? state.relation : all[0]!;
    let page = state.relation === relation ? state.next_page : 0;
    const size = await tx.query<{ pages: number }>(
      `SELECT (pg_relation_size(to_regclass($1)) / current_setting('block_size')::int)::bigint AS pages`,
      [relation],
    );
    if (page >= size[0]!.pages) {
      const next = all[all.indexOf(relation) + 1];
      if (next === undefined) {
        // The walk is over: done unless a record is still uncounted (moved behind the walk by an update).
        const left = await tx.query('SELECT 1 FROM usage_records WHERE NOT rolled_up LIMIT 1');
        if (left.length === 0) {
          await tx.query('UPDATE usage_rollup_backfill SET done_at = $1, relation = NULL, next_page = 0 WHERE id = 1', [now]);
          return 0;
        }
        relation = all[0]!;
      } else relation = next;
      page = 0;
      await tx.query('UPDATE usage_rollup_backfill SET relation = $1, next_page = 0 WHERE id = 1', [relation]);
      return 1;
    }
    // Through the parent, so that its update trigger counts them; only this relation's pages.
    const counted = await tx.query<{ n: number }>(
      `WITH c AS (
         UPDATE usage_records SET rolled_up = true
         WHERE tableoid = to_regclass($1) AND ctid >= format('(%s,0)', $2::bigint)::tid AND ctid < format('(%s,0)', $3::bigint)::tid
           AND NOT rolled_up
         RETURNING 1)
       SELECT count(*)::int AS n FROM c`,
      [relation, page, page + PAGES_PER_STEP],
    );
    await tx.query('UPDATE usage_rollup_backfill SET relation = $1, next_page = $2 WHERE id = 1', [relation, page + PAGES_PER_STEP]);
    return counted[0]!.n + 1;
  });
}
