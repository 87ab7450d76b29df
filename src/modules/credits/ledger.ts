import type { Queryable } from '../../db/client.js';

export type LedgerKind = 'grant' | 'deduct' | 'refund' | 'period_reset' | 'expire' | 'adjust';

export interface LedgerEntry {
  organizationId: string;
  deploymentId: string;
  kind: LedgerKind;
  /** The credits the event is about (negative for a deduction); may differ from the deltas where a bucket is unlimited or overdrawn by a downgrade. */
  amount: number;
  monthlyDelta: number;
  purchasedDelta: number;
  monthlyAfter: number | null;
  purchasedAfter: number;
  actor: string;
  usageId?: string | null;
  reason?: string | null;
  /** For a grant that lapses. */
  expiresAt?: Date | null;
  at: Date;
}

/** Append one ledger row inside the caller's transaction; returns its id. */
export async function appendLedger(tx: Queryable, e: LedgerEntry): Promise<number> {
  const rows = await tx.query<{ id: number }>(
    `INSERT INTO credit_ledger (organization_id, deployment_id, kind, amount, monthly_delta, purchased_delta,
       monthly_after, purchased_after, actor, usage_id, reason, expires_at, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id`,
    [
      e.organizationId,
      e.deploymentId,
      e.kind,
      e.amount,
      e.monthlyDelta,
      e.purchasedDelta,
      e.monthlyAfter,
      e.purchasedAfter,
      e.actor,
      e.usageId ?? null,
      e.reason ?? null,
      e.expiresAt ?? null,
      e.at,
    ],
  );
  return rows[0]!.id;
}

export interface Reconciliation {
  deployment_id: string;
  ledger_monthly: number;
  ledger_purchased: number;
  balance_monthly: number;
  balance_purchased: number;
  usage_credits: number;
  ledger_deducted: number;
}

/**
 * The ledger invariant (docs/metering.md, Buckets and the ledger), per deployment: the ledger sums to the balance in each bucket, and the
 * credits on usage records (less refunds) equal the deductions (less refunds) in the ledger. Payments
 * of credits_owed (reason `owed`) are not part of a usage record's quantity: credits/owed.ts
 * findOwedMismatches checks them against the records' credits_short.
 * Returns only the deployments where something disagrees.
 */
export async function findLedgerMismatches(db: Queryable, organizationId?: string): Promise<Reconciliation[]> {
  return db.query<Reconciliation>(
    `WITH l AS (
       SELECT deployment_id, COALESCE(SUM(monthly_delta), 0)::bigint AS ledger_monthly,
              COALESCE(SUM(purchased_delta), 0)::bigint AS ledger_purchased,
              COALESCE(-SUM(amount) FILTER (WHERE kind IN ('deduct', 'refund') AND usage_id IS NOT NULL
                                             AND reason IS DISTINCT FROM 'owed'), 0)::bigint AS ledger_deducted
       FROM credit_ledger GROUP BY deployment_id),
     -- The usage side from the rollups (docs/usage-analytics.md, Rollups): they count every record ever
     -- written, also those the retention deleted since (test/usage-rollups.test.ts checks them against the records).
     u AS (
       SELECT deployment_id, COALESCE(SUM(credits - refunded), 0)::bigint AS usage_credits
       FROM usage_rollup_days GROUP BY deployment_id)
     SELECT b.deployment_id,
            COALESCE(l.ledger_monthly, 0)::bigint AS ledger_monthly,
            COALESCE(l.ledger_purchased, 0)::bigint AS ledger_purchased,
            (CASE WHEN b.monthly_allocation IS NULL THEN 0 ELSE GREATEST(0, b.monthly_allocation - b.monthly_used) END)::bigint AS balance_monthly,
            b.purchased_balance AS balance_purchased,
            COALESCE(u.usage_credits, 0)::bigint AS usage_credits,
            COALESCE(l.ledger_deducted, 0)::bigint AS ledger_deducted
     FROM credit_balances b
     LEFT JOIN l ON l.deployment_id = b.deployment_id
     LEFT JOIN u ON u.deployment_id = b.deployment_id
     WHERE ($1::uuid IS NULL OR b.organization_id = $1::uuid)
       AND (COALESCE(l.ledger_monthly, 0) <> (CASE WHEN b.monthly_allocation IS NULL THEN 0 ELSE GREATEST(0, b.monthly_allocation - b.monthly_used) END)
         OR COALESCE(l.ledger_purchased, 0) <> b.purchased_balance
         OR COALESCE(u.usage_credits, 0) <> COALESCE(l.ledger_deducted, 0)
         OR b.purchased_balance < 0 OR b.reserved < 0)`,
    [organizationId ?? null],
  );
}
