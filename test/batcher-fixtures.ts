import { DeductionBatcher } from '../src/modules/credits/engine/queue.js';
import type { BatchDeduction, BatchOutcome } from '../src/modules/credits/engine/types.js';
import type { DeductResult } from '../src/modules/credits/rules.js';
import type { Database, Transaction } from '../src/db/client.js';
import type { Harness, Tenant } from './harness.js';

/**
 * Fixtures of the group-commit suites (src/modules/credits/batcher-*.test.ts, docs/adr/0004-group-commit.md):
 * a batcher with a window, a deduction request, a watched database and a reader of usage rows.
 * `harness` is read at call time, so each file creates its own harness in `beforeAll`.
 */

export const resultOf = (o: BatchOutcome): DeductResult => {
  if (!o.claimed) throw new Error('not claimed');
  return o.result;
};

/**
 * h's database, noting for each transaction which of `ids` its statements name, and when it began and
 * ended on one counter (to tell which transactions were open at the same time).
 */
export interface Watched {
  ids: Set<string>;
  start: number;
  /** When its first statement was sent. */
  sent?: number;
  end?: number;
}

export function batcherFixtures(harness: () => Harness) {
  return {
    batcher(): DeductionBatcher {
      // A window gathers every request submitted in this tick into one batch.
      return new DeductionBatcher(harness().deps, { windowMs: 20, maxBatch: 1000, maxInFlight: 1 });
    },
    request(t: Tenant, cost: number, extra: Partial<BatchDeduction> = {}): BatchDeduction {
      return {
        deploymentId: t.deploymentId,
        organizationId: t.organizationId,
        cost,
        now: harness().clock.now(),
        action: 'task_basic',
        toolName: 'batch-tool',
        mcpUserId: null,
        metadata: null,
        actor: 'test',
        invocationId: null,
        releaseReserved: 0,
        ...extra,
      };
    },
    watchedTransactions(ids: string[]): { db: Database; transactions: Watched[]; tick: () => number } {
      const transactions: Watched[] = [];
      let counter = 0;
      const tick = () => counter++;
      const real = harness().deps.db;
      const db = Object.create(real) as Database;
      db.transaction = ((fn: (tx: Transaction) => Promise<unknown>, options?: unknown) => {
        const entry: Watched = { ids: new Set(), start: tick() };
        transactions.push(entry);
        const note = <T>(params: T): T => {
          entry.sent ??= tick();
          const text = JSON.stringify(params ?? []);
          for (const id of ids) if (text.includes(id)) entry.ids.add(id);
          return params;
        };
        const run = real.transaction(
          (tx) =>
            fn({
              query: (text, params, name) => tx.query(text, note(params), name),
              pipeline: (statements) => tx.pipeline(statements.map((s) => ({ ...s, params: note(s.params) }))),
              queryAndCommit: (text, params, name) => tx.queryAndCommit(text, note(params), name),
            }),
          options as never,
        );
        return run.finally(() => {
          entry.end = tick();
        });
      }) as Database['transaction'];
      return { db, transactions, tick };
    },
    usageOf: (t: Tenant) =>
      harness().deps.db.query<{ success: boolean; quantity: number; invocation_id: string | null }>(
        'SELECT success, quantity, invocation_id FROM usage_records WHERE deployment_id = $1 ORDER BY "timestamp", id',
        [t.deploymentId],
      ),
  };
}
