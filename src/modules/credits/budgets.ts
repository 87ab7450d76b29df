import type { Deps } from '../../context.js';
import { forgetBalance } from './balance-cache.js';
import { pgArray } from '../../db/arrays.js';
import type { Queryable, Statement, Transaction } from '../../db/client.js';
import { type BudgetCounter, type BudgetRow, type ChargeSubject, EACH, subjectOf, type Window, windowOf } from './budget-rules.js';
import { type PeriodInputs, periodAt, subscriptionPeriod, subscriptionPeriodSql } from './terms.js';

/**
 * The budgets' side of the money engine (docs/budgets.md): which budgets a batch's organizations have,
 * the window rows its charges fall in (created when first charged, locked in one order every writer
 * keeps: budget, subject, window start — after the balance rows), and the give-back of a hold or a
 * refund. The rule itself is credits/budget-rules.ts and credits/rules.ts.
 */

/**
 * A budget with its organization's primary deployment's credit period, for `period` windows, and what
 * brings that period forward once it has ended (terms.ts periodAt): the primary's billing anchor and,
 * read only then, the organization's subscription period.
 */
export interface BudgetWithPeriod extends BudgetRow {
  primary_period_start: Date | null;
  primary_period_end: Date | null;
  primary_billing_anchor: Date | null;
  primary_subscription_start: Date | null;
  primary_subscription_end: Date | null;
}

/**
 * The budgets of a batch's organizations: sent in the batch's first round trip (engine/plan.ts). `latest`
 * is the latest time a charge of the batch is made at: a primary period ended by then is brought forward
 * (its subscription is looked up only for those).
 */
export function budgetsStatement(organizationIds: string[], latest: Date): Statement {
  return {
    text: `SELECT b.id, b.organization_id, b.scope, b.deployment_id, b.api_key_id, b.end_user_id, b.tool_name, b.limit_credits,
                  b.limit_ai_tokens, b.window_kind, b.mode, b.alert_thresholds, pb.period_start AS primary_period_start,
                  pb.period_end AS primary_period_end, pd.billing_anchor AS primary_billing_anchor,
                  sp.current_period_start AS primary_subscription_start, sp.current_period_end AS primary_subscription_end
           FROM budgets b
           LEFT JOIN deployments pd ON pd.organization_id = b.organization_id AND pd.is_primary
           LEFT JOIN credit_balances pb ON pb.deployment_id = pd.id
           LEFT JOIN LATERAL (${subscriptionPeriodSql('b.organization_id', 'pb.period_end <= $2::timestamptz')}) sp ON true
           WHERE b.organization_id = ANY($1::uuid[])
           ORDER BY b.id`,
    params: [pgArray(organizationIds), latest],
    name: 'credits_batch_budgets',
  };
}

/** periodAt's inputs for an organization's primary deployment, from a budget read with it. */
function primaryInputs(b: BudgetWithPeriod): PeriodInputs | null {
  if (!b.primary_billing_anchor) return null;
  return { billing_anchor: b.primary_billing_anchor, subscription: subscriptionPeriod(b.primary_subscription_start, b.primary_subscription_end) };
}

/** periodAt's inputs of deployments whose balance rows are past their period (rare: read apart). */
export async function periodInputsOf(q: Queryable, deploymentIds: readonly string[]): Promise<Map<string, PeriodInputs>> {
  if (deploymentIds.length === 0) return new Map();
  const rows = await q.query<{ id: string; billing_anchor: Date; current_period_start: Date | null; current_period_end: Date | null }>(
    `SELECT d.id, d.billing_anchor, sp.current_period_start, sp.current_period_end
     FROM deployments d LEFT JOIN LATERAL (${subscriptionPeriodSql('d.organization_id')}) sp ON true
     WHERE d.id = ANY($1::uuid[])`,
    [pgArray(deploymentIds)],
    'credits_period_inputs',
  );
  return new Map(
    rows.map((r) => [
      r.id,
      { billing_anchor: r.billing_anchor, subscription: subscriptionPeriod(r.current_period_start, r.current_period_end) },
    ]),
  );
}

/** A window row a charge falls in, before it is locked. */
export interface CounterKey {
  budget: BudgetWithPeriod;
  subject: string;
  window: Window;
  /** keyText of the three, made when first asked for (counterKey): a batch on remembered rows never needs it. */
  key?: string;
}

/** A window row's key as text: budget, subject and window start. */
export const keyText = (budgetId: string, subject: string, start: Date) => `${budgetId}\u0000${subject}\u0000${start.getTime()}`;

/**
 * The window rows a charge of `charge` at `at` falls in. `period` is the charge's deployment's credit
 * period; an organization-wide budget's `period` window is its primary deployment's (brought forward
 * by whole months when that row has not been synced since its period ended). A charge of credits alone
 * (`credits`: MCP, the webhook proxy) falls under the budgets with a credit limit; an AI call (`ai`)
 * under every budget, its tokens counted where there is a token limit (docs/budgets.md, AI calls).
 */
export function countersFor(
  budgets: readonly BudgetWithPeriod[],
  charge: ChargeSubject,
  at: Date,
  period: Window,
  kind: 'credits' | 'ai' = 'credits',
): CounterKey[] {
  const keys: CounterKey[] = [];
  for (const budget of budgets) {
    if (kind === 'credits' && budget.limit_credits === null) continue;
    const subject = subjectOf(budget, charge);
    if (subject === null) continue;
    let own = period;
    if (budget.window_kind === 'period' && budget.deployment_id === null && budget.scope !== 'deployment') {
      const start = budget.primary_period_start;
      const end = budget.primary_period_end;
      if (start && end) own = periodAt({ period_start: start, period_end: end }, at, primaryInputs(budget));
    }
    const window = windowOf(budget.window_kind, at, own);
    keys.push({ budget, subject, window });
  }
  return keys;
}

interface WindowRow {
  id: string;
  budget_id: string;
  subject: string;
  window_start: Date;
  window_end: Date;
  spent_credits: number;
  spent_ai_tokens: number;
}

/**
 * Create the window rows that do not exist yet and lock every one the batch touches — those its
 * charges fall in, and `releasing` (the windows of holds it gives back) — in budget, subject, window
 * order. Returns the charges' counters by key, and every locked row's counter by id.
 */
export async function lockCounters(
  tx: Transaction,
  keys: readonly CounterKey[],
  releasing: readonly string[],
): Promise<{ byKey: Map<string, BudgetCounter>; byId: Map<string, BudgetCounter> }> {
  const unique = new Map<string, CounterKey>();
  for (const k of keys) unique.set(counterKey(k), k);
  const sorted = [...unique.values()].sort(
    (a, b) =>
      (a.budget.id < b.budget.id ? -1 : a.budget.id > b.budget.id ? 1 : 0) ||
      (a.subject < b.subject ? -1 : a.subject > b.subject ? 1 : 0) ||
      a.window.start.getTime() - b.window.start.getTime(),
  );
  const statements: Statement[] = [];
  if (sorted.length > 0) {
    statements.push({
      text: `INSERT INTO budget_windows (budget_id, subject, window_start, window_end)
             SELECT b, s, ws, we FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS x(b, s, ws, we, n)
             ORDER BY n
             ON CONFLICT (budget_id, subject, window_start) DO NOTHING`,
      params: [
        pgArray(sorted.map((k) => k.budget.id)),
        pgArray(sorted.map((k) => k.subject)),
        pgArray(sorted.map((k) => k.window.start)),
        pgArray(sorted.map((k) => k.window.end)),
      ],
      name: 'credits_budget_windows_create',
    });
  }
  statements.push({
    // The rows are found by their keys through the key index, then read and locked by id in key order:
    // written as one condition with OR, the planner read the whole table for every batch. The ids are
    // found first, once (an ARRAY of a subquery): a row another transaction changes while this waits
    // for its lock is rechecked against its new version, and a recheck of `id IN (subquery)` can fail
    // whatever the row holds — the row was then locked but not returned (budget-windows-lock.test.ts).
    text: `SELECT w.id, w.budget_id, w.subject, w.window_start, w.window_end, w.spent_credits, w.spent_ai_tokens
           FROM budget_windows w
           WHERE w.id = ANY(ARRAY(SELECT k.id FROM budget_windows k
                                    JOIN unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS u(b, s, ws)
                                      ON k.budget_id = u.b AND k.subject = u.s AND k.window_start = u.ws
                                  UNION ALL SELECT unnest($4::uuid[])))
           ORDER BY w.budget_id, w.subject, w.window_start
           FOR UPDATE OF w`,
    params: [
      pgArray(sorted.map((k) => k.budget.id)),
      pgArray(sorted.map((k) => k.subject)),
      pgArray(sorted.map((k) => k.window.start)),
      pgArray([...releasing]),
    ],
    name: 'credits_budget_windows_lock',
  });
  const answers = await tx.pipeline(statements);
  const locked = answers[answers.length - 1] as unknown as WindowRow[];
  const budgetOf = new Map(sorted.map((k) => [k.budget.id, k.budget]));
  const byId = new Map<string, BudgetCounter>();
  const byKey = new Map<string, BudgetCounter>();
  for (const row of locked) {
    const budget = budgetOf.get(row.budget_id);
    const counter: BudgetCounter = {
      id: row.id,
      budgetId: row.budget_id,
      subject: row.subject,
      window: { start: row.window_start, end: row.window_end },
      limitCredits: budget?.limit_credits ?? null,
      limitAiTokens: budget?.limit_ai_tokens ?? null,
      block: budget?.mode === 'block',
      spentCredits: row.spent_credits,
      startSpent: row.spent_credits,
      spentAiTokens: row.spent_ai_tokens,
      startAiTokens: row.spent_ai_tokens,
      refused: false,
      budget,
    };
    byId.set(row.id, counter);
    byKey.set(keyText(row.budget_id, row.subject, row.window_start), counter);
  }
  return { byKey, byId };
}

export function counterKey(k: CounterKey): string {
  k.key ??= keyText(k.budget.id, k.subject, k.window.start);
  return k.key;
}

/**
 * Give `credits` back to the budget windows a hold or a usage record was counted in (a release, an
 * expiry, a refund), to those whose window is still in progress at `now`; never below 0.
 */
export async function giveBack(tx: Queryable, windowIds: readonly string[] | null, credits: number, now: Date): Promise<void> {
  if (!windowIds || windowIds.length === 0 || credits <= 0) return;
  await tx.query(
    `UPDATE budget_windows SET spent_credits = GREATEST(0, spent_credits - $2::bigint)
     WHERE id IN (SELECT id FROM budget_windows WHERE id = ANY($1::uuid[]) AND window_end > $3::timestamptz
                  ORDER BY budget_id, subject, window_start FOR UPDATE)`,
    [pgArray([...windowIds]), credits, now],
    'credits_budget_give_back',
  );
}

/**
 * A deployment's credit period that began at `start` now ends at `end` (a subscription's period moved
 * its end: a trial extended, a renewal reported after the row had rolled onto its own guess). The
 * `period` windows that period is the window of (docs/budgets.md, Windows) end there too: those of the
 * budgets narrowed to the deployment and, for the primary, the organization-wide ones. A window row's
 * end is what the retention worker prunes by and what a give-back checks; left at the old end, a
 * window still in progress could be pruned and counted again from zero. Call it after the balance
 * row's update: windows are locked after balance rows, as every batch locks them.
 */
export async function periodEndMoved(tx: Queryable, deploymentId: string, start: Date, end: Date): Promise<void> {
  await tx.query(
    `UPDATE budget_windows w SET window_end = $3
     FROM budgets b JOIN deployments d ON d.organization_id = b.organization_id
     WHERE d.id = $1 AND w.budget_id = b.id AND b.window_kind = 'period' AND w.window_start = $2 AND w.window_end <> $3
       AND (b.deployment_id = d.id OR (b.deployment_id IS NULL AND b.scope <> 'deployment' AND d.is_primary))`,
    [deploymentId, start, end],
    'credits_budget_period_end_moved',
  );
}

/**
 * Namespace of the two-key advisory lock (organization) between a change of its budgets and the opening
 * of a balance row: another than the invitations' (members/invitation-caps.ts), and two keys, so never
 * the migrator's one-key lock.
 */
export const BUDGETS_LOCK = 1_231_002;

/**
 * Opening a balance row of `organizationId` (a new deployment): wait for a change of its budgets in
 * progress, and keep the next one from starting until this transaction ends. Without it a row opened
 * while a change runs would get no new version from it (`budgetsChanged` bumps the rows it finds),
 * and an instance that counted on it before the change committed would keep the budgets from before
 * for as long as it remembers the row (docs/budgets.md, Batches on remembered rows). Shared: openings
 * do not wait for each other.
 */
export async function awaitBudgetChanges(tx: Queryable, organizationId: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock_shared(${BUDGETS_LOCK}, hashtext($1))`, [organizationId], 'credits_budgets_lock_shared');
}

/**
 * A budget of `organizationId` is about to be created, changed or deleted: every balance row of the
 * organization gets a new row version, so a batch computed on remembered rows (engine/remembered.ts),
 * which reads no budgets but counts with those the row was remembered with, is refused and takes the
 * path that reads them, and is marked `has_budgets`, so a
 * check reads them (a mark that stays once set: it only costs a read). Call it FIRST in the budget change's
 * transaction: it locks the balance rows in deployment order, as every batch does before it locks
 * budget windows (a deleted budget's windows go with it), so the two never wait on each other in a
 * cycle.
 */
export async function budgetsChanged(tx: Queryable, organizationId: string): Promise<void> {
  // A balance row opened meanwhile would miss the new version: openBalance waits for this lock.
  await tx.query(`SELECT pg_advisory_xact_lock(${BUDGETS_LOCK}, hashtext($1))`, [organizationId], 'credits_budgets_lock');
  await tx.query(
    `UPDATE credit_balances SET updated_at = updated_at, has_budgets = true
     WHERE deployment_id IN (SELECT deployment_id FROM credit_balances WHERE organization_id = $1 ORDER BY deployment_id FOR UPDATE)`,
    [organizationId],
    'credits_budgets_changed',
  );
}

/**
 * A budget's window kind changed (docs/budgets.md, Enforcement: it starts new windows): its windows of
 * the old kind are deleted, or a new window starting when an old one did (a day at its first hour's
 * start) would take over that row, its count and its end. Holds counted in them give nothing back to
 * the new ones. Call it after `budgetsChanged`, in the same transaction.
 */
export async function budgetWindowKindChanged(tx: Queryable, budgetId: string): Promise<void> {
  await tx.query('DELETE FROM budget_windows WHERE budget_id = $1', [budgetId], 'credits_budget_window_kind_changed');
}

/** What a budget has counted in the window in progress (docs/budgets.md, API): the budgets API's read. */
export interface BudgetStanding {
  window: Window;
  /** The window's count; for a '*' budget the largest subject's. */
  spentCredits: number;
  spentAiTokens: number;
  /** A '*' budget's subjects (end users or tools), most spent first, at most `top`; null for the others. */
  subjects: Array<{ subject: string; spentCredits: number; spentAiTokens: number }> | null;
}

const isEach = (b: BudgetRow) => (b.scope === 'end_user' && b.end_user_id === EACH) || (b.scope === 'tool' && b.tool_name === EACH);

/**
 * The window in progress at `now` of each of `budgets` (all of `organizationId`), and what it has
 * counted; a window no charge has reached yet counts 0. The window is the one the engine would count a
 * charge made now in: countersFor itself is asked, with a charge that falls under the budget. A credit
 * period whose balance row has not been brought up to date since it ended is brought forward by whole
 * months, as countersFor does for an organization's primary deployment. Reads only.
 */
export async function budgetStandings(
  db: Queryable,
  organizationId: string,
  budgets: readonly BudgetRow[],
  now: Date,
  top = 100,
): Promise<Map<string, BudgetStanding>> {
  const out = new Map<string, BudgetStanding>();
  if (budgets.length === 0) return out;
  const narrowed = [...new Set(budgets.flatMap((b) => (b.deployment_id ? [b.deployment_id] : [])))];
  const periods = await db.query<{
    deployment_id: string;
    is_primary: boolean;
    period_start: Date;
    period_end: Date;
    billing_anchor: Date;
    current_period_start: Date | null;
    current_period_end: Date | null;
  }>(
    `SELECT cb.deployment_id, d.is_primary, cb.period_start, cb.period_end, d.billing_anchor, sp.current_period_start, sp.current_period_end
     FROM credit_balances cb JOIN deployments d ON d.id = cb.deployment_id
     LEFT JOIN LATERAL (${subscriptionPeriodSql('cb.organization_id', 'cb.period_end <= $3::timestamptz')}) sp ON true
     WHERE cb.organization_id = $1 AND (d.is_primary OR cb.deployment_id = ANY($2::uuid[]))`,
    [organizationId, pgArray(narrowed), now],
    'credits_budget_standing_periods',
  );
  const primary = periods.find((p) => p.is_primary) ?? null;
  const periodOf = new Map(
    periods.map((p) => [p.deployment_id, periodAt(p, now, { billing_anchor: p.billing_anchor, subscription: subscriptionPeriod(p.current_period_start, p.current_period_end) })]),
  );
  const windows = new Map<string, Window>();
  for (const budget of budgets) {
    const withPeriod: BudgetWithPeriod = {
      ...budget,
      primary_period_start: primary?.period_start ?? null,
      primary_period_end: primary?.period_end ?? null,
      primary_billing_anchor: primary?.billing_anchor ?? null,
      primary_subscription_start: primary?.current_period_start ?? null,
      primary_subscription_end: primary?.current_period_end ?? null,
    };
    // With no balance row to follow (none should be missing), a period window falls back to the calendar month.
    const own = (budget.deployment_id ? periodOf.get(budget.deployment_id) : undefined) ?? windowOf('month', now, null);
    const charge: ChargeSubject = {
      organizationId: budget.organization_id,
      deploymentId: budget.deployment_id ?? primary?.deployment_id ?? '',
      apiKeyId: budget.api_key_id,
      endUserId: budget.end_user_id,
      toolName: budget.tool_name ?? '',
    };
    const key = countersFor([withPeriod], charge, now, own)[0];
    windows.set(budget.id, key ? key.window : windowOf(budget.window_kind, now, own));
  }
  const ids = [...windows.keys()];
  const rows = await db.query<{ budget_id: string; subject: string; spent_credits: number; spent_ai_tokens: number; max_credits: number; max_ai_tokens: number }>(
    `SELECT budget_id, subject, spent_credits, spent_ai_tokens, max_credits, max_ai_tokens FROM (
       SELECT w.budget_id, w.subject, w.spent_credits, w.spent_ai_tokens,
              MAX(w.spent_credits) OVER (PARTITION BY w.budget_id) AS max_credits,
              MAX(w.spent_ai_tokens) OVER (PARTITION BY w.budget_id) AS max_ai_tokens,
              row_number() OVER (PARTITION BY w.budget_id ORDER BY w.spent_credits DESC, w.spent_ai_tokens DESC, w.subject) AS n
       FROM budget_windows w
       WHERE (w.budget_id, w.window_start) IN (SELECT * FROM unnest($1::uuid[], $2::timestamptz[]))
         -- A "*" budget's '' row counts its events, no charge (budgetEventFate).
         AND NOT (w.subject = '' AND w.budget_id = ANY($4::uuid[]))
     ) x
     WHERE n <= $3
     ORDER BY budget_id, n`,
    [pgArray(ids), pgArray(ids.map((id) => windows.get(id)!.start)), top, pgArray(budgets.filter(isEach).map((b) => b.id))],
    'credits_budget_standings',
  );
  for (const budget of budgets) {
    const mine = rows.filter((r) => r.budget_id === budget.id);
    const window = windows.get(budget.id)!;
    if (isEach(budget)) {
      out.set(budget.id, {
        window,
        spentCredits: mine[0]?.max_credits ?? 0,
        spentAiTokens: mine[0]?.max_ai_tokens ?? 0,
        subjects: mine.map((r) => ({ subject: r.subject, spentCredits: r.spent_credits, spentAiTokens: r.spent_ai_tokens })),
      });
    } else {
      const row = mine.find((r) => r.subject === '');
      out.set(budget.id, { window, spentCredits: row?.spent_credits ?? 0, spentAiTokens: row?.spent_ai_tokens ?? 0, subjects: null });
    }
  }
  return out;
}

/**
 * After a budget change committed: every instance forgets the organization's cached balance rows, so
 * the `has_budgets` mark a check and an unlimited deployment's AI call read is seen at once.
 */
export async function forgetOrganizationBalances(deps: Pick<Deps, 'db' | 'caches' | 'bus'>, organizationId: string): Promise<void> {
  const rows = await deps.db.query<{ deployment_id: string }>(
    'SELECT deployment_id FROM credit_balances WHERE organization_id = $1',
    [organizationId],
    'credits_budget_forget',
  );
  for (const r of rows) forgetBalance(deps, r.deployment_id, true);
}

/** Events a `"*"` budget sends per window at most; the next one says `truncated: true`, later ones are dropped. */
export const EACH_BUDGET_EVENTS = 100;

/**
 * Whether a budget event is sent (docs/budgets.md, Events): those of a `"*"` budget are counted on its
 * window's '' row (no charge is ever counted there), made when first needed; the first 100 of a
 * window go out as written, the 101st with `truncated: true` in its data, the rest not at all. Run
 * where the event is fanned out (events/outbox.ts), in that transaction: the row is locked only there,
 * never by a charge, so it joins no lock order of the money engine.
 */
export async function budgetEventFate(tx: Queryable, eventId: string): Promise<'send' | 'truncated' | 'dropped'> {
  const rows = await tx.query<{ events_sent: number }>(
    `WITH e AS (
       SELECT e.data FROM outbox_events e JOIN budgets b ON b.id = (e.data->>'budget_id')::uuid
       WHERE e.id = $1 AND e.type IN ('budget.threshold', 'budget.exceeded')
         AND ((b.scope = 'end_user' AND b.end_user_id = '*') OR (b.scope = 'tool' AND b.tool_name = '*'))
     )
     INSERT INTO budget_windows (budget_id, subject, window_start, window_end, events_sent)
     SELECT (data->>'budget_id')::uuid, '', (data->>'window_start')::timestamptz, (data->>'window_end')::timestamptz, 1 FROM e
     ON CONFLICT (budget_id, subject, window_start) DO UPDATE SET events_sent = budget_windows.events_sent + 1
     RETURNING events_sent`,
    [eventId],
    'credits_budget_event_fate',
  );
  const n = rows[0]?.events_sent;
  if (n === undefined || n <= EACH_BUDGET_EVENTS) return 'send';
  if (n > EACH_BUDGET_EVENTS + 1) return 'dropped';
  await tx.query(`UPDATE outbox_events SET data = data || '{"truncated": true}'::jsonb WHERE id = $1`, [eventId], 'credits_budget_event_truncated');
  return 'truncated';
}

/**
 * Ended windows of `"*"` budgets are deleted (docs/budgets.md, Windows): their counters per end user or
 * tool are kept only while the window is in progress. A release, expiry or refund gives nothing back
 * to an ended window, so nothing reads them. The other budgets keep one row per window.
 */
export async function pruneEachBudgetWindows(db: Queryable, now: Date, limit = 1000): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `WITH old AS (
       SELECT w.id FROM budget_windows w JOIN budgets b ON b.id = w.budget_id
       WHERE w.window_end <= $1::timestamptz
         AND ((b.scope = 'end_user' AND b.end_user_id = '*') OR (b.scope = 'tool' AND b.tool_name = '*'))
       LIMIT $2 FOR UPDATE OF w SKIP LOCKED
     ), del AS (DELETE FROM budget_windows w USING old WHERE w.id = old.id RETURNING 1)
     SELECT count(*)::int AS n FROM del`,
    [now, limit],
    'credits_budget_windows_prune',
  );
  return rows[0]?.n ?? 0;
}
