import type { Queryable } from '../../db/client.js';
import { emitThresholds } from '../quotas/thresholds.js';
import { appendLedger } from './ledger.js';
import { type BalanceRow, purchasedFloor } from './service.js';
import { ledgerMonthly, monthlyRemaining } from './terms.js';

/**
 * What a provider's over-report left unpaid (docs/ai-proxy.md, "What a provider's over-report costs").
 * An AI settle that cannot charge all it is due adds the rest to the balance row's `credits_owed` (and
 * the usage record's `credits_short`). Every path that adds credits to a bucket (a period reset or a
 * larger allocation in syncBalance, a grant in changePurchased, a refund, an operator's usage reset)
 * calls `payOwed` with what it added, under the balance row's lock and in its own transaction: the
 * added credits pay what is owed first. This file is the rule's one place.
 */

/** The ledger row reason of an owed payment (findOwedMismatches counts the payments by it). */
export const OWED_REASON = 'owed';

/** Credits just added to the buckets; `monthly` null: the monthly bucket became unlimited. */
export interface Added {
  monthly: number | null;
  purchased: number;
}

type OwedBalance = Pick<
  BalanceRow,
  'monthly_allocation' | 'monthly_used' | 'purchased_balance' | 'reserved' | 'ai_credits_reserved' | 'credits_owed'
>;

/**
 * How much of what was added pays what is owed: the monthly bucket first (it lapses at the period's
 * end), then purchased credits; never more than was added, and never what open holds were promised
 * (a deduction's rule: monthly remaining + purchased − reserved; purchased credits only down to
 * purchasedFloor). The row is locked and current, with the addition already applied.
 */
export function owedPayment(b: OwedBalance, added: Added): { monthly: number; purchased: number } {
  const owed = b.credits_owed;
  if (owed <= 0) return { monthly: 0, purchased: 0 };
  const monthlyLeft = monthlyRemaining(b.monthly_allocation, b.monthly_used);
  const spendable = monthlyLeft === null ? Number.POSITIVE_INFINITY : monthlyLeft + b.purchased_balance - b.reserved;
  if (spendable <= 0) return { monthly: 0, purchased: 0 };
  const monthly = Math.max(0, Math.min(owed, added.monthly ?? owed, monthlyLeft ?? owed, spendable));
  const after = { ...b, monthly_used: b.monthly_used + monthly };
  const purchased = Math.max(0, Math.min(owed - monthly, added.purchased, purchasedFloor(after), spendable - monthly));
  return { monthly, purchased };
}

/**
 * Which usage records a payment of `pay` pays, oldest unpaid first. Payments go oldest first, so the
 * unpaid ones are always the newest: walking the owing records newest first, they are those that
 * make up `owed`. `newestFirst` must reach back far enough to cover `owed`.
 */
export function owedPieces(newestFirst: Array<{ id: string; short: number }>, owed: number, pay: number): Array<{ usageId: string; amount: number }> {
  const unpaid: Array<{ usageId: string; amount: number }> = [];
  let left = owed;
  for (const r of newestFirst) {
    if (left <= 0) break;
    const take = Math.min(r.short, left);
    if (take > 0) unpaid.push({ usageId: r.id, amount: take });
    left -= take;
  }
  if (left > 0) throw new Error(`credits_owed ${owed} is more than the usage records' unpaid shortfall (${owed - left})`);
  const pieces: Array<{ usageId: string; amount: number }> = [];
  let rest = pay;
  for (const u of unpaid.reverse()) {
    if (rest <= 0) break;
    const amount = Math.min(u.amount, rest);
    pieces.push({ usageId: u.usageId, amount });
    rest -= amount;
  }
  return pieces;
}

/** How far back payOwed reads owing records; unpaid ones are bounded by the AI calls in flight when the debt began. */
const OWING_READ_LIMIT = 10_000;

/**
 * Pay what is owed from credits just added (the caller's transaction, balance row locked and current,
 * the addition applied): one `deduct` ledger row with reason `owed` per usage record paid, each naming
 * it. Returns the row after the payment.
 */
export async function payOwed(
  tx: Queryable,
  row: BalanceRow,
  added: Added,
  input: { actor: string; now: Date },
): Promise<BalanceRow> {
  const { monthly, purchased } = owedPayment(row, added);
  const total = monthly + purchased;
  if (total <= 0) return row;
  const owing = await tx.query<{ id: string; credits_short: number }>(
    `SELECT id, credits_short FROM usage_records WHERE deployment_id = $1 AND credits_short > 0
     ORDER BY "timestamp" DESC, id DESC LIMIT $2`,
    [row.deployment_id, OWING_READ_LIMIT],
  );
  const pieces = owedPieces(
    owing.map((r) => ({ id: r.id, short: r.credits_short })),
    row.credits_owed,
    total,
  );
  const updated = await tx.query<BalanceRow>(
    `UPDATE credit_balances SET monthly_used = monthly_used + $2, purchased_balance = purchased_balance - $3,
       purchased_consumed = purchased_consumed + $3, credits_owed = credits_owed - $2 - $3, updated_at = $4
     WHERE deployment_id = $1 RETURNING *`,
    [row.deployment_id, monthly, purchased, input.now],
  );
  const after = updated[0]!;
  // The rows' running balances: each piece takes the monthly bucket first, as the payment did.
  let monthlyLeft = monthly;
  let used = row.monthly_used;
  let purchasedNow = row.purchased_balance;
  for (const piece of pieces) {
    const m = Math.min(piece.amount, monthlyLeft);
    const p = piece.amount - m;
    const monthlyBefore = ledgerMonthly(row.monthly_allocation, used);
    monthlyLeft -= m;
    used += m;
    purchasedNow -= p;
    await appendLedger(tx, {
      organizationId: row.organization_id,
      deploymentId: row.deployment_id,
      kind: 'deduct',
      amount: -piece.amount,
      monthlyDelta: ledgerMonthly(row.monthly_allocation, used) - monthlyBefore,
      purchasedDelta: -p,
      monthlyAfter: monthlyRemaining(row.monthly_allocation, used),
      purchasedAfter: purchasedNow,
      actor: input.actor,
      usageId: piece.usageId,
      reason: OWED_REASON,
      at: input.now,
    });
  }
  await emitThresholds(tx, {
    organizationId: row.organization_id,
    deploymentId: row.deployment_id,
    quota: 'monthly_credits',
    before: row.monthly_used,
    after: after.monthly_used,
    limit: after.monthly_allocation,
    periodStart: after.period_start,
    periodEnd: after.period_end,
    now: input.now,
  });
  return after;
}

export interface OwedMismatch {
  deployment_id: string;
  credits_owed: number;
  usage_short: number;
  owed_paid: number;
}

/**
 * Next to findLedgerMismatches: every deployment's `credits_owed` equals its usage records'
 * `credits_short` less its owed payments (ledger rows `deduct` with reason `owed`), and no record
 * was paid more than it owed. Returns only the deployments where something disagrees.
 */
export async function findOwedMismatches(db: Queryable, organizationId?: string): Promise<OwedMismatch[]> {
  return db.query<OwedMismatch>(
    `WITH s AS (
       SELECT deployment_id, SUM(credits_short)::bigint AS usage_short FROM usage_records WHERE credits_short > 0 GROUP BY deployment_id),
     p AS (
       SELECT deployment_id, usage_id, (-SUM(amount))::bigint AS paid FROM credit_ledger
       WHERE kind = 'deduct' AND reason = '${OWED_REASON}' GROUP BY deployment_id, usage_id),
     over AS (
       SELECT p.deployment_id FROM p LEFT JOIN usage_records u ON u.id = p.usage_id
       WHERE u.id IS NULL OR p.paid > u.credits_short OR p.paid <= 0),
     paid AS (SELECT deployment_id, SUM(paid)::bigint AS owed_paid FROM p GROUP BY deployment_id)
     SELECT b.deployment_id, b.credits_owed, COALESCE(s.usage_short, 0)::bigint AS usage_short,
            COALESCE(paid.owed_paid, 0)::bigint AS owed_paid
     FROM credit_balances b
     LEFT JOIN s ON s.deployment_id = b.deployment_id
     LEFT JOIN paid ON paid.deployment_id = b.deployment_id
     WHERE ($1::uuid IS NULL OR b.organization_id = $1::uuid)
       AND (b.credits_owed <> COALESCE(s.usage_short, 0) - COALESCE(paid.owed_paid, 0)
         OR b.deployment_id IN (SELECT deployment_id FROM over))`,
    [organizationId ?? null],
  );
}
