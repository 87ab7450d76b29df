import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import { disableWebhooksOf } from '../webhooks/organization.js';
import type { Role } from './rbac.js';

/**
 * What a member may hand on: the one place that decides which API-key scopes and which
 * invitation roles a member's powers cover. Key creation asks it before minting, and every membership
 * change (demotion, permission override, removal) asks it afterwards and takes back what now exceeds
 * them, so a key or an invitation never outlives the power that made it (docs/accounts.md, "Powers").
 */
export type KeyScope = 'read' | 'write' | 'admin';

export interface Held {
  /** null: not a member (removed, or never was). */
  role: Role | null;
  permissions: Set<string>;
}

const NOTHING: Held = { role: null, permissions: new Set() };

/**
 * The member's role and effective permissions (role plus per-user overrides). `lock` takes the
 * membership row FOR SHARE, so a concurrent demotion or removal (which locks it FOR UPDATE) waits for
 * the caller's transaction or is seen by it: nothing is minted from a power taken away meanwhile.
 */
export async function heldBy(tx: Queryable, organizationId: string, userId: string, lock = false): Promise<Held> {
  const member = await tx.query<{ role: Role }>(
    `SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2${lock ? ' FOR SHARE' : ''}`,
    [organizationId, userId],
  );
  const role = member[0]?.role;
  if (!role) return NOTHING;
  return { role, permissions: await permissionsOf(tx, organizationId, userId, role) };
}

/** Effective permissions of a role with the user's overrides; with no user, the role's own. */
export async function permissionsOf(tx: Queryable, organizationId: string, userId: string | null, role: Role): Promise<Set<string>> {
  const rows = await tx.query<{ name: string }>(
    `SELECT p.name FROM permissions p
     WHERE COALESCE(
       (SELECT up.granted FROM user_permissions up WHERE up.organization_id = $1 AND up.user_id = $2 AND up.permission_id = p.id),
       EXISTS (SELECT 1 FROM role_permissions rp JOIN roles r ON r.id = rp.role_id WHERE r.name = $3 AND rp.permission_id = p.id))`,
    [organizationId, userId, role],
  );
  return new Set(rows.map((r) => r.name));
}

/**
 * The scopes a member may put on a key: owners and admins any; a member with an `api_keys.manage`
 * grant `read` and `write`; nobody else any. An `admin` key manages members and keys, which is an
 * admin's power, so a grant of key management alone cannot mint one.
 */
export function keyScopesAllowed(held: Held): KeyScope[] {
  if (held.role === 'owner' || held.role === 'admin') return ['read', 'write', 'admin'];
  if (held.role !== null && held.permissions.has('api_keys.manage')) return ['read', 'write'];
  return [];
}

const ROLES_DOWNWARD: Role[] = ['owner', 'admin', 'member', 'viewer'];

/**
 * The roles a member may invite with: with `members.invite`, their own role and those below it (an
 * owner any). A member granted `members.invite` cannot bring in an admin, who would hold more than
 * they do (a second account would be an escalation).
 */
export function invitationRolesAllowed(held: Held): Role[] {
  if (held.role === null || !held.permissions.has('members.invite')) return [];
  return ROLES_DOWNWARD.slice(ROLES_DOWNWARD.indexOf(held.role));
}

/**
 * After a membership change of `userId` (inside its transaction, the membership row locked): revoke
 * the keys they made whose scopes now exceed their powers, and withdraw their pending invitations
 * whose role they can no longer invite with and those sent with a key revoked here. Each key
 * revocation is an audit row and an `api_key.revoked` event, like a revocation by hand.
 */
export async function takeBackExcess(tx: Queryable, ctx: Ctx, organizationId: string, userId: string): Promise<void> {
  const held = await heldBy(tx, organizationId, userId);
  const now = ctx.clock.now();
  const revoked = await tx.query<{ id: string; name: string; key_prefix: string; scopes: string[] }>(
    `UPDATE api_keys SET revoked_at = $4
     WHERE organization_id = $1 AND created_by = $2 AND revoked_at IS NULL AND NOT (scopes <@ $3::text[])
     RETURNING id, name, key_prefix, scopes`,
    [organizationId, userId, keyScopesAllowed(held), now],
  );
  for (const key of revoked) {
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'revoke',
      resourceType: 'api_key',
      resourceId: key.id,
      metadata: { reason: 'creator_lost_power', created_by: userId, scopes: key.scopes },
    });
    await emitEvent(tx, {
      organizationId,
      type: 'api_key.revoked',
      data: { api_key_id: key.id, name: key.name, key_prefix: key.key_prefix },
      at: now,
    });
  }
  // Webhooks they made send the organization's events to a receiver they chose: off once they may not manage them.
  if (!held.permissions.has('webhooks.manage')) await disableWebhooksOf(tx, ctx, organizationId, userId);
  // Invitations act for their inviter (docs/accounts.md, "Invitations act for a member"): those whose
  // role the member can no longer invite with, and every one sent with a key revoked just now, go.
  await withdrawInvitations(tx, ctx, organizationId, {
    inviterId: userId,
    rolesAllowed: invitationRolesAllowed(held),
    apiKeyIds: revoked.map((k) => k.id),
  });
}

/** Why the service withdrew an invitation; `inviter_unknown` only from migrations/0019 (rows older than `invited_by` for keys). */
export type WithdrawnReason = 'inviter_lost_power' | 'api_key_revoked' | 'inviter_unknown';

/**
 * Withdraw pending invitations, in the caller's transaction: those sent with one of `apiKeyIds` (reason
 * `api_key_revoked`), and, with `inviterId`, that inviter's whose role is not in `rolesAllowed`
 * (`inviter_lost_power`). Each gets `revoked_at`, its `withdrawn_reason` and an audit row. The accept
 * rule (members/invitation-backing.ts) refuses such an invitation with or without this; withdrawing
 * makes the lists and the audit log say what happened.
 */
export async function withdrawInvitations(
  tx: Queryable,
  ctx: Ctx,
  organizationId: string,
  which: { inviterId?: string; rolesAllowed?: Role[]; apiKeyIds: string[] },
): Promise<void> {
  if (which.inviterId === undefined && which.apiKeyIds.length === 0) return;
  const withdrawn = await tx.query<{ id: string; role: string; invited_by: string | null; api_key_id: string | null; withdrawn_reason: string }>(
    `UPDATE invitations SET revoked_at = $5,
       withdrawn_reason = CASE WHEN api_key_id = ANY($4::uuid[]) THEN 'api_key_revoked' ELSE 'inviter_lost_power' END
     WHERE organization_id = $1 AND accepted_at IS NULL AND revoked_at IS NULL
       AND (api_key_id = ANY($4::uuid[]) OR (invited_by = $2 AND NOT (role = ANY($3::text[]))))
     RETURNING id, role, invited_by, api_key_id, withdrawn_reason`,
    [organizationId, which.inviterId ?? null, which.rolesAllowed ?? [], which.apiKeyIds, ctx.clock.now()],
  );
  for (const invitation of withdrawn) {
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'revoke',
      resourceType: 'invitation',
      resourceId: invitation.id,
      metadata: {
        reason: invitation.withdrawn_reason,
        invited_by: invitation.invited_by,
        role: invitation.role,
        ...(invitation.api_key_id ? { api_key_id: invitation.api_key_id } : {}),
      },
    });
  }
}
