import type { Ctx } from '../../context.js';
import { pageOf } from '../../http/envelope.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { authorize } from '../organizations/rbac.js';

interface AuditRow {
  id: string;
  organization_id: string;
  user_id: string | null;
  actor: string;
  action: string;
  resource_type: string;
  resource_id: string | null;
  metadata: Record<string, unknown>;
  ip_address: string | null;
  user_agent: string | null;
  created_at: Date;
}

export interface AuditLogView extends Omit<AuditRow, 'created_at'> {
  created_at: string;
}

/**
 * An organization's audit log (audit.read: owners and admins; API keys need the admin scope), newest
 * first, keyset-paginated over (created_at, id) so rows written while a client pages neither repeat
 * nor go missing. Rows without an organization (sign-ins, profile changes) belong to no log here.
 */
export async function listAuditLogs(
  ctx: Ctx,
  input: {
    organizationId: string;
    limit: number;
    cursor: KeysetPosition | null;
    action?: string | undefined;
    resourceType?: string | undefined;
  },
): Promise<{ items: AuditLogView[]; next: string | null }> {
  await authorize(ctx, input.organizationId, 'audit.read');
  const rows = await ctx.db.query<AuditRow>(
    `SELECT id, organization_id, user_id, actor, action, resource_type, resource_id, metadata, ip_address, user_agent, created_at
     FROM audit_logs
     WHERE organization_id = $1
       AND ($2::text IS NULL OR action = $2::text)
       AND ($3::text IS NULL OR resource_type = $3::text)
       AND ($4::timestamptz IS NULL OR (created_at, id) < ($4::timestamptz, $5::uuid))
     ORDER BY created_at DESC, id DESC LIMIT $6`,
    [
      input.organizationId,
      input.action ?? null,
      input.resourceType ?? null,
      input.cursor?.at ?? null,
      input.cursor?.id ?? null,
      input.limit + 1,
    ],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return { items: items.map((r) => ({ ...r, created_at: r.created_at.toISOString() })), next };
}
