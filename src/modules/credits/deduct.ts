import { randomUUID } from 'node:crypto';
import type { Deps } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { MONTHLY_THRESHOLD_CTE } from '../quotas/thresholds.js';
import { METER_OUTBOX_CTE } from './meter-outbox.js';
import { expireReservations } from './reservations.js';
import { syncBalance } from './service.js';
import { monthlyRemaining } from './terms.js';

/**
 * The hot path of record-usage: one statement, so one round trip and one implicit transaction.
 * It locks the balance row (FOR UPDATE returns the newest version after any wait), splits the cost
 * between the monthly bucket and purchased credits, refuses when the spendable balance (less other
 * holders' reservations) is short, and writes the ledger row and the usage record with it.
 * Crossing 80 % / 100 % of the monthly allocation writes a `quota.threshold` event in the same statement,
 * and with meter reporting on, a subscribed organization's deduction its meter event (credits/meter-outbox.ts).
 * A row whose sync_before has passed is not touched (found = 0): the caller syncs it and retries.
 */
const DEDUCT_SQL = `
WITH cur AS (
  SELECT deployment_id, organization_id, monthly_allocation, monthly_used, purchased_balance, reserved, period_start, period_end, purchased_consumed,
         LEAST($2::bigint, GREATEST(0, COALESCE(monthly_allocation - monthly_used, $2::bigint))) AS m_take
  FROM credit_balances
  WHERE deployment_id = $1::uuid AND sync_before > $3::timestamptz
  FOR UPDATE
), upd AS (
  UPDATE credit_balances b
  SET monthly_used = cur.monthly_used + cur.m_take,
      purchased_balance = cur.purchased_balance - ($2::bigint - cur.m_take),
      purchased_consumed = cur.purchased_consumed + ($2::bigint - cur.m_take),
      reserved = cur.reserved - $10::bigint,
      updated_at = $3::timestamptz
  FROM cur
  WHERE b.deployment_id = cur.deployment_id
    AND (cur.monthly_allocation IS NULL
         OR GREATEST(0, cur.monthly_allocation - cur.monthly_used) + cur.purchased_balance - (cur.reserved - $10::bigint) >= $2::bigint)
  RETURNING b.deployment_id, b.organization_id, b.monthly_allocation, b.monthly_used, b.purchased_balance, b.reserved, cur.m_take
), led AS (
  INSERT INTO credit_ledger (organization_id, deployment_id, kind, amount, monthly_delta, purchased_delta,
                             monthly_after, purchased_after, actor, usage_id, created_at)
  SELECT organization_id, deployment_id, 'deduct', -$2::bigint,
         CASE WHEN monthly_allocation IS NULL THEN 0 ELSE -m_take END,
         -($2::bigint - m_take),
         CASE WHEN monthly_allocation IS NULL THEN NULL ELSE GREATEST(0, monthly_allocation - monthly_used) END,
         purchased_balance, $8::text, $11::uuid, $3::timestamptz
  FROM upd
  RETURNING id
), ins AS (
  INSERT INTO usage_records (id, organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, metadata,
                             success, error, ledger_id, invocation_id, monthly_taken, purchased_taken, period_start, "timestamp")
  SELECT $11::uuid, cur.organization_id, cur.deployment_id, $4::text,
         CASE WHEN upd.deployment_id IS NULL THEN 0 ELSE $2::bigint END,
         $5::text, $6::text, $7::jsonb,
         upd.deployment_id IS NOT NULL,
         CASE WHEN upd.deployment_id IS NULL THEN 'insufficient_credits' END,
         (SELECT id FROM led), $9::text,
         COALESCE(upd.m_take, 0), CASE WHEN upd.deployment_id IS NULL THEN 0 ELSE $2::bigint - upd.m_take END,
         cur.period_start, $3::timestamptz
  FROM cur LEFT JOIN upd ON true
  WHERE upd.deployment_id IS NOT NULL OR $12::boolean
  RETURNING id
), inv AS (
  -- An idempotent record: the invocation turns 'recorded' with its answer in this statement, so the
  -- balance row's lock is held from here to COMMIT only (no round trip after the deduction).
  UPDATE invocations
  SET status = 'recorded', usage_id = $11::uuid, request_hash = $14::text, reserved_amount = 0,
      reservation_expires_at = NULL, updated_at = $3::timestamptz,
      response = jsonb_build_object(
        'success', true, 'credits_used', $2::bigint,
        'credits_remaining', (SELECT CASE WHEN monthly_allocation IS NULL THEN NULL
                                     ELSE GREATEST(0, GREATEST(0, monthly_allocation - monthly_used) + purchased_balance - reserved) END
                              FROM upd),
        'error', NULL, 'usage_id', $11::uuid, 'invocation_id', $9::text)
  WHERE $13::boolean AND deployment_id = $1::uuid AND invocation_id = $9::text AND EXISTS (SELECT 1 FROM upd)
  RETURNING invocation_id
), ${METER_OUTBOX_CTE}, ${MONTHLY_THRESHOLD_CTE}
SELECT (SELECT count(*) FROM cur)::int AS found,
       (upd.deployment_id IS NOT NULL) AS deducted,
       COALESCE(upd.monthly_allocation, cur.monthly_allocation) AS monthly_allocation,
       COALESCE(upd.monthly_used, cur.monthly_used) AS monthly_used,
       COALESCE(upd.purchased_balance, cur.purchased_balance) AS purchased_balance,
       COALESCE(upd.reserved, cur.reserved) AS reserved,
       (SELECT id FROM ins) AS usage_id
FROM (SELECT 1) AS one LEFT JOIN cur ON true LEFT JOIN upd ON true`;

export interface DeductInput {
  deploymentId: string;
  cost: number;
  now: Date;
  action: string;
  toolName: string;
  mcpUserId: string | null;
  metadata: unknown;
  actor: string;
  invocationId: string | null;
  /** Credits this deployment's own reservation held for this call; released by the same statement. */
  releaseReserved: number;
  /** Keep a success=false usage record when the balance is short (false for an attempt that will be retried). */
  recordFailure: boolean;
  /**
   * With an invocation id whose row this transaction holds: on success, mark it recorded with its
   * answer and this request hash in the same statement.
   */
  recordInvocation?: { requestHash: string };
  /** STRIPE_METER_EVENT_NAME is set: a subscribed organization's deduction goes to the meter outbox. */
  reportToMeter?: boolean;
}

export interface DeductResult {
  /** false: the balance row is stale (period or override boundary passed) — sync it and try again. */
  found: boolean;
  deducted: boolean;
  usageId: string | null;
  monthly_allocation: number | null;
  monthly_used: number;
  purchased_balance: number;
  reserved: number;
}

export async function deduct(db: Queryable, input: DeductInput): Promise<DeductResult> {
  const rows = await db.query<Omit<DeductResult, 'found' | 'usageId'> & { found: number; usage_id: string | null }>(
    DEDUCT_SQL,
    [
      input.deploymentId,
      input.cost,
      input.now,
      input.action,
      input.toolName,
      input.mcpUserId,
      input.metadata === undefined || input.metadata === null ? null : JSON.stringify(input.metadata),
      input.actor,
      input.invocationId,
      input.releaseReserved,
      randomUUID(),
      input.recordFailure,
      input.recordInvocation !== undefined && input.invocationId !== null,
      input.recordInvocation?.requestHash ?? null,
      input.reportToMeter === true,
    ],
    'credits_deduct',
  );
  const row = rows[0]!;
  return {
    found: row.found > 0,
    deducted: row.deducted,
    usageId: row.usage_id,
    monthly_allocation: row.monthly_allocation,
    monthly_used: row.monthly_used ?? 0,
    purchased_balance: row.purchased_balance ?? 0,
    reserved: row.reserved ?? 0,
  };
}

/**
 * The deduction with its two slow paths: a stale row is synced first; when other reservations hold
 * credits, overdue ones are released before a refusal is final (the first attempt then keeps no
 * failed usage record, so a refusal is recorded once).
 */
export async function deductWithRetry(
  ctx: Pick<Deps, 'config' | 'db'>,
  db: Queryable,
  input: Omit<DeductInput, 'recordFailure'>,
  heldByOthers: boolean,
): Promise<DeductResult> {
  const reportToMeter = ctx.config.stripeMeterEventName !== undefined;
  const attempt = { ...input, reportToMeter, recordFailure: !heldByOthers };
  let result = await deduct(db, attempt);
  if (!result.found) {
    if (db === ctx.db) await ctx.db.transaction((tx) => syncBalance(tx, input.deploymentId, input.now, input.actor));
    else await syncBalance(db, input.deploymentId, input.now, input.actor);
    result = await deduct(db, attempt);
    if (!result.found) throw new Error(`balance of deployment ${input.deploymentId} could not be brought up to date`);
  }
  if (!result.deducted && heldByOthers) {
    // Not the reservation this deduction spends (releaseReserved): it is freed by the deduction itself.
    await expireReservations(db, input.now, input.deploymentId, input.releaseReserved > 0 ? input.invocationId : null);
    result = await deduct(db, { ...input, reportToMeter, recordFailure: true });
  }
  return result;
}

/** What a deduction leaves spendable (monthly remaining + purchased − reservations); null = unlimited. */
export function remainingAfter(r: DeductResult): number | null {
  const monthly = monthlyRemaining(r.monthly_allocation, r.monthly_used);
  return monthly === null ? null : Math.max(0, monthly + r.purchased_balance - r.reserved);
}

/** A usage record for a call that was refused before any balance was looked at (sandbox, MCP disabled…). */
export async function recordDeniedUsage(
  db: Queryable,
  input: Omit<DeductInput, 'cost' | 'releaseReserved' | 'actor' | 'recordFailure'> & { organizationId: string; reason: string },
): Promise<string> {
  const rows = await db.query<{ id: string }>(
    `INSERT INTO usage_records (organization_id, deployment_id, metric, quantity, tool_name, mcp_user_id, metadata,
       success, error, invocation_id, "timestamp")
     VALUES ($1, $2, $3, 0, $4, $5, $6, false, $7, $8, $9) RETURNING id`,
    [
      input.organizationId,
      input.deploymentId,
      input.action,
      input.toolName,
      input.mcpUserId,
      input.metadata === undefined || input.metadata === null ? null : JSON.stringify(input.metadata),
      input.reason,
      input.invocationId,
      input.now,
    ],
    'usage_denied_insert',
  );
  return rows[0]!.id;
}
