import type { Ctx } from '../../context.js';
import { AppError, NotFoundError } from '../../errors.js';
import { expireReservations, type InvocationRow, releaseInvocationHold } from '../credits/index.js';

/** Who may act on a deployment's invocations: an API key's organization, or the service key (any). */
export interface Scope {
  deploymentId: string;
  /** Set for API-key callers: rows of another organization are "not found". */
  organizationId: string | null;
}

export interface InvocationView {
  invocation_id: string;
  deployment_id: string;
  status: 'reserved' | 'recorded' | 'released' | 'expired' | 'refunded' | 'denied';
  tool_name: string;
  reserved_credits: number;
  reservation_expires_at: string | null;
  usage_id: string | null;
  credits_used: number;
  credits_refunded: number;
  created_at: string;
  updated_at: string;
}

export async function getInvocation(ctx: Ctx, scope: Scope, invocationId: string): Promise<InvocationView> {
  const now = ctx.clock.now();
  // Report an overdue reservation as what it is, not as still held.
  await expireReservations(ctx.db, now, scope.deploymentId);
  const rows = await ctx.db.query<InvocationRow & { quantity: number | null; refunded: number | null }>(
    `SELECT i.*, u.quantity, u.refunded FROM invocations i
     LEFT JOIN usage_records u ON u.id = i.usage_id
     WHERE i.deployment_id = $1 AND i.invocation_id = $2 AND ($3::uuid IS NULL OR i.organization_id = $3::uuid)
       AND i.status <> 'pending'`,
    [scope.deploymentId, invocationId, scope.organizationId],
  );
  const row = rows[0];
  if (!row) throw new NotFoundError('Invocation');
  return {
    invocation_id: row.invocation_id,
    deployment_id: row.deployment_id,
    status: row.status as InvocationView['status'],
    tool_name: row.tool_name,
    reserved_credits: row.status === 'reserved' ? row.reserved_amount : 0,
    reservation_expires_at: row.reservation_expires_at?.toISOString() ?? null,
    usage_id: row.usage_id,
    credits_used: row.quantity ?? 0,
    credits_refunded: row.refunded ?? 0,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** Give back a reservation's held credits (the tool failed or was cancelled). Releasing twice is harmless. */
export async function releaseInvocation(
  ctx: Ctx,
  scope: Scope,
  invocationId: string,
): Promise<{ invocation_id: string; status: string; released_credits: number }> {
  const organizationId = await assertInvocationInScope(ctx, scope, invocationId);
  const released = await releaseInvocationHold(ctx, { deployment_id: scope.deploymentId, organization_id: organizationId }, invocationId);
  if (released !== null) {
    ctx.metrics.reservations.inc({ outcome: 'released' });
    return { invocation_id: invocationId, status: 'released', released_credits: released };
  }
  const view = await getInvocation(ctx, scope, invocationId);
  if (view.status === 'recorded' || view.status === 'refunded') {
    throw new AppError('CONFLICT', `Invocation ${invocationId} was already recorded; refund its usage instead`);
  }
  return { invocation_id: invocationId, status: view.status, released_credits: 0 };
}

/** The invocation's organization, or 404 when the caller may not see it. */
async function assertInvocationInScope(ctx: Ctx, scope: Scope, invocationId: string): Promise<string> {
  const rows = await ctx.db.query<{ organization_id: string }>(
    `SELECT organization_id FROM invocations WHERE deployment_id = $1 AND invocation_id = $2
       AND ($3::uuid IS NULL OR organization_id = $3::uuid) AND status <> 'pending'`,
    [scope.deploymentId, invocationId, scope.organizationId],
  );
  if (rows.length === 0) throw new NotFoundError('Invocation');
  return rows[0]!.organization_id;
}
