import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import type { BatchDeduction } from './engine/types.js';
import { apiKeyOf, recordInvocation, type StoredRecordAnswer } from './invocations.js';
import type { DeductResult } from './rules.js';

/** A metered use of a deployment: what a usage record and its deduction are made of. */
export interface UsageRequest {
  deploymentId: string;
  organizationId: string;
  cost: number;
  now: Date;
  /** The usage record's metric. */
  action: string;
  toolName: string;
  mcpUserId: string | null;
  metadata: unknown;
  /** The ledger row's actor. */
  actor: string;
}

export type RecordedUsage =
  | { replayed: true; answer: StoredRecordAnswer }
  | { replayed: false; cost: number; result: DeductResult };

/**
 * Record usage and deduct its credits (docs/metering.md): once per invocation id when one is given
 * (docs/metering.md, Idempotency). The common cases — no id, a fresh id, the record of a held
 * reservation (spent at the price it was held for) — go through the queue's group commit; any other id
 * seen before (a retry, a reuse, an overdue reservation) takes the invocation path, which replays,
 * refuses or starts over. Either way the deduction is the money engine's (credits/engine/).
 */
export async function recordUsage(
  ctx: Ctx,
  usage: UsageRequest,
  idempotency?: { invocationId: string; requestHash: string },
): Promise<RecordedUsage> {
  // Every field a request takes, set once: adding a field to a spread object is V8's slow path
  // (about 2 µs on Node 20), overwriting one is not.
  const request: BatchDeduction = {
    deploymentId: usage.deploymentId,
    organizationId: usage.organizationId,
    cost: usage.cost,
    now: usage.now,
    action: usage.action,
    toolName: usage.toolName,
    mcpUserId: usage.mcpUserId,
    metadata: usage.metadata,
    actor: usage.actor,
    apiKeyId: apiKeyOf(ctx),
    invocationId: idempotency?.invocationId ?? null,
    releaseReserved: 0,
    claimInvocation: idempotency ? { requestHash: idempotency.requestHash } : undefined,
  };
  const batched = await ctx.deductions.submit(request);
  if (batched.claimed) return { replayed: false, cost: batched.cost, result: batched.result };
  if (!idempotency) throw new Error('a deduction without an invocation id is always settled by its batch');
  const recorded = await recordInvocation(ctx, { ...request, invocationId: idempotency.invocationId, claimInvocation: { requestHash: idempotency.requestHash } });
  if (recorded.replayed) return recorded;
  return { replayed: false, cost: recorded.cost, result: recorded.deducted };
}

/** A usage record for a call that was refused before any balance was looked at (sandbox, MCP disabled…). */
export async function recordDeniedUsage(
  db: Queryable,
  input: Omit<UsageRequest, 'cost' | 'actor'> & { invocationId: string | null; reason: string },
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
      // No metadata: a refusal costs nothing, so its 16 KiB would be storage for free (docs/metering.md).
      null,
      input.reason,
      input.invocationId,
      input.now,
    ],
    'usage_denied_insert',
  );
  return rows[0]!.id;
}
