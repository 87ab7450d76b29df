import type { Ctx } from '../../context.js';
import { AppError, NotFoundError } from '../../errors.js';
import { isUuid } from '../../lib/ids.js';

/** The seeded permissions (migrations/0005): `<resource>.<action>`. */
export type Permission =
  | 'organization.read'
  | 'organization.update'
  | 'organization.delete'
  | 'members.read'
  | 'members.invite'
  | 'members.update'
  | 'members.remove'
  | 'api_keys.read'
  | 'api_keys.manage'
  | 'deployments.read'
  | 'deployments.manage'
  | 'billing.read'
  | 'billing.manage'
  | 'audit.read'
  | 'webhooks.read'
  | 'webhooks.manage'
  | 'templates.read'
  | 'templates.manage'
  | 'usage.read';

export type Role = 'owner' | 'admin' | 'member' | 'viewer';

/**
 * The scope rule for API keys (docs/accounts.md, Roles and permissions): reading needs `read`, changing needs `write`, and member, key,
 * billing and webhook management need `admin`.
 */
export function scopeFor(permission: Permission): 'read' | 'write' | 'admin' {
  if (permission.endsWith('.read')) return permission === 'audit.read' ? 'admin' : 'read';
  if (/^(members|api_keys|billing|webhooks)\./.test(permission)) return 'admin';
  return 'write';
}

export interface Authorization {
  /** The caller's role, or null for an API key. */
  role: Role | null;
  userId: string | null;
}

/**
 * The one authorization check (docs/accounts.md, Roles and permissions): a user needs a membership whose role grants the permission
 * (or a per-user override granting it, and no override denying it); an API key needs its own
 * organization and the scope the permission asks for. Another organization is "not found", so ids
 * cannot be probed; a member without the permission gets 403 FORBIDDEN.
 */
export async function authorize(ctx: Ctx, organizationId: string, permission: Permission): Promise<Authorization> {
  if (!isUuid(organizationId)) throw new NotFoundError('Organization');
  if (ctx.actor.type === 'api_key') {
    if (ctx.actor.organizationId !== organizationId) throw new NotFoundError('Organization');
    // docs/accounts.md, Organizations: deleting is owner only, and a key is nobody's owner.
    if (permission === 'organization.delete') throw new AppError('FORBIDDEN', 'Only an owner, signed in, can delete the organization');
    const rows = await ctx.db.query<{ scopes: string[] }>('SELECT scopes FROM api_keys WHERE id = $1', [ctx.actor.apiKeyId]);
    const needed = scopeFor(permission);
    if (!rows[0]?.scopes.includes(needed)) {
      throw new AppError('FORBIDDEN', `This API key lacks the "${needed}" scope needed for ${permission}`);
    }
    return { role: null, userId: null };
  }
  if (ctx.actor.type !== 'user') throw new AppError('FORBIDDEN', 'Not allowed');
  const rows = await ctx.db.query<{ role: Role; by_role: boolean; override: boolean | null }>(
    `SELECT m.role,
            EXISTS (SELECT 1 FROM role_permissions rp JOIN roles r ON r.id = rp.role_id JOIN permissions p ON p.id = rp.permission_id
                    WHERE r.name = m.role AND p.name = $3) AS by_role,
            (SELECT up.granted FROM user_permissions up JOIN permissions p ON p.id = up.permission_id
             WHERE up.organization_id = m.organization_id AND up.user_id = m.user_id AND p.name = $3) AS override
     FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
     WHERE m.organization_id = $1 AND m.user_id = $2`,
    [organizationId, ctx.actor.userId, permission],
    'authorize',
  );
  const row = rows[0];
  if (!row) throw new NotFoundError('Organization');
  const allowed = row.override ?? row.by_role;
  if (!allowed) throw new AppError('FORBIDDEN', `Your role (${row.role}) does not allow ${permission}`);
  return { role: row.role, userId: ctx.actor.userId };
}
