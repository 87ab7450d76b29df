import { principalsChanged } from '../deployments/service.js';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import { isUuid } from '../../lib/ids.js';
import { permissionsOf, takeBackExcess } from '../organizations/powers.js';
import { type Authorization, authorize, type Role } from '../organizations/rbac.js';

export interface MemberRow {
  id: string;
  organization_id: string;
  user_id: string;
  email: string;
  full_name: string | null;
  role: Role;
  invited_by: string | null;
  joined_at: Date;
  permissions: Record<string, boolean> | null;
}

export interface MemberView {
  id: string;
  organization_id: string;
  user_id: string;
  email: string;
  full_name: string | null;
  role: Role;
  invited_by: string | null;
  joined_at: string;
  permissions: Record<string, boolean>;
}

/** A membership with its user and its per-user permission overrides. */
export const MEMBER_SELECT = `SELECT m.id, m.organization_id, m.user_id, u.email, u.full_name, m.role, m.invited_by, m.joined_at,
  (SELECT jsonb_object_agg(p.name, up.granted ORDER BY p.name) FROM user_permissions up JOIN permissions p ON p.id = up.permission_id
   WHERE up.organization_id = m.organization_id AND up.user_id = m.user_id) AS permissions
  FROM organization_members m JOIN users u ON u.id = m.user_id`;

export function viewMember(row: MemberRow): MemberView {
  return {
    id: row.id,
    organization_id: row.organization_id,
    user_id: row.user_id,
    email: row.email,
    full_name: row.full_name,
    role: row.role,
    invited_by: row.invited_by,
    joined_at: row.joined_at.toISOString(),
    permissions: row.permissions ?? {},
  };
}

export async function loadMember(q: Queryable, organizationId: string, userId: string): Promise<MemberView> {
  const rows = await q.query<MemberRow>(`${MEMBER_SELECT} WHERE m.organization_id = $1 AND m.user_id = $2`, [organizationId, userId]);
  if (!rows[0]) throw new NotFoundError('Member');
  return viewMember(rows[0]);
}

/** GET /organizations/{id}/users: a page of members, oldest first (keyset on joined_at, id). */
export async function listMembers(
  ctx: Ctx,
  organizationId: string,
  pageArgs: { limit: number; cursor: KeysetPosition | null },
): Promise<MemberRow[]> {
  await authorize(ctx, organizationId, 'members.read');
  return ctx.db.query<MemberRow>(
    `${MEMBER_SELECT}
     WHERE m.organization_id = $1 AND ($2::timestamptz IS NULL OR (m.joined_at, m.id) > ($2::timestamptz, $3::uuid))
     ORDER BY m.joined_at, m.id LIMIT $4`,
    [organizationId, pageArgs.cursor?.at ?? null, pageArgs.cursor?.id ?? null, pageArgs.limit + 1],
  );
}

/**
 * The organization's owners, locked for the rest of the transaction. Every change that could take
 * away an owner takes these locks first (always in the same order, so two changes cannot deadlock),
 * then counts: two owners demoting each other at once cannot leave the organization without one.
 */
export async function lockOwners(tx: Queryable, organizationId: string): Promise<string[]> {
  const rows = await tx.query<{ user_id: string }>(
    `SELECT user_id FROM organization_members WHERE organization_id = $1 AND role = 'owner' ORDER BY user_id FOR UPDATE`,
    [organizationId],
  );
  return rows.map((r) => r.user_id);
}

async function lockMember(tx: Queryable, organizationId: string, userId: string): Promise<{ role: Role }> {
  const rows = await tx.query<{ role: Role }>(
    'SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2 FOR UPDATE',
    [organizationId, userId],
  );
  if (!rows[0]) throw new NotFoundError('Member');
  return rows[0];
}

const lastOwner = () => new AppError('CONFLICT', 'The last owner cannot be removed or demoted; make another member owner first');
const ownerOnly = () => new AppError('FORBIDDEN', 'Only an owner can make, change or remove an owner');
const aboveCaller = () => new AppError('FORBIDDEN', 'You can change or remove only members whose role is not above yours, and give no role above yours');

const RANK: Record<Role, number> = { viewer: 0, member: 1, admin: 2, owner: 3 };

/**
 * The role a caller acts with in a membership change, as `authorize` read it: a user's own; an API
 * key's creator's (a key never holds more than its creator); a key the operator made acts as an admin.
 * A demotion of the caller that commits after that read orders after this change, as if it came first.
 */
const actingRole = (caller: Authorization): Role => caller.role ?? caller.keyCreator?.role ?? 'admin';

export type Overrides = Partial<Record<string, boolean | null>>;

/**
 * Write per-user overrides: true/false upserts `granted`, null deletes. Nobody grants what they do not
 * hold themselves (no escalation through overrides); an owner has every permission, so nothing is
 * taken away from one.
 */
async function applyOverrides(
  tx: Queryable,
  input: { organizationId: string; userId: string; overrides: Overrides; resultingRole: Role; held: Set<string> },
): Promise<void> {
  const names = Object.keys(input.overrides);
  if (names.length === 0) return;
  const known = await tx.query<{ id: string; name: string }>('SELECT id, name FROM permissions WHERE name = ANY($1::text[])', [names]);
  const ids = new Map(known.map((p) => [p.name, p.id]));
  for (const name of names) {
    const field = `permissions.${name}`;
    if (!ids.has(name)) throw new ValidationError(`Unknown permission ${name}`, [{ field, message: 'is not a known permission' }]);
    const value = input.overrides[name];
    if (value === true && !input.held.has(name)) {
      throw new AppError('FORBIDDEN', `You cannot grant ${name}: you do not hold it yourself`);
    }
    if (value === false && input.resultingRole === 'owner') {
      throw new ValidationError(`An owner has every permission; ${name} cannot be taken away`, [{ field, message: 'cannot be denied to an owner' }]);
    }
  }
  for (const name of names) {
    const value = input.overrides[name];
    if (value === null || value === undefined) {
      await tx.query('DELETE FROM user_permissions WHERE organization_id = $1 AND user_id = $2 AND permission_id = $3', [
        input.organizationId,
        input.userId,
        ids.get(name),
      ]);
    } else {
      await tx.query(
        `INSERT INTO user_permissions (organization_id, user_id, permission_id, granted) VALUES ($1, $2, $3, $4)
         ON CONFLICT (organization_id, user_id, permission_id) DO UPDATE SET granted = EXCLUDED.granted`,
        [input.organizationId, input.userId, ids.get(name), value],
      );
    }
  }
}

export interface MemberUpdate {
  role?: Role | undefined;
  permissions?: Overrides | undefined;
}

/**
 * PUT /organizations/{id}/users/{userId}: role and per-user overrides. Only an owner may make, change
 * or unmake an owner; the last owner is never demoted (409).
 */
export async function updateMember(ctx: Ctx, organizationId: string, userId: string, input: MemberUpdate): Promise<MemberView> {
  const caller = await authorize(ctx, organizationId, 'members.update');
  if (!isUuid(userId)) throw new NotFoundError('Member');
  const member = await ctx.db.transaction(async (tx) => {
    const owners = await lockOwners(tx, organizationId);
    const target = await lockMember(tx, organizationId, userId);
    const callerIsOwner = caller.userId !== null && owners.includes(caller.userId);
    const resultingRole = input.role ?? target.role;
    if ((target.role === 'owner' || resultingRole === 'owner') && !callerIsOwner) throw ownerOnly();
    if (target.role === 'owner' && resultingRole !== 'owner' && owners.length <= 1) throw lastOwner();
    // Nobody raises anyone (themself included) above their own role, or changes someone above it
    // (docs/accounts.md, Powers): a grant of members.update is not a way to become admin.
    const acting = actingRole(caller);
    if (RANK[target.role] > RANK[acting] || RANK[resultingRole] > RANK[acting]) throw aboveCaller();
    if (resultingRole !== target.role) {
      await tx.query('UPDATE organization_members SET role = $3 WHERE organization_id = $1 AND user_id = $2', [organizationId, userId, resultingRole]);
      // An owner holds everything: denials kept from an earlier role would only confuse.
      if (resultingRole === 'owner') {
        await tx.query('DELETE FROM user_permissions WHERE organization_id = $1 AND user_id = $2 AND granted = false', [organizationId, userId]);
      }
      // A demotion takes back what the higher role could grant: extra grants held until now go (ones
      // given in this same request are applied below), or an owner who granted themself a permission
      // would keep it as a viewer (docs/accounts.md, Roles and permissions).
      if (RANK[resultingRole] < RANK[target.role]) {
        await tx.query('DELETE FROM user_permissions WHERE organization_id = $1 AND user_id = $2 AND granted = true', [organizationId, userId]);
      }
    }
    if (input.permissions) {
      // An API key grants what an admin could (a key is nobody's owner), and of that only what its
      // creator holds; one the operator made, what the admin role has.
      let held = await permissionsOf(tx, organizationId, caller.userId, caller.role ?? 'admin');
      if (caller.keyCreator) {
        const creator = await permissionsOf(tx, organizationId, caller.keyCreator.userId, caller.keyCreator.role);
        held = new Set([...held].filter((p) => creator.has(p)));
      }
      await applyOverrides(tx, { organizationId, userId, overrides: input.permissions, resultingRole, held });
    }
    // Keys and invitations the member made must not outlive the powers taken away here.
    await takeBackExcess(tx, ctx, organizationId, userId);
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'update',
      resourceType: 'member',
      resourceId: userId,
      metadata: {
        ...(resultingRole !== target.role ? { role: { from: target.role, to: resultingRole } } : {}),
        ...(input.permissions ? { permissions: input.permissions } : {}),
      },
    });
    return loadMember(tx, organizationId, userId);
  });
  // Keys taken back above must stop working on every instance.
  principalsChanged(ctx);
  return member;
}

/**
 * DELETE /organizations/{id}/users/{userId}. A member may always leave (remove themself); removing
 * anyone else needs members.remove, and removing an owner needs an owner. The last owner stays (409).
 */
export async function removeMember(ctx: Ctx, organizationId: string, userId: string): Promise<void> {
  const isSelf = ctx.actor.type === 'user' && ctx.actor.userId === userId;
  const caller = isSelf ? null : await authorize(ctx, organizationId, 'members.remove');
  const callerUserId = isSelf ? userId : caller!.userId;
  if (!isUuid(organizationId) || !isUuid(userId)) throw new NotFoundError('Member');
  await ctx.db.transaction(async (tx) => {
    if (isSelf) {
      const live = await tx.query('SELECT 1 FROM organizations WHERE id = $1 AND deleted_at IS NULL', [organizationId]);
      if (live.length === 0) throw new NotFoundError('Organization');
    }
    const owners = await lockOwners(tx, organizationId);
    const target = await lockMember(tx, organizationId, userId);
    if (target.role === 'owner') {
      if (!isSelf && !(callerUserId !== null && owners.includes(callerUserId))) throw ownerOnly();
      if (owners.length <= 1) throw lastOwner();
    }
    if (caller && RANK[target.role] > RANK[actingRole(caller)]) throw aboveCaller();
    await tx.query('DELETE FROM user_permissions WHERE organization_id = $1 AND user_id = $2', [organizationId, userId]);
    await tx.query('DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2', [organizationId, userId]);
    // resolve-deployment must not keep answering with an organization the user left.
    await tx.query('UPDATE users SET default_organization_id = NULL WHERE id = $1 AND default_organization_id = $2', [userId, organizationId]);
    // A member who is gone holds nothing: their keys are revoked and their pending invitations withdrawn.
    await takeBackExcess(tx, ctx, organizationId, userId);
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'remove',
      resourceType: 'member',
      resourceId: userId,
      metadata: { role: target.role, left: isSelf },
    });
    await emitEvent(tx, {
      organizationId,
      type: 'organization.member.removed',
      data: { organization_id: organizationId, user_id: userId, role: target.role, left: isSelf },
      at: ctx.clock.now(),
    });
  });
  ctx.bus.publish('resolve-cache');
  principalsChanged(ctx);
}
