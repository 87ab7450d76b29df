import { DAY } from '../../clock.js';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { AppError, NotFoundError } from '../../errors.js';
import { pageOf } from '../../http/envelope.js';
import { deliverMail, type Delivery, enqueueMail, renderMail } from '../../lib/mailer.js';
import { randomBase62, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { isUuid } from '../../lib/ids.js';
import { heldBy, invitationRolesAllowed, type WithdrawnReason } from '../organizations/powers.js';
import { authorize, type Role } from '../organizations/rbac.js';
import { enforceInvitationCaps } from './invitation-caps.js';

/** ≥ 178 random bits (36 base62 characters ≈ 214), shown once, stored as SHA-256 (docs/decisions-accounts.md, "Token"). */
export const INVITATION_PREFIX = 'cginv_';
export const INVITATION_TTL_MS = 7 * DAY;

export type InvitationStatus = 'pending' | 'accepted' | 'expired' | 'revoked';

export interface InvitationRow {
  id: string;
  organization_id: string;
  email: string;
  role: Role;
  invited_by: string | null;
  api_key_id: string | null;
  withdrawn_reason: WithdrawnReason | null;
  expires_at: Date;
  accepted_at: Date | null;
  revoked_at: Date | null;
  created_at: Date;
}

export const COLUMNS = 'id, organization_id, email, role, invited_by, api_key_id, withdrawn_reason, expires_at, accepted_at, revoked_at, created_at';

export interface InvitationView {
  id: string;
  organization_id: string;
  email: string;
  role: Role;
  status: InvitationStatus;
  invited_by: string | null;
  api_key_id: string | null;
  withdrawn_reason: WithdrawnReason | null;
  expires_at: string;
  accepted_at: string | null;
  revoked_at: string | null;
  created_at: string;
}

export function statusOf(row: Pick<InvitationRow, 'accepted_at' | 'revoked_at' | 'expires_at'>, now: Date): InvitationStatus {
  if (row.accepted_at) return 'accepted';
  if (row.revoked_at) return 'revoked';
  return row.expires_at.getTime() <= now.getTime() ? 'expired' : 'pending';
}

function viewInvitation(row: InvitationRow, now: Date): InvitationView {
  return {
    id: row.id,
    organization_id: row.organization_id,
    email: row.email,
    role: row.role,
    status: statusOf(row, now),
    invited_by: row.invited_by,
    api_key_id: row.api_key_id,
    withdrawn_reason: row.withdrawn_reason,
    expires_at: row.expires_at.toISOString(),
    accepted_at: row.accepted_at?.toISOString() ?? null,
    revoked_at: row.revoked_at?.toISOString() ?? null,
    created_at: row.created_at.toISOString(),
  };
}

export interface InviteInput {
  organizationId: string;
  email: string;
  role?: Role | undefined;
}

/**
 * The member an API key acts for when it invites: its maker, read under FOR SHARE so a revocation
 * committing meanwhile is waited for and seen (then the invitation is not made). A key the operator
 * made belongs to no member and cannot invite (docs/accounts.md, "Invitations act for a member").
 */
async function keyMaker(tx: Queryable, organizationId: string, apiKeyId: string): Promise<string> {
  const rows = await tx.query<{ created_by: string | null }>(
    'SELECT created_by FROM api_keys WHERE id = $1 AND organization_id = $2 AND revoked_at IS NULL FOR SHARE',
    [apiKeyId, organizationId],
  );
  if (!rows[0]) throw new AppError('FORBIDDEN', 'This API key was revoked');
  if (rows[0].created_by === null) {
    throw new AppError('FORBIDDEN', 'This API key was made by the operator and acts for no member: invitations come from a member or a key a member made');
  }
  return rows[0].created_by;
}

/**
 * Invite by email (POST /organizations/{id}/users and /api/organizations/{org_id}/invitations). The
 * invitation, its mail (outbox row) and its audit row commit together; the mail goes out after the
 * commit. A new invitation to the same address replaces the open one (its link stops working). Capped
 * per organization and per address per day (invitation-caps.ts): 429 with Retry-After past a cap.
 */
export async function inviteMember(
  ctx: Ctx,
  input: InviteInput,
): Promise<InvitationView & { token: string; accept_url: string; email_delivery: Delivery }> {
  const caller = await authorize(ctx, input.organizationId, 'members.invite');
  const role = input.role ?? 'member';
  const apiKeyId = ctx.actor.type === 'api_key' ? ctx.actor.apiKeyId : null;
  // An API key acts as an admin would (never an owner); a user invites with their own role or below.
  const refuse = () =>
    new AppError('FORBIDDEN', role === 'owner' ? 'Only an owner can invite an owner' : `Your role cannot invite with the role ${role}`);
  if (apiKeyId !== null && !invitationRolesAllowed({ role: 'admin', permissions: new Set(['members.invite']) }).includes(role)) throw refuse();
  const token = `${INVITATION_PREFIX}${randomBase62(36)}`;
  const acceptUrl = `${ctx.config.publicBaseUrl}/invitations/${token}`;
  const now = ctx.clock.now();
  const email = input.email.trim();
  const { row, mail } = await ctx.db.transaction(async (tx) => {
    const orgs = await tx.query<{ name: string }>('SELECT name FROM organizations WHERE id = $1 AND deleted_at IS NULL', [input.organizationId]);
    if (!orgs[0]) throw new NotFoundError('Organization');
    // The invitation acts for a member: the caller, or the maker of the calling key (docs/accounts.md).
    const inviterId = apiKeyId === null ? caller.userId : await keyMaker(tx, input.organizationId, apiKeyId);
    // Under a lock of the inviter's membership, so an inviter demoted meanwhile cannot invite above it.
    if (inviterId === null || !invitationRolesAllowed(await heldBy(tx, input.organizationId, inviterId, true)).includes(role)) {
      throw apiKeyId === null ? refuse() : new AppError('FORBIDDEN', `The member who made this API key cannot invite with the role ${role}`);
    }
    const member = await tx.query(
      `SELECT 1 FROM organization_members m JOIN users u ON u.id = m.user_id WHERE m.organization_id = $1 AND lower(u.email) = lower($2)`,
      [input.organizationId, email],
    );
    if (member.length > 0) throw new AppError('CONFLICT', `${email} is already a member of this organization`);
    await enforceInvitationCaps(tx, input.organizationId, email, now);
    const replaced = await tx.query<{ id: string }>(
      `UPDATE invitations SET revoked_at = $3 WHERE organization_id = $1 AND lower(email) = lower($2)
       AND accepted_at IS NULL AND revoked_at IS NULL RETURNING id`,
      [input.organizationId, email, now],
    );
    const rows = await tx
      .query<InvitationRow>(
        `INSERT INTO invitations (organization_id, email, role, invited_by, api_key_id, token_hash, expires_at, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ${COLUMNS}`,
        [input.organizationId, email, role, inviterId, apiKeyId, sha256Hex(token), new Date(now.getTime() + INVITATION_TTL_MS), now],
      )
      .catch((err: unknown) => {
        // A concurrent invitation to the same address won the one open slot (invitations_open_email_key).
        if ((err as { code?: string }).code === '23505') throw new AppError('CONFLICT', `An invitation to ${email} is being sent; retry`);
        throw err;
      });
    const invitation = rows[0]!;
    const inviter = (await tx.query<{ full_name: string | null; email: string }>('SELECT full_name, email FROM users WHERE id = $1', [inviterId]))[0];
    const content = renderMail('invitation', {
      publicBaseUrl: ctx.config.publicBaseUrl,
      invitation: {
        organizationName: orgs[0].name,
        inviterName: inviter ? (inviter.full_name ?? inviter.email) : null,
        role,
        acceptUrl,
        expiresAt: invitation.expires_at,
      },
    });
    // The body holds the accept link (a bearer token): encrypted at rest until SMTP accepts it.
    const queued = await enqueueMail(
      tx,
      now,
      { to: email, template: 'invitation', organizationId: input.organizationId, ...content, containsSecret: true },
      ctx.config,
    );
    await writeAudit(tx, ctx, {
      organizationId: input.organizationId,
      action: 'invite',
      resourceType: 'invitation',
      resourceId: invitation.id,
      metadata: { email, role, invited_by: inviterId, ...(replaced.length > 0 ? { replaced: replaced.map((r) => r.id) } : {}) },
    });
    return { row: invitation, mail: queued };
  });
  const delivered = await deliverMail(ctx, mail);
  return { ...viewInvitation(row, now), token, accept_url: acceptUrl, email_delivery: delivered };
}

/** GET /organizations/{id}/invitations: open invitations (or all of them), oldest first. */
export async function listInvitations(
  ctx: Ctx,
  organizationId: string,
  args: { limit: number; cursor: KeysetPosition | null; status: 'pending' | 'all' },
): Promise<{ items: InvitationView[]; next: string | null }> {
  await authorize(ctx, organizationId, 'members.read');
  const now = ctx.clock.now();
  const rows = await ctx.db.query<InvitationRow>(
    `SELECT ${COLUMNS} FROM invitations
     WHERE organization_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2::timestamptz, $3::uuid))
       AND ($5 = 'all' OR (accepted_at IS NULL AND revoked_at IS NULL AND expires_at > $6))
     ORDER BY created_at, id LIMIT $4`,
    [organizationId, args.cursor?.at ?? null, args.cursor?.id ?? null, args.limit + 1, args.status, now],
  );
  const { items, next } = pageOf(rows, args.limit, (r) => r.created_at);
  return { items: items.map((r) => viewInvitation(r, now)), next };
}

/** DELETE /organizations/{id}/invitations/{invitationId}: the link stops working. Revoking twice is fine; an accepted one is 409. */
export async function revokeInvitation(ctx: Ctx, organizationId: string, invitationId: string): Promise<InvitationView> {
  await authorize(ctx, organizationId, 'members.invite');
  if (!isUuid(invitationId)) throw new NotFoundError('Invitation');
  const now = ctx.clock.now();
  const row = await ctx.db.transaction(async (tx) => {
    const rows = await tx.query<InvitationRow>(
      `UPDATE invitations SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $1 AND organization_id = $2 AND accepted_at IS NULL RETURNING ${COLUMNS}`,
      [invitationId, organizationId, now],
    );
    if (!rows[0]) {
      const found = await tx.query('SELECT 1 FROM invitations WHERE id = $1 AND organization_id = $2', [invitationId, organizationId]);
      if (found.length === 0) throw new NotFoundError('Invitation');
      throw new AppError('CONFLICT', 'This invitation was already accepted; remove the member instead');
    }
    await writeAudit(tx, ctx, { organizationId, action: 'revoke', resourceType: 'invitation', resourceId: invitationId, metadata: { email: rows[0].email } });
    return rows[0];
  });
  return viewInvitation(row, now);
}
