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
  /** An API key's: the member it acts for (its creator, with their role now); null for a key the operator made. */
  keyCreator?: { userId: string; role: Role } | null;
}

/**
 * Whether the member `m` holds a permission now: their override, else their role's grant. The
 * organization and the permission are SQL expressions (a parameter, or a column of the row).
 */
export const holdsSql = (organization: string, permission: string): string => `COALESCE(
  (SELECT up.granted FROM user_permissions up JOIN permissions p ON p.id = up.permission_id
   WHERE up.organization_id = ${organization} AND up.user_id = m.user_id AND p.name = ${permission}),
  EXISTS (SELECT 1 FROM role_permissions rp JOIN roles r ON r.id = rp.role_id JOIN permissions p ON p.id = rp.permission_id
          WHERE r.name = m.role AND p.name = ${permission}))`;

/** $1 the organization, $3 the permission. */
const HOLDS = holdsSql('$1', '$3');

/**
 * The one authorization check (docs/accounts.md, Roles and permissions): a user needs a membership whose role grants the permission
 * (or a per-user override granting it, and no override denying it); an API key needs its own
 * organization, the scope the permission asks for, and — made by a member — that member holding the
 * permission now: a key never holds more than its creator (docs/accounts.md, Powers). Another
 * organization is "not found", so ids cannot be probed; a member without the permission gets 403 FORBIDDEN.
 */
export async function authorize(ctx: Ctx, given: string, permission: Permission): Promise<Authorization> {
  if (!isUuid(given)) throw new NotFoundError('Organization');
  // Compared as a string with the key's own organization: in lower case, as the database writes it (docs/input.md, UUID ids).
  const organizationId = given.toLowerCase();
  if (ctx.actor.type === 'api_key') {
    if (ctx.actor.organizationId !== organizationId) throw new NotFoundError('Organization');
    // docs/accounts.md, Organizations: deleting is owner only, and a key is nobody's owner.
    if (permission === 'organization.delete') throw new AppError('FORBIDDEN', 'Only an owner, signed in, can delete the organization');
    const rows = await ctx.db.query<{ scopes: string[]; created_by: string | null; role: Role | null; holds: boolean | null }>(
      `SELECT k.scopes, k.created_by, m.role, CASE WHEN m.user_id IS NULL THEN NULL ELSE ${HOLDS} END AS holds
       FROM api_keys k LEFT JOIN organization_members m ON m.organization_id = k.organization_id AND m.user_id = k.created_by
       WHERE k.id = $2 AND k.organization_id = $1`,
      [organizationId, ctx.actor.apiKeyId, permission],
      'authorize_key',
    );
    const key = rows[0];
    const needed = scopeFor(permission);
    if (!key?.scopes.includes(needed)) {
      throw new AppError('FORBIDDEN', `This API key lacks the "${needed}" scope needed for ${permission}`);
    }
    if (key.created_by === null) return { role: null, userId: null, keyCreator: null };
    if (key.role === null || !key.holds) {
      throw new AppError('FORBIDDEN', `This API key acts for a member who does not hold ${permission}: a key never holds more than its creator`);
    }
    return { role: null, userId: null, keyCreator: { userId: key.created_by, role: key.role } };
  }
  if (ctx.actor.type !== 'user') throw new AppError('FORBIDDEN', 'Not allowed');
  const rows = await ctx.db.query<{ role: Role; holds: boolean }>(
    `SELECT m.role, ${HOLDS} AS holds
     FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
     WHERE m.organization_id = $1 AND m.user_id = $2`,
    [organizationId, ctx.actor.userId, permission],
    'authorize',
  );
  const row = rows[0];
  if (!row) throw new NotFoundError('Organization');
  if (!row.holds) throw new AppError('FORBIDDEN', `Your role (${row.role}) does not allow ${permission}`);
  return { role: row.role, userId: ctx.actor.userId };
}

/**
 * Whether `authorize` lets the caller through, for a list that shows each row only to whom its read
 * would answer it (docs/accounts.md, Organizations): 403 and 404 are "no", anything else is thrown.
 */
export async function isAuthorized(ctx: Ctx, organizationId: string, permission: Permission): Promise<boolean> {
  try {
    await authorize(ctx, organizationId, permission);
    return true;
  } catch (err) {
    if (err instanceof AppError && (err.code === 'FORBIDDEN' || err.code === 'NOT_FOUND')) return false;
    throw err;
  }
}

/** How an end user's id reads to a caller that may not see it (docs/usage-analytics.md, Who may read). */
export const MASKED_END_USER = '***';

/**
 * Whether the caller reads end users' ids (the MCP `mcp_user_id`, the AI proxy's `user`): every member
 * but a viewer, and an API key unless its creator is a viewer now; the operator always (docs/usage-analytics.md,
 * Who may read). The others see them as MASKED_END_USER and may not filter or group by them.
 */
export const seesEndUsers = (auth: Pick<Authorization, 'role' | 'keyCreator'>): boolean => auth.role !== 'viewer' && auth.keyCreator?.role !== 'viewer';
