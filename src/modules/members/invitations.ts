import { DAY } from '../../clock.js';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { AppError, NotFoundError } from '../../errors.js';
import { pageOf } from '../../http/envelope.js';
import { deliverMail, type Delivery, enqueueMail, renderMail } from '../../lib/mailer.js';
import { randomBase62, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import { isUuid } from '../metering/state.js';
import { heldBy, invitationRolesAllowed } from '../organizations/powers.js';
import { authorize, type Role } from '../organizations/rbac.js';
import { enforceInvitationCaps } from './invitation-caps.js';
import { loadMember, type MemberView } from './service.js';

/** SPEC §2: ≥ 178 random bits (36 base62 characters ≈ 214), shown once, stored as SHA-256. */
export const INVITATION_PREFIX = 'cginv_';
const TOKEN_RE = /^cginv_[0-9A-Za-z]{36}$/;
export const INVITATION_TTL_MS = 7 * DAY;

export type InvitationStatus = 'pending' | 'accepted' | 'expired' | 'revoked';

interface InvitationRow {
  id: string;
  organization_id: string;
  email: string;
  role: Role;
  invited_by: string | null;
  expires_at: Date;
  accepted_at: Date | null;
  revoked_at: Date | null;
  created_at: Date;
}

const COLUMNS = 'id, organization_id, email, role, invited_by, expires_at, accepted_at, revoked_at, created_at';

export interface InvitationView {
  id: string;
  organization_id: string;
  email: string;
  role: Role;
  status: InvitationStatus;
  invited_by: string | null;
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
  // An API key acts as an admin would (never an owner); a user invites with their own role or below.
  const refuse = () =>
    new AppError('FORBIDDEN', role === 'owner' ? 'Only an owner can invite an owner' : `Your role cannot invite with the role ${role}`);
  if (caller.userId === null && !invitationRolesAllowed({ role: 'admin', permissions: new Set(['members.invite']) }).includes(role)) throw refuse();
  const token = `${INVITATION_PREFIX}${randomBase62(36)}`;
  const acceptUrl = `${ctx.config.publicBaseUrl}/invitations/${token}`;
  const now = ctx.clock.now();
  const email = input.email.trim();
  const { row, mail } = await ctx.db.transaction(async (tx) => {
    const orgs = await tx.query<{ name: string }>('SELECT name FROM organizations WHERE id = $1 AND deleted_at IS NULL', [input.organizationId]);
    if (!orgs[0]) throw new NotFoundError('Organization');
    // Under a lock of the inviter's membership, so a caller demoted meanwhile cannot invite above it.
    if (caller.userId !== null && !invitationRolesAllowed(await heldBy(tx, input.organizationId, caller.userId, true)).includes(role)) {
      throw refuse();
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
        `INSERT INTO invitations (organization_id, email, role, invited_by, token_hash, expires_at, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING ${COLUMNS}`,
        [input.organizationId, email, role, caller.userId, sha256Hex(token), new Date(now.getTime() + INVITATION_TTL_MS), now],
      )
      .catch((err: unknown) => {
        // A concurrent invitation to the same address won the one open slot (invitations_open_email_key).
        if ((err as { code?: string }).code === '23505') throw new AppError('CONFLICT', `An invitation to ${email} is being sent; retry`);
        throw err;
      });
    const invitation = rows[0]!;
    const inviter = caller.userId
      ? (await tx.query<{ full_name: string | null; email: string }>('SELECT full_name, email FROM users WHERE id = $1', [caller.userId]))[0]
      : undefined;
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
      metadata: { email, role, ...(replaced.length > 0 ? { replaced: replaced.map((r) => r.id) } : {}) },
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

const lookupSql = `SELECT i.id, i.organization_id, i.email, i.role, i.invited_by, i.expires_at, i.accepted_at, i.revoked_at, i.created_at,
    o.name AS organization_name, u.full_name AS inviter_name, u.email AS inviter_email
  FROM invitations i JOIN organizations o ON o.id = i.organization_id AND o.deleted_at IS NULL
  LEFT JOIN users u ON u.id = i.invited_by
  WHERE i.token_hash = $1`;

type LookupRow = InvitationRow & { organization_name: string; inviter_name: string | null; inviter_email: string | null };

async function findByToken(q: Queryable, token: string): Promise<LookupRow> {
  // A malformed token is refused without a database read; unknown and malformed read the same.
  if (!TOKEN_RE.test(token)) throw new NotFoundError('Invitation');
  const rows = await q.query<LookupRow>(lookupSql, [sha256Hex(token)]);
  if (!rows[0]) throw new NotFoundError('Invitation');
  return rows[0];
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
  const row = await findByToken(ctx.db, token);
  return {
    organization_name: row.organization_name,
    email: row.email,
    role: row.role,
    inviter: row.inviter_email ? { name: row.inviter_name, email: row.inviter_email } : null,
    expires_at: row.expires_at.toISOString(),
    status: statusOf(row, ctx.clock.now()),
  };
}

/**
 * POST /invitations/{token}/accept: only the signed-in user with the invited email (any case). One
 * transaction: a guarded UPDATE marks it accepted (so two accepts cannot both win) and the membership
 * is created with the invited role. Not pending (accepted, revoked, expired) or already a member: 409.
 */
export async function acceptInvitation(ctx: Ctx, userId: string, token: string): Promise<MemberView> {
  const now = ctx.clock.now();
  const member = await ctx.db.transaction(async (tx) => {
    const invitation = await findByToken(tx, token);
    const sameEmail = await tx.query<{ email_verified_at: Date | null }>(
      'SELECT email_verified_at FROM users WHERE id = $1 AND lower(email) = lower($2)',
      [userId, invitation.email],
    );
    if (sameEmail.length === 0) throw new AppError('FORBIDDEN', 'This invitation was sent to another email address');
    // SPEC §8: the invitation goes to an address; only someone who proved they read it may use it.
    if (!sameEmail[0]!.email_verified_at) {
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
