import { type Ctx, actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';

export interface AuditEntry {
  organizationId: string | null;
  action: string;
  resourceType: string;
  resourceId: string | null;
  metadata?: Record<string, unknown>;
}

/**
 * Write one audit row inside the caller's transaction (STYLE rule 3): if the change rolls back, so
 * does its audit row, and a failed audit write rolls back the change.
 */
export async function writeAudit(tx: Queryable, ctx: Ctx, entry: AuditEntry): Promise<void> {
  const userId = ctx.actor.type === 'user' ? ctx.actor.userId : null;
  const actor = actorLabel(ctx.actor);
  await tx.query(
    `INSERT INTO audit_logs (organization_id, user_id, actor, action, resource_type, resource_id, metadata, ip_address, user_agent, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [
      entry.organizationId,
      userId,
      actor,
      entry.action,
      entry.resourceType,
      entry.resourceId,
      JSON.stringify(entry.metadata ?? {}),
      ctx.ip ?? null,
      ctx.userAgent ?? null,
      ctx.clock.now(),
    ],
  );
}
