import { pgArray } from '../../../db/arrays.js';
import type { Statement, Transaction } from '../../../db/client.js';
import { IDEMPOTENCY_WINDOW_MS, sweepReservations } from '../reservations.js';
import type { BudgetCounter, Window } from '../budget-rules.js';
import { type BudgetWithPeriod, budgetsStatement, type CounterKey, counterKey, countersFor, lockCounters, periodInputsOf } from '../budgets.js';
import { type PeriodInputs, periodAt } from '../terms.js';
import { applyInOrder, type Change, NOTHING_HELD, type Terms } from '../rules.js';
import { type BalanceRow, syncBalance } from '../service.js';
import { NotOptimistic, type OptimisticPlan, type RememberedBudgets, type RememberedWindow, type Written } from './remembered.js';
import type { BatchDeduction, BatchOp, BatchOutcome } from './types.js';
import { writeBatch } from './write.js';

/**
 * The plan of a batch (docs/adr/0006-one-money-engine.md): claim fresh invocation ids, lock what the
 * batch settles and the balance rows (in one order every batch keeps), bring stale rows up to date,
 * apply the spending rule (credits/rules.ts) to each deployment's requests in arrival order, and hand
 * the result to the one write (engine/write.ts). Every money request takes this path: a batch of many
 * from the queue (engine/queue.ts), or a batch of one (`applyOne`) in a transaction of its own or the
 * caller's.
 */

const latest = (a: Date, b: Date) => (a.getTime() >= b.getTime() ? a : b);
const keyOf = (deploymentId: string, invocationId: string) => `${deploymentId}\u0000${invocationId}`;

/** An existing invocation row the batch settles: a reservation being spent by its record, or released. */
interface HeldRow {
  deployment_id: string;
  invocation_id: string;
  tool_name: string;
  reserved_amount: number;
  reservation_expires_at: Date;
  created_at: Date;
  /** The budget windows its hold was counted in. */
  budget_windows: string[] | null;
}

/**
 * Apply a batch inside the caller's transaction. Returns one outcome per item, in order. Throws only on
 * a database error (the batch is then rolled back and retried one by one).
 */
export async function applyBatch(
  tx: Transaction,
  items: BatchDeduction[],
  reportToMeter: boolean,
  /**
   * The batch's ops (engine/types.ts BatchOp): their balance rows are locked with the others, in
   * deployment order, and the budget windows they name with the batch's; the third answer holds each
   * op's locked windows.
   */
  ops: ReadonlyArray<Pick<BatchOp, 'deploymentId' | 'budgets'>> = [],
  /**
   * Send the batch's writes with COMMIT in one round trip (`Transaction.queryAndCommit`): only when
   * nothing else runs in the transaction after them. `progress.committing` turns true as they go.
   */
  commit?: { progress: { committing: boolean } },
  /**
   * The batch's balance rows as this instance last committed them (RowMemory.plan): nothing is read or
   * locked first; the writes go in one round trip and fail as a whole, with nothing written, if any
   * row changed since or any invocation id is taken (the caller then runs the locking path).
   */
  remembered?: OptimisticPlan,
): Promise<[BatchOutcome[], Written, BudgetCounter[][]]> {
  const outcomes: Array<BatchOutcome | undefined> = new Array(items.length);
  const alsoLock = ops.map((op) => op.deploymentId);
  const opBudgets = ops.some((op) => op.budgets !== undefined);
  let opWindows: BudgetCounter[][] = ops.map(() => []);
  const batchNow = items.map((it) => it.now).reduce(latest, new Date(0));
  const nothingWritten: Written = { versions: [], windows: null, now: batchNow };
  /** Per item: what it deducts, holds or gives back, and what of `reserved` it frees. */
  const terms: Terms[] = items.map((it) => ({ kind: kindOf(it), cost: it.cost, release: it.releaseReserved, heldWindows: it.heldWindows }));

  // Steps 1, 1b and 2 go in one round trip (Transaction.pipeline, with the transaction's BEGIN): none
  // of them needs another's answer to be sent, and PostgreSQL runs them in this order, so the lock
  // order (invocation rows, then balance rows in deployment order) is kept.
  const claims = items.map((it, index) => ({ it, index })).filter(({ it }) => (it.claimInvocation || it.hold) && it.invocationId !== null && !it.owned);
  // Every key a record or a release could settle; what is not held comes back empty.
  const settleable = items.filter((it) => (it.claimInvocation || it.release) && it.invocationId !== null && !it.owned);
  // Every deployment the batch may touch; a row locked and then not needed costs nothing.
  const lockIds = [...new Set([...items.map((it) => it.deploymentId), ...alsoLock])].sort();
  // Ops of one deployment alone lock their row themselves, as on their own: no order to keep — unless
  // they count in budget windows, which are locked after the balance rows.
  const lockBalances = !(lockIds.length === 0 || (items.length === 0 && lockIds.length === 1 && !opBudgets));
  const statements: Statement[] = [];
  // 1. Claim fresh invocation ids in one statement; the first of duplicates wins, the others take the full path.
  //    Records are claimed `pending` (step 4 marks them), holds `reserved` (a refused hold's row is deleted in step 4).
  if (claims.length > 0) {
    statements.push({
      text: `INSERT INTO invocations (deployment_id, invocation_id, organization_id, tool_name, request_hash, status, reserved_amount,
                                reservation_expires_at, created_at, updated_at)
       SELECT d, i, o, t, h, CASE WHEN x IS NULL THEN 'pending' ELSE 'reserved' END, CASE WHEN x IS NULL THEN 0 ELSE c END, x, a, a
       FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::timestamptz[], $7::bigint[], $8::timestamptz[])
         AS u(d, i, o, t, h, a, c, x)
       ON CONFLICT (deployment_id, invocation_id) DO NOTHING
       RETURNING deployment_id, invocation_id`,
      params: [
        claims.map(({ it }) => it.deploymentId),
        claims.map(({ it }) => it.invocationId),
        claims.map(({ it }) => it.organizationId),
        claims.map(({ it }) => it.toolName),
        claims.map(({ it }) => it.claimInvocation?.requestHash ?? null),
        claims.map(({ it }) => it.now),
        claims.map(({ it }) => it.cost),
        claims.map(({ it }) => it.hold?.expiresAt ?? null),
      ].map(pgArray),
      name: 'credits_batch_claim',
    });
  }
  // 1b. Reservations this batch may settle: the record of a held call spends its hold (the price was
  //     fixed when it was held), a release gives it back. Their rows are locked in key order (as every
  //     batch does, so batches never deadlock on them) before any balance row, as the invocation path
  //     (credits/invocations.ts) locks them. Rows this batch just claimed are its own and are told apart below.
  if (settleable.length > 0) {
    statements.push({
      text: `SELECT i.deployment_id, i.invocation_id, i.tool_name, i.reserved_amount, i.reservation_expires_at, i.created_at, i.budget_windows
       FROM invocations i JOIN unnest($1::uuid[], $2::text[]) AS k(d, inv) ON i.deployment_id = k.d AND i.invocation_id = k.inv
       WHERE i.status = 'reserved'
       ORDER BY i.deployment_id, i.invocation_id
       FOR UPDATE OF i`,
      params: [pgArray(settleable.map((it) => it.deploymentId)), pgArray(settleable.map((it) => it.invocationId))],
      name: 'credits_batch_lock_held',
    });
  }
  // 2. Lock the balance rows once, in deployment order.
  if (lockBalances) {
    statements.push({
      // BalanceRow's columns, not updated_at: one timestamp fewer to parse per row.
      text: `SELECT deployment_id, organization_id, period_start, period_end, sync_before, monthly_allocation, monthly_used,
                    purchased_balance, reserved, ai_tokens_used, ai_tokens_over_limit, ai_tokens_reserved, ai_credits_reserved, purchased_consumed,
                    credits_owed, has_budgets
             FROM credit_balances WHERE deployment_id = ANY($1::uuid[]) ORDER BY deployment_id FOR UPDATE`,
      params: [pgArray(lockIds)],
      name: 'credits_batch_lock',
    });
  }
  // 2b. The budgets of the batch's organizations (docs/budgets.md), read after the balance rows are
  //     locked. A batch on remembered rows reads none: each row is remembered with the budgets its
  //     version counted with, and a budget's change gives it a new version (credits/budgets.ts budgetsChanged).
  //     Ops that count in budgets (an AI call's charge) read their organizations' budgets too.
  const organizations = [...new Set([...items.map((it) => it.organizationId), ...ops.flatMap((op) => (op.budgets?.charge ? [op.budgets.charge.organizationId] : []))])];
  const readBudgets = !remembered && organizations.length > 0;
  if (readBudgets) {
    const times = [...items.map((it) => it.now), ...ops.flatMap((op) => (op.budgets?.charge ? [op.budgets.charge.at] : []))];
    statements.push(budgetsStatement(organizations, times.reduce(latest)));
  }
  // Nothing to send (ops of one deployment alone): BEGIN then goes with the first op's statement.
  // Remembered rows: the claims are made by the writes themselves, and no existing row is settled.
  const answers = remembered
    ? [
        ...(claims.length > 0 ? [claims.map(({ it }) => ({ deployment_id: it.deploymentId, invocation_id: it.invocationId }))] : []),
        ...(settleable.length > 0 ? [[]] : []),
        ...(lockBalances ? [[...remembered.rows.values()].map((r) => r.row)] : []),
      ]
    : statements.length > 0
      ? await tx.pipeline(statements)
      : [];
  const won = (claims.length > 0 ? answers.shift() : []) as Array<{ deployment_id: string; invocation_id: string }>;
  const held = (settleable.length > 0 ? answers.shift() : []) as unknown as HeldRow[];
  const locked = (lockBalances ? answers.shift() : []) as unknown as BalanceRow[];
  const budgets = (readBudgets ? answers.shift() : []) as unknown as BudgetWithPeriod[];
  /** Per release: the windows its hold was counted in. */
  const releasing = new Map<number, string[]>();

  const claimedHere = new Set<string>();
  const losers: number[] = [];
  if (claims.length > 0) {
    const free = new Set(won.map((r) => keyOf(r.deployment_id, r.invocation_id)));
    for (const key of free) claimedHere.add(key);
    for (const { it, index } of claims) {
      const key = keyOf(it.deploymentId, it.invocationId!);
      if (free.has(key)) free.delete(key);
      else if (it.claimInvocation && !claimedHere.has(key)) losers.push(index);
      else outcomes[index] = { claimed: false };
    }
  }

  // Only a reservation still inside its hold is spent here (an overdue one may be expired by a sweep
  // of this very batch); every other existing id (a replay, a reuse, another tool) takes the
  // invocation path after the batch.
  const settling = [
    ...losers,
    ...items.map((it, index) => ({ it, index })).filter(({ it }) => it.release && it.invocationId !== null).map(({ index }) => index),
  ].sort((a, b) => a - b);
  if (settling.length > 0) {
    const rowsByKey = new Map(held.map((r) => [keyOf(r.deployment_id, r.invocation_id), r]));
    const idempotencyFloor = batchNow.getTime() - IDEMPOTENCY_WINDOW_MS;
    for (const index of settling) {
      const it = items[index]!;
      const key = keyOf(it.deploymentId, it.invocationId!);
      const row = claimedHere.has(key) ? undefined : rowsByKey.get(key);
      // The first request of a key that settles its row takes it; the others see what it left, after
      // the batch. One that declines it (a record of another tool, an overdue hold) leaves it to the
      // next: a release beside a record of another tool still gives the hold back, as in either serial
      // order (the money model of credits/engine.model.test.ts found it answering "nothing held").
      if (it.release) {
        // An overdue hold is left to a batch of one: this batch's own sweep of overdue holds (step 3)
        // could expire it under the release and give its credits back twice. Alone, a release is
        // never refused, so no sweep runs.
        const overdue = items.length > 1 && row !== undefined && row.reservation_expires_at.getTime() <= batchNow.getTime();
        if (claimedHere.has(key) || overdue) outcomes[index] = { claimed: false };
        else if (row) {
          terms[index] = { kind: 'release', cost: row.reserved_amount, release: 0 };
          if (row.budget_windows?.length) releasing.set(index, row.budget_windows);
          rowsByKey.delete(key);
        } else outcomes[index] = { claimed: true, result: { ...NOTHING_HELD }, cost: 0 };
        continue;
      }
      const spendable =
        row !== undefined &&
        row.tool_name === it.toolName &&
        row.created_at.getTime() > idempotencyFloor &&
        row.reservation_expires_at.getTime() > batchNow.getTime();
      if (spendable) {
        terms[index] = { kind: 'spend', cost: row.reserved_amount, release: row.reserved_amount, heldWindows: row.budget_windows ?? [] };
        rowsByKey.delete(key);
      } else outcomes[index] = { claimed: false };
    }
  }

  // Bring stale balance rows up to date.
  const byDeployment = new Map<string, number[]>();
  for (const [index, it] of items.entries()) {
    if (outcomes[index]) continue;
    const list = byDeployment.get(it.deploymentId) ?? [];
    list.push(index);
    byDeployment.set(it.deploymentId, list);
  }
  const deployments = [...byDeployment.keys()].sort();
  const rows = new Map<string, BalanceRow>();
  for (const row of locked) rows.set(row.deployment_id, row);
  // The budgets of each organization: read above, or those the remembered rows' versions counted with.
  const budgetsOf = new Map<string, readonly BudgetWithPeriod[]>();
  if (remembered) {
    for (const r of remembered.rows.values()) if (r.budgets.length > 0) budgetsOf.set(r.row.organization_id, r.budgets);
  } else {
    for (const b of budgets) {
      const list = budgetsOf.get(b.organization_id) as BudgetWithPeriod[] | undefined;
      if (list) list.push(b);
      else budgetsOf.set(b.organization_id, [b]);
    }
  }
  if (deployments.length === 0) {
    if (opBudgets) opWindows = (await budgetCounters(tx, items, terms, byDeployment, rows, budgetsOf, releasing, ops, remembered)).opWindows;
    return [outcomes as BatchOutcome[], nothingWritten, opWindows];
  }
  for (const id of deployments) {
    const indexes = byDeployment.get(id)!;
    const now = indexes.map((i) => items[i]!.now).reduce(latest);
    const row = rows.get(id);
    if (!row) throw new Error(`no balance row for deployment ${id}`);
    if (row.sync_before.getTime() <= now.getTime()) {
      if (remembered) throw new NotOptimistic();
      rows.set(id, await syncBalance(tx, id, now, items[indexes[0]!]!.actor));
    }
  }

  // 2c. The budget windows the batch's charges fall in and its releases give back to, locked, with the
  //     ops' windows; on remembered rows (never with ops), the budgets those rows' versions counted with
  //     and the windows as this instance left them (engine/remembered.ts), checked by the write.
  let counters: BudgetCounter[] = [];
  if (budgetsOf.size > 0 || opBudgets) {
    const found = await budgetCounters(tx, items, terms, byDeployment, rows, budgetsOf, releasing, ops, remembered);
    counters = found.all;
    opWindows = found.opWindows;
  }

  // 3. Each deployment's requests in arrival order, by the spending rule (credits/rules.ts); a refusal
  //    while reservations hold credits first releases the overdue ones, then the rule runs again.
  const changes: Change[] = [];
  for (const id of deployments) {
    const indexes = byDeployment.get(id)!;
    // Budget counters are shared across deployments (an organization's budget): a second run starts
    // from what the first found. Only a row with credits held can have one (copying every counter for
    // every deployment made a batch's planning quadratic in its size).
    const held = rows.get(id)!.reserved > 0;
    const before = held ? counters.map((c) => ({ spent: c.spentCredits, refused: c.refused })) : [];
    let applied = applyInOrder(rows.get(id)!, indexes, terms);
    const refusedWhileHeld = held && applied.changes.some((c) => !c.deducted);
    if (refusedWhileHeld && remembered) throw new NotOptimistic();
    if (refusedWhileHeld) {
      const now = indexes.map((i) => items[i]!.now).reduce(latest);
      // A hold the caller's transaction is spending is locked by that transaction, which the sweep's
      // SKIP LOCKED does not skip: expiring it would give its credits back twice.
      const spending = indexes.filter((i) => items[i]!.owned && items[i]!.releaseReserved > 0).map((i) => items[i]!.invocationId!);
      const expired = await sweepReservations(tx, now, id, spending);
      if (expired.count > 0) {
        const fresh = await tx.query<BalanceRow>('SELECT * FROM credit_balances WHERE deployment_id = $1', [id]);
        rows.set(id, fresh[0]!);
        for (const [i, c] of counters.entries()) {
          c.spentCredits = Math.max(0, before[i]!.spent - (expired.givenBack.get(c.id) ?? 0));
          c.refused = before[i]!.refused;
        }
        applied = applyInOrder(fresh[0]!, indexes, terms);
      }
    }
    changes.push(...applied.changes);
    rows.set(id, applied.row);
  }

  const written = await writeBatch(tx, items, changes, rows, reportToMeter, commit, remembered, counters);
  for (const c of changes) {
    const result: BatchOutcome & { claimed: true } = {
      claimed: true,
      result: { found: true, deducted: c.deducted, usageId: c.kind === 'deduct' || c.kind === 'spend' ? c.usageId : null, ...c.after },
      cost: c.cost,
    };
    if (c.budget) result.result.budget = { id: c.budget.budgetId, resetsAt: c.budget.window.end };
    outcomes[c.index] = result;
  }
  // Each row is remembered with the budgets this batch counted with for its organization.
  return [
    outcomes as BatchOutcome[],
    {
      versions: written.balances.map((v) => {
        const row = rows.get(v.id)!;
        return { ...v, row, budgets: budgetsOf.get(row.organization_id) ?? NO_BUDGETS };
      }),
      windows: written.windowsVersion === null ? null : { counters, version: written.windowsVersion },
      now: batchNow,
    },
    opWindows,
  ];
}

const NO_BUDGETS: RememberedBudgets = Object.freeze([]);

/**
 * What a request asks by its fields: an owned record that spends its own hold is a spend (refused, its
 * row stays held; see claimsInvocation in engine/write.ts).
 */
function kindOf(it: BatchDeduction): Terms['kind'] {
  if (it.hold) return 'hold';
  if (it.release) return 'release';
  return it.owned && it.releaseReserved > 0 ? 'spend' : 'deduct';
}

/**
 * One request through the same plan, in the caller's transaction (a batch of one): the path of a
 * request the queue could not settle (an id seen before) or whose batch failed.
 */
export async function applyOne(tx: Transaction, item: BatchDeduction, reportToMeter: boolean): Promise<BatchOutcome> {
  const [outcomes] = await applyBatch(tx, [item], reportToMeter);
  return outcomes[0]!;
}

/**
 * The budget counters of the batch (docs/budgets.md): each deduction's and hold's windows, the windows
 * in progress that each release gives back to, and the ops' windows (an AI call's charge, a hold's
 * windows by id), locked in one order; set on the requests' terms. On remembered rows nothing is
 * locked: each window comes from what this instance last committed of it (its version goes to the
 * write, which refuses the batch if the row changed since), and a window not remembered sends the
 * batch to the locking path. Returns every counter, for the write and for a second run of the rule,
 * and each op's.
 */
async function budgetCounters(
  tx: Transaction,
  items: BatchDeduction[],
  terms: Terms[],
  byDeployment: Map<string, number[]>,
  rows: Map<string, BalanceRow>,
  budgetsOf: Map<string, readonly BudgetWithPeriod[]>,
  releasing: Map<number, string[]>,
  ops: ReadonlyArray<Pick<BatchOp, 'deploymentId' | 'budgets'>>,
  remembered: OptimisticPlan | undefined,
): Promise<{ all: BudgetCounter[]; opWindows: BudgetCounter[][] }> {
  const keysOf = new Map<number, CounterKey[]>();
  for (const [deploymentId, indexes] of byDeployment) {
    const row = rows.get(deploymentId)!;
    const budgets = budgetsOf.get(row.organization_id);
    if (!budgets) continue;
    const period = { start: row.period_start, end: row.period_end };
    for (const index of indexes) {
      const kind = terms[index]!.kind;
      if (kind !== 'deduct' && kind !== 'hold') continue;
      const it = items[index]!;
      const keys = countersFor(
        budgets,
        { organizationId: it.organizationId, deploymentId, apiKeyId: it.apiKeyId ?? null, endUserId: it.mcpUserId, toolName: it.toolName },
        it.now,
        period,
      );
      if (keys.length > 0) keysOf.set(index, keys);
    }
  }
  // An op's charge: its deployment's row was locked, not brought up to date (the op does that): a
  // period that has ended is the one the op's bringing up to date will give it (terms.ts periodAt).
  const ended = ops.flatMap((op) => {
    const row = rows.get(op.deploymentId);
    return op.budgets?.charge && row && row.period_end.getTime() <= op.budgets.charge.at.getTime() ? [op.deploymentId] : [];
  });
  const inputs = remembered ? new Map<string, PeriodInputs>() : await periodInputsOf(tx, [...new Set(ended)]);
  const opKeys = ops.map((op) => {
    const charge = op.budgets?.charge;
    const row = rows.get(op.deploymentId);
    if (!charge || !row) return [];
    const period: Window = periodAt(row, charge.at, inputs.get(op.deploymentId) ?? null);
    return countersFor(budgetsOf.get(charge.organizationId) ?? [], charge, charge.at, period, 'ai');
  });
  const releaseIds = [...releasing.values()].flat();
  const opIds = ops.flatMap((op) => op.budgets?.windows ?? []);
  if (keysOf.size === 0 && releaseIds.length === 0 && opIds.length === 0 && opKeys.every((k) => k.length === 0)) {
    return { all: [], opWindows: ops.map(() => []) };
  }
  if (remembered) return { all: rememberedCounters(remembered, keysOf, terms), opWindows: ops.map(() => []) };
  const { byKey, byId } = await lockCounters(tx, [...[...keysOf.values()].flat(), ...opKeys.flat()], [...releaseIds, ...opIds]);
  for (const [index, keys] of keysOf) terms[index]!.budgets = keys.map((k) => byKey.get(counterKey(k))!);
  for (const [index, ids] of releasing) {
    const now = items[index]!.now.getTime();
    terms[index]!.budgets = ids.map((id) => byId.get(id)).filter((c): c is BudgetCounter => c !== undefined && c.window.end.getTime() > now);
  }
  const opWindows = ops.map((op, i) => [
    ...opKeys[i]!.map((k) => byKey.get(counterKey(k))!),
    ...(op.budgets?.windows ?? []).map((id) => byId.get(id)).filter((c): c is BudgetCounter => c !== undefined),
  ]);
  return { all: [...byId.values()], opWindows };
}

/**
 * The counters of a batch on remembered rows (no releases or ops there), set on the requests' terms:
 * each window as this instance last committed it, with the limits of the budgets the rows' versions
 * counted with; its version noted for the write. A window not remembered (a new one, or one last
 * written elsewhere) needs the locking path. Requests that share a window share its counter.
 */
function rememberedCounters(remembered: OptimisticPlan, keysOf: Map<number, CounterKey[]>, terms: Terms[]): BudgetCounter[] {
  const counterOf = new Map<RememberedWindow, BudgetCounter>();
  for (const [index, keys] of keysOf) {
    const counters: BudgetCounter[] = new Array(keys.length);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const known = remembered.window(k.budget.id, k.subject, k.window.start);
      if (!known) throw new NotOptimistic();
      let counter = counterOf.get(known);
      if (!counter) {
        // The fields of lockCounters' counters, in their order (one object shape for the rule's code);
        // a batch on remembered rows holds no AI tokens.
        counter = {
          id: known.id,
          budgetId: k.budget.id,
          subject: k.subject,
          window: known.window,
          limitCredits: k.budget.limit_credits,
          limitAiTokens: null,
          block: k.budget.mode === 'block',
          spentCredits: known.spentCredits,
          startSpent: known.spentCredits,
          spentAiTokens: undefined,
          startAiTokens: undefined,
          refused: false,
          budget: k.budget,
        };
        remembered.windowVersions.set(counter.id, known.version);
        counterOf.set(known, counter);
      }
      counters[i] = counter;
    }
    terms[index]!.budgets = counters;
  }
  return [...counterOf.values()];
}
