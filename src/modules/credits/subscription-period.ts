import type { Queryable } from '../../db/client.js';
import { periodEndMoved } from './budgets.js';
import { syncBalance } from './service.js';

/**
 * The subscription reported its current period [start, end) (docs/billing.md, Subscriptions); the subscriptions row is
 * already written in this transaction. The period resets at most once, however late or often the
 * report arrives:
 * - the balance row's period is past its end: syncBalance rolls it into the reported period;
 * - the row's period began at `start`, or later (already rolled in this period): only its end follows;
 * - the row's period began before `start` (a first subscription, or a renewal this row has not seen):
 *   the new period begins now, once — the row then starts at `start`, so a repeat is the case above.
 * A period that does not contain `now` (a report from the past or the future) changes nothing.
 */
export async function followSubscriptionPeriod(
  tx: Queryable,
  input: { deploymentId: string; start: Date; end: Date; now: Date; actor: string },
): Promise<void> {
  const { deploymentId, start, end, now, actor } = input;
  if (start.getTime() > now.getTime() || end.getTime() <= now.getTime()) return;
  const row = await syncBalance(tx, deploymentId, now, actor);
  if (row.period_start.getTime() < start.getTime()) {
    // End the row's period now; syncBalance then rolls it into the subscription's, with its ledger row.
    await tx.query('UPDATE credit_balances SET period_end = $2 WHERE deployment_id = $1', [deploymentId, now]);
    await syncBalance(tx, deploymentId, now, actor);
    return;
  }
  if (row.period_end.getTime() !== end.getTime()) {
    await tx.query('UPDATE credit_balances SET period_end = $2, sync_before = LEAST(sync_before, $2) WHERE deployment_id = $1', [
      deploymentId,
      end,
    ]);
    await periodEndMoved(tx, deploymentId, row.period_start, end);
  }
}
