import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError } from '../../errors.js';
import { sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import type { Role } from '../organizations/rbac.js';
import { isBacked } from './invitation-backing.js';
import { COLUMNS, type InvitationRow, type InvitationStatus, statusOf } from './invitations.js';
import { loadMember, type MemberView } from './service.js';

/** The invitation link's side: what a token shows and what accepting it does (docs/decisions-accounts.md, "Invitations"). */
const TOKEN_RE = /^cginv_[0-9A-Za-z]{36}$/;

const lookupSql = `SELECT i.id, i.organization_id, i.email, i.role, i.invited_by, i.api_key_id, i.withdrawn_reason, i.expires_at,
    i.accepted_at, i.revoked_at, i.created_at, o.name AS organization_name, u.full_name AS inviter_name, u.email AS inviter_email
  FROM invitations i JOIN organizations o ON o.id = i.organization_id AND o.deleted_at IS NULL
  LEFT JOIN users u ON u.id = i.invited_by
  WHERE i.token_hash = $1`;

type LookupRow = InvitationRow & { organization_name: string; inviter_name: string | null; inviter_email: string | null };

/**
 * The invitation of `token`, or 404. A malformed token is refused without a database read; unknown,
 * malformed and no longer backed (invitation-backing.ts: the inviter left or lost the power, the key was
 * revoked) read the same. An accepted invitation is history and is shown as such.
 */
async function findByToken(q: Queryable, token: string, now: Date, lock = false): Promise<LookupRow> {
  if (!TOKEN_RE.test(token)) throw new NotFoundError('Invitation');
  const rows = await q.query<LookupRow>(lookupSql, [sha256Hex(token)]);
  const row = rows[0];
  if (!row || (row.accepted_at === null && !(await isBacked(q, row, now, lock)))) throw new NotFoundError('Invitation');
  return row;
}

export interface PublicInvitation {
  organization_name: string;
  email: string;
  role: Role;
  inviter: { name: string | null; email: string } | null;
  expires_at: string;
  status: InvitationStatus;
}

/** GET /invitations/{token} (no auth): what the link is for, so the invitee can decide. */
export async function getInvitationByToken(ctx: Ctx, token: string): Promise<PublicInvitation> {
  const now = ctx.clock.now();
  const row = await findByToken(ctx.db, token, now);
  return {
    organization_name: row.organization_name,
    email: row.email,
    role: row.role,
    inviter: row.inviter_email ? { name: row.inviter_name, email: row.inviter_email } : null,
    expires_at: row.expires_at.toISOString(),
    status: statusOf(row, now),
  };
}

/**
 * POST /invitations/{token}/accept: only the signed-in user with the invited email (any case), verified
 * unless EMAIL_VERIFICATION=off, while the invitation is backed by its inviter (and key). One
 * transaction: the inviter's membership and the
 * key are locked FOR SHARE while the backing is checked, a guarded UPDATE marks it accepted (so two
 * accepts cannot both win) and the membership is created with the invited role. Not pending
 * (accepted, revoked, expired) or already a member: 409.
 */
export async function acceptInvitation(ctx: Ctx, userId: string, token: string): Promise<MemberView> {
  const now = ctx.clock.now();
  const member = await ctx.db.transaction(async (tx) => {
    const invitation = await findByToken(tx, token, now, true);
    const sameEmail = await tx.query<{ email_verified_at: Date | null }>(
      'SELECT email_verified_at FROM users WHERE id = $1 AND lower(email) = lower($2)',
      [userId, invitation.email],
    );
    if (sameEmail.length === 0) throw new AppError('FORBIDDEN', 'This invitation was sent to another email address');
    // The invitation goes to an address; only someone who proved they read it may use it, unless the
    // operator turned verification off (EMAIL_VERIFICATION=off: docs/accounts.md, Email verification).
    if (!sameEmail[0]!.email_verified_at && ctx.config.emailVerification === 'on') {
      throw new AppError('FORBIDDEN', 'Verify your email address first: open the link we mailed you (or POST /auth/resend-verification), then accept');
    }
    const claimed = await tx.query(
      `UPDATE invitations SET accepted_at = $2 WHERE id = $1 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > $2 RETURNING id`,
      [invitation.id, now],
    );
    if (claimed.length === 0) {
      const current = await tx.query<InvitationRow>(`SELECT ${COLUMNS} FROM invitations WHERE id = $1`, [invitation.id]);
      throw new AppError('CONFLICT', `This invitation is ${statusOf(current[0] ?? invitation, now)}`);
    }
    const inserted = await tx.query(
      `INSERT INTO organization_members (organization_id, user_id, role, invited_by, joined_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (organization_id, user_id) DO NOTHING RETURNING id`,
      [invitation.organization_id, userId, invitation.role, invitation.invited_by, now],
    );
    if (inserted.length === 0) throw new AppError('CONFLICT', 'You are already a member of this organization');
    await writeAudit(tx, ctx, {
      organizationId: invitation.organization_id,
      action: 'accept',
      resourceType: 'invitation',
      resourceId: invitation.id,
      metadata: { user_id: userId, role: invitation.role },
    });
    await emitEvent(tx, {
      organizationId: invitation.organization_id,
      type: 'organization.member.added',
      data: { organization_id: invitation.organization_id, user_id: userId, role: invitation.role, invitation_id: invitation.id },
      at: now,
    });
    return loadMember(tx, invitation.organization_id, userId);
  });
  // The new member may have resolved to "no deployment" before.
  ctx.bus.publish('resolve-cache');
  return member;
}
