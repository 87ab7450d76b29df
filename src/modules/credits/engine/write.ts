import { pgArray } from '../../../db/arrays.js';
import type { Transaction } from '../../../db/client.js';
import { type ThresholdEvent, thresholdEvents } from '../../quotas/thresholds.js';
import { SUBSCRIBED } from '../meter-outbox.js';
import { type BudgetCounter, type BudgetEvent, budgetEvents } from '../budget-rules.js';
import { type BatchWrite, WRITE_COLUMNS, type WriteColumn } from './columns.js';

import type { Change } from '../rules.js';
import type { BalanceRow } from '../service.js';
import type { OptimisticPlan } from './remembered.js';
import type { BatchDeduction } from './types.js';

export { WRITE_COLUMN_NAMES } from './columns.js';

/**
 * The engine's one write: everything a batch changes, in ONE set-based statement of the parts the
 * batch needs (docs/adr/0004-group-commit.md). The plan (engine/plan.ts) decides, this file only moves
 * its decisions into arrays and the arrays into rows.
 */

const latest = (a: Date, b: Date) => (a.getTime() >= b.getTime() ? a : b);

/**
 * The answer a recorded invocation replays (docs/metering.md, Idempotency: the `RecordResult` of a deduction),
 * built in the statement from the columns it already has: `q` the credits used, `rem` the credits
 * remaining (NULL when the allocation is unlimited), `u` the usage record, `inv` the invocation id.
 * Sending it as JSON text instead cost the server a stringify and an escaped array element per record,
 * and a batch of 48 about 8 KB more to send (docs/benchmarks.md).
 */
const RECORDED_ANSWER = `jsonb_build_object('success', true, 'credits_used', x.q, 'credits_remaining', x.rem, 'error', NULL,
                           'usage_id', x.u, 'invocation_id', x.inv)`;

/**
 * The parts of a batch's write statement that only some batches need; a part with nothing to write is
 * left out of the statement. PostgreSQL plans the statement for every batch (its arrays' lengths), and
 * each part costs planning and executor start-up (its tables and indexes opened and locked) even when
 * its arrays are empty: for a batch of records only, the four parts below were half of its planning
 * time (docs/benchmarks.md, "A write statement of the parts a batch needs").
 */
export interface WriteShape {
  /** One round trip on remembered rows (RowMemory): claims by the insert, row versions checked. */
  remembered: boolean;
  /** Remembered rows the batch does not write (every request of theirs refused): checked, not written. */
  unchanged: boolean;
  /** Reservations refused: their invocation rows deleted. */
  refused: boolean;
  /** Reservations released. */
  released: boolean;
  /** Meter events for Stripe (docs/billing.md, Usage to Stripe meters). */
  metered: boolean;
  /** `quota.threshold` events. */
  alerts: boolean;
  /** Budget windows counted (docs/budgets.md): their new totals. */
  counted?: boolean;
  /**
   * Usage records that name the budget windows they were counted in (a refund gives back to those): a
   * deduction's, and a spent hold's, which inherits the windows of its hold (a batch may count in no
   * window and still record those).
   */
  windowed?: boolean;
  /** Holds counted in budget windows: the windows stored on their invocations. */
  heldCounted?: boolean;
}

/**
 * The batch's writes in ONE statement (one round trip while the balance rows are locked): the balance
 * rows, refused holds, releases, ledger rows, usage records (joined to their ledger rows), invocation
 * answers, meter events and `quota.threshold` events, each a data-modifying CTE over arrays. The CTEs
 * touch disjoint rows (a batch settles each invocation key once), so their order does not matter.
 * Threshold events are fanned out to webhooks by the events dispatcher.
 * Parameters are named (`$change_usage`) and numbered by `numberParams`, as parts come and go.
 */
function writeBatchSql(shape: WriteShape): string {
  const ctes = [
    `bal AS (
  UPDATE credit_balances b
  SET monthly_used = u.used, purchased_balance = u.purchased, purchased_consumed = u.consumed, reserved = u.reserved, updated_at = u.at
  FROM unnest($bal_id::uuid[], $bal_used::bigint[], $bal_purchased::bigint[], $bal_consumed::bigint[], $bal_reserved::bigint[],
              $bal_at::timestamptz[]${shape.remembered ? ', $bal_version::xid[]' : ''})
    AS u(id, used, purchased, consumed, reserved, at${shape.remembered ? ', version' : ''})
  WHERE b.deployment_id = u.id${
    shape.remembered
      ? `
    -- Only the row version the batch computed from (RowMemory): any other writer since gives a new one.
    AND b.xmin = u.version`
      : ''
  }
  RETURNING b.deployment_id AS id, b.xmin::text AS version
)`,
  ];
  if (shape.unchanged) {
    ctes.push(`unchanged AS (
  -- The batch's other rows (every request refused): their refusals were computed from the remembered
  -- version too, so it must still be the one this statement sees.
  SELECT 1 FROM credit_balances b JOIN unnest($unchanged_id::uuid[], $unchanged_version::xid[]) AS c(id, version) ON b.deployment_id = c.id
  WHERE b.xmin = c.version
)`);
  }
  if (shape.refused) {
    ctes.push(`refused AS (
  -- A refused reservation leaves no invocation behind.
  DELETE FROM invocations i USING unnest($refused_deployment::uuid[], $refused_invocation::text[]) AS x(d, inv)
  WHERE i.deployment_id = x.d AND i.invocation_id = x.inv AND i.status = 'reserved'
  RETURNING 1
)`);
  }
  if (shape.released) {
    ctes.push(`released AS (
  -- Locked as held in step 1b.
  UPDATE invocations i SET status = 'released', updated_at = x.t
  FROM unnest($released_deployment::uuid[], $released_invocation::text[], $released_at::timestamptz[]) AS x(d, inv, t)
  WHERE i.deployment_id = x.d AND i.invocation_id = x.inv AND i.status = 'reserved'
  RETURNING 1
)`);
  }
  ctes.push(
    `led AS (
  -- The deductions among the changes: monthly_after is NULL exactly when the allocation is (unlimited).
  INSERT INTO credit_ledger (organization_id, deployment_id, kind, amount, monthly_delta, purchased_delta,
                             monthly_after, purchased_after, actor, usage_id, created_at)
  SELECT o, d, 'deduct', -q, CASE WHEN ma IS NULL THEN 0 ELSE -mt END, -pt, ma, pa, a, id, t
  FROM unnest($change_usage::uuid[], $change_organization::uuid[], $change_deployment::uuid[], $change_credits::bigint[],
              $change_deducted::boolean[], $change_monthly::bigint[], $change_purchased::bigint[], $change_at::timestamptz[],
              $ledger_monthly_after::bigint[], $ledger_purchased_after::bigint[], $ledger_actor::text[])
    AS x(id, o, d, q, s, mt, pt, t, ma, pa, a)
  WHERE s
  RETURNING id, usage_id
)`,
    `used AS (
  -- Every deduction, and every final refusal (docs/metering.md, Denials: a record either way).
  INSERT INTO usage_records (id, organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, metadata,
                             success, error, ledger_id, invocation_id, monthly_taken, purchased_taken, period_start, "timestamp"${
                               shape.windowed ? ', budget_windows' : ''
                             })
  SELECT x.id, o, d, m, q, tn, mu, md::jsonb, s, e, led.id, i, mt, pt, ps, t${shape.windowed ? `, string_to_array(bw, ',')::uuid[]` : ''}
  FROM unnest($change_usage::uuid[], $change_organization::uuid[], $change_deployment::uuid[], $change_credits::bigint[],
              $change_deducted::boolean[], $change_monthly::bigint[], $change_purchased::bigint[], $change_at::timestamptz[],
              $usage_metric::text[], $usage_tool::text[], $usage_mcp_user::text[], $usage_metadata::text[], $usage_error::text[],
              $usage_invocation::text[], $usage_period_start::timestamptz[]${shape.windowed ? ', $usage_windows::text[]' : ''})
    AS x(id, o, d, q, s, mt, pt, t, m, tn, mu, md, e, i, ps${shape.windowed ? ', bw' : ''})
  LEFT JOIN led ON led.usage_id = x.id
  RETURNING 1
)`,
    shape.remembered
      ? `answered AS (
  -- Fresh invocations claimed and answered at once (recorded with their answer, or denied): an id
  -- taken meanwhile is not inserted, and the check below then refuses the whole statement.
  INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, usage_id, response, created_at, updated_at)
  SELECT x.d, x.inv, x.o, x.tn, x.h, CASE WHEN x.ok THEN 'recorded' ELSE 'denied' END, CASE WHEN x.ok THEN x.u ELSE NULL END,
         CASE WHEN x.ok THEN ${RECORDED_ANSWER} ELSE NULL END, x.t, x.t
  FROM unnest($change_usage::uuid[], $change_organization::uuid[], $change_deployment::uuid[], $change_deducted::boolean[],
              $change_at::timestamptz[], $usage_tool::text[], $usage_invocation::text[], $answer_hash::text[], $change_credits::bigint[],
              $answer_remaining::bigint[])
    AS x(u, o, d, ok, t, tn, inv, h, q, rem)
  WHERE x.h IS NOT NULL
  ON CONFLICT (deployment_id, invocation_id) DO NOTHING
  RETURNING 1
)`
      : `answered AS (
  -- Claimed invocations (those with a request hash) recorded with their answer, or denied; a spent reservation recorded.
  UPDATE invocations i
  SET status = CASE WHEN x.ok THEN 'recorded' ELSE 'denied' END,
      usage_id = CASE WHEN x.ok THEN x.u ELSE NULL END,
      request_hash = x.h, reserved_amount = 0, reservation_expires_at = NULL, updated_at = x.t,
      response = CASE WHEN x.ok THEN ${RECORDED_ANSWER} ELSE NULL END
  FROM unnest($change_usage::uuid[], $change_deployment::uuid[], $change_deducted::boolean[], $change_at::timestamptz[],
              $usage_invocation::text[], $answer_hash::text[], $change_credits::bigint[], $answer_remaining::bigint[])
    AS x(u, d, ok, t, inv, h, q, rem)
  WHERE x.h IS NOT NULL AND i.deployment_id = x.d AND i.invocation_id = x.inv
  RETURNING 1
)`,
  );
  if (shape.counted) {
    ctes.push(`win AS (
  -- Budget windows (docs/budgets.md), locked by the plan: what the batch's charges and releases left.${
    shape.remembered
      ? `
  -- On remembered rows: only the window row version the batch counted from.`
      : ''
  }
  UPDATE budget_windows w SET spent_credits = x.spent
  FROM unnest($win_id::uuid[], $win_spent::bigint[]${shape.remembered ? ', $win_version::xid[]' : ''}) AS x(id, spent${shape.remembered ? ', version' : ''})
  -- w.id = ANY(...) lets the planner see how few rows it reads: joined to the arrays alone, a table of
  -- a few thousand windows was read whole for every batch.
  WHERE w.id = x.id AND w.id = ANY($win_id::uuid[])${shape.remembered ? ' AND w.xmin = x.version' : ''}
  RETURNING w.xmin AS version
)`);
  }
  if (shape.heldCounted) {
    ctes.push(`heldwin AS (
  -- Holds counted in budget windows: their release, expiry or record finds the windows here.
  UPDATE invocations i SET budget_windows = string_to_array(x.bw, ',')::uuid[]
  FROM unnest($heldwin_deployment::uuid[], $heldwin_invocation::text[], $heldwin_windows::text[]) AS x(d, inv, bw)
  WHERE i.deployment_id = x.d AND i.invocation_id = x.inv
  RETURNING 1
)`);
  }
  if (shape.metered) {
    ctes.push(`met AS (
  -- Meter events of subscribed organizations (docs/billing.md, Usage to Stripe meters).
  INSERT INTO meter_event_outbox (identifier, organization_id, deployment_id, stripe_customer_id, value, event_at, next_attempt_at)
  SELECT x.u, x.o, x.d, o.stripe_customer_id, x.v, x.t, x.t
  FROM unnest($meter_usage::uuid[], $meter_organization::uuid[], $meter_deployment::uuid[], $meter_value::bigint[], $meter_at::timestamptz[])
    AS x(u, o, d, v, t)
  JOIN organizations o ON o.id = x.o
  WHERE ${SUBSCRIBED}
  ON CONFLICT (identifier) DO NOTHING
  RETURNING 1
)`);
  }
  if (shape.alerts) {
    ctes.push(`alert AS (
  -- quota.threshold (once per threshold per period, quotas/thresholds.ts) and budget events (once per
  -- threshold or refusal per window, credits/budget-rules.ts), by their dedupe keys.
  INSERT INTO outbox_events (organization_id, deployment_id, type, data, dedupe_key, created_at)
  SELECT o, d, ty, data::jsonb, k, t
  FROM unnest($alert_organization::uuid[], $alert_deployment::uuid[], $alert_type::text[], $alert_data::text[], $alert_key::text[],
              $alert_at::timestamptz[])
    AS x(o, d, ty, data, k, t)
  ON CONFLICT (dedupe_key) DO NOTHING
  RETURNING 1
)`);
  }
  const fresh = shape.remembered
    ? `,
       -- Every remembered row still the one computed from, and every id claimed here; else nothing
       -- of the statement stays (a division by zero, SQLSTATE 22012, refuses it as a whole).
       1 / ((SELECT count(*) FROM bal) = cardinality($bal_id::uuid[])${
         shape.unchanged ? `\n            AND (SELECT count(*) FROM unchanged) = cardinality($unchanged_id::uuid[])` : ''
       }
            AND (SELECT count(*) FROM answered) = cardinality(array_remove($answer_hash::text[], NULL))${
              shape.counted ? `
            AND (SELECT count(*) FROM win) = cardinality($win_id::uuid[])` : ''
            })::int AS fresh`
    : '';
  // Every window row the statement updates gets the one version of its transaction (its xid, as for
  // the balance rows): that version, and how many rows.
  const windows = shape.counted
    ? `,
       (SELECT version::text FROM win LIMIT 1) AS windows_version,
       (SELECT count(*) FROM win)::int AS windows`
    : '';
  return `WITH ${ctes.join(', ')}
SELECT (SELECT count(*) FROM used)::int AS usage,
       (SELECT coalesce(json_agg(json_build_object('id', id, 'version', version)), '[]') FROM bal) AS versions${windows}${fresh}`;
}

/** A statement with named parameters (`$bal_id`), numbered in order of first appearance. */
interface NumberedStatement {
  text: string;
  /** The parameter names, in their numbers' order ($1 first). */
  names: string[];
  /** The prepared statement's name: one per shape, on each connection. */
  name: string;
}

function numberParams(text: string, name: string): NumberedStatement {
  const names: string[] = [];
  const numbered = text.replace(/\$([a-z][a-z_]*)/g, (_, param: string) => {
    let at = names.indexOf(param);
    if (at < 0) at = names.push(param) - 1;
    return `$${at + 1}`;
  });
  return { text: numbered, names, name };
}

/** Each shape's statement, built once. */
const WRITE_STATEMENTS = new Map<string, NumberedStatement>();

export function writeStatement(shape: WriteShape): NumberedStatement {
  // R remembered, U unchanged, F refused, L released, M metered, A alerts, B budget windows counted,
  // W usage records' windows, H holds' windows.
  const key = `${shape.remembered ? 'R' : ''}${shape.unchanged ? 'U' : ''}${shape.refused ? 'F' : ''}${shape.released ? 'L' : ''}${
    shape.metered ? 'M' : ''
  }${shape.alerts ? 'A' : ''}${shape.counted ? 'B' : ''}${shape.windowed ? 'W' : ''}${shape.heldCounted ? 'H' : ''}`;
  let statement = WRITE_STATEMENTS.get(key);
  if (!statement) {
    statement = numberParams(writeBatchSql(shape), key === '' ? 'credits_batch_write' : `credits_batch_write_${key}`);
    WRITE_STATEMENTS.set(key, statement);
  }
  return statement;
}


/** The batch's writes: one statement (writeBatchSql), of the parts the batch needs. */
export async function writeBatch(
  tx: Transaction,
  items: BatchDeduction[],
  all: Change[],
  rows: Map<string, BalanceRow>,
  reportToMeter: boolean,
  commit: { progress: { committing: boolean } } | undefined,
  remembered: OptimisticPlan | undefined,
  counters: BudgetCounter[] = [],
): Promise<{ balances: RowVersion[]; windowsVersion: string | null }> {
  const touched = [...new Set(all.filter((c) => c.deducted).map((c) => c.deploymentId))];
  const refusedHolds = all.filter((c) => c.kind === 'hold' && !c.deducted);
  const releases = all.filter((c) => c.kind === 'release');
  const changes = all.filter((c) => c.kind === 'deduct' || c.kind === 'spend');
  if (touched.length === 0 && refusedHolds.length === 0 && changes.length === 0) return { balances: [], windowsVersion: null };
  const done = changes.filter((c) => c.deducted);
  // Remembered rows the batch does not write (every request refused) are checked, not written.
  const untouched = remembered ? [...remembered.rows.keys()].filter((id) => !touched.includes(id)).sort() : [];
  const metered = reportToMeter ? done.filter((c) => c.cost > 0) : [];
  const alerts: Array<ThresholdEvent | BudgetEvent> = [...batchThresholdEvents(items, done, rows), ...budgetEvents(counters, items.map((it) => it.now).reduce(latest))];
  const heldCounted = all.filter((c) => c.kind === 'hold' && c.deducted && c.windows.length > 0);
  const lastChange = new Map<string, Date>();
  for (const c of all) lastChange.set(c.deploymentId, latest(lastChange.get(c.deploymentId) ?? new Date(0), items[c.index]!.now));
  const statement = writeStatement({
    remembered: remembered !== undefined,
    unchanged: untouched.length > 0,
    refused: refusedHolds.length > 0,
    released: releases.length > 0,
    metered: metered.length > 0,
    alerts: alerts.length > 0,
    counted: counters.length > 0,
    windowed: changes.some((c) => c.deducted && c.windows.length > 0),
    heldCounted: heldCounted.length > 0,
  });
  const write: BatchWrite = {
    items,
    rows,
    remembered,
    touched,
    untouched,
    refusedHolds,
    releases,
    changes,
    metered,
    alerts,
    lastChange,
    counters,
    heldCounted,
  };
  const params = statement.names.map((name) => pgArray(WRITE_COLUMNS[name as WriteColumn](write)));
  if (commit) commit.progress.committing = true;
  const [answer] = await (commit ? tx.queryAndCommit.bind(tx) : tx.query.bind(tx))<{
    versions: RowVersion[];
    windows_version?: string | null;
    windows?: number;
  }>(statement.text, params, statement.name);
  // The version every window of `counters` was written at; null when not all were (then none is remembered).
  const version = answer!.windows_version;
  return { balances: answer!.versions, windowsVersion: version && answer!.windows === counters.length ? version : null };
}

/** A row the write changed (a balance row by deployment id, a budget window by id) and its new version (`xmin`). */
export interface RowVersion {
  id: string;
  version: string;
}

/**
 * The monthly `quota.threshold` events the batch's deductions reached, per deployment: the shared rule
 * (quotas/thresholds.ts) on the deployment's usage before its first and after its last change here.
 */
function batchThresholdEvents(items: BatchDeduction[], done: Change[], rows: Map<string, BalanceRow>): ThresholdEvent[] {
  const byDeployment = new Map<string, Change[]>();
  for (const c of done) {
    const list = byDeployment.get(c.deploymentId);
    if (list) list.push(c);
    else byDeployment.set(c.deploymentId, [c]);
  }
  return [...byDeployment].flatMap(([id, mine]) => {
    const first = mine[0]!;
    const last = mine[mine.length - 1]!;
    const row = rows.get(id)!;
    return thresholdEvents({
      organizationId: row.organization_id,
      deploymentId: id,
      quota: 'monthly_credits',
      before: first.after.monthly_used - first.monthlyTaken,
      after: last.after.monthly_used,
      limit: row.monthly_allocation,
      periodStart: row.period_start,
      periodEnd: row.period_end,
      now: items[last.index]!.now,
    });
  });
}
