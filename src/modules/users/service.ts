import type { Ctx } from '../../context.js';
import { AppError, NotFoundError } from '../../errors.js';
import { writeAudit } from '../audit/service.js';
import { isUuid } from '../../lib/ids.js';

export interface UserRow {
  id: string;
  email: string;
  external_id: string | null;
  full_name: string | null;
  default_organization_id: string | null;
  created_at: Date;
  updated_at: Date;
}

/**
 * A user without a password (signs in elsewhere, or before the accounts API exists), made by the
 * operator or the service layer (the demo, the test harness). Its address counts as verified (docs/accounts.md,
 * The local mailbox): the operator vouches for it, as they do for the identity provider that signs it in.
 * `emailVerified: false` leaves it to be proven by a mailed link like a signup's.
 */
export async function createUser(
  ctx: Ctx,
  input: { email: string; externalId?: string | undefined; fullName?: string | undefined; emailVerified?: boolean | undefined },
): Promise<UserRow> {
  try {
    const user = await ctx.db.transaction(async (tx) => {
      const now = ctx.clock.now();
      const rows = await tx.query<UserRow>(
        `INSERT INTO users (email, external_id, full_name, email_verified_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
         RETURNING id, email, external_id, full_name, default_organization_id, created_at, updated_at`,
        [input.email, input.externalId ?? null, input.fullName ?? null, input.emailVerified === false ? null : now, now],
      );
      const row = rows[0]!;
      await writeAudit(tx, ctx, { organizationId: null, action: 'create', resourceType: 'user', resourceId: row.id });
      return row;
    });
    // resolve-deployment may hold a "not found" answer for this external id.
    if (input.externalId) ctx.bus.publish('resolve-cache');
    return user;
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw new AppError('CONFLICT', 'A user with this email or external id exists');
    throw err;
  }
}

/** Operator: the id a user has at an identity provider, which resolve-deployment also accepts. */
export async function setExternalId(ctx: Ctx, userId: string, externalId: string | null): Promise<UserRow> {
  if (!isUuid(userId)) throw new NotFoundError('User');
  try {
    const user = await ctx.db.transaction(async (tx) => {
      const rows = await tx.query<UserRow>(
        `UPDATE users SET external_id = $2, updated_at = $3 WHERE id = $1
         RETURNING id, email, external_id, full_name, default_organization_id, created_at, updated_at`,
        [userId, externalId, ctx.clock.now()],
      );
      if (!rows[0]) throw new NotFoundError('User');
      await writeAudit(tx, ctx, {
        organizationId: null,
        action: 'update',
        resourceType: 'user',
        resourceId: userId,
        metadata: { external_id: externalId },
      });
      return rows[0];
    });
    ctx.bus.publish('resolve-cache');
    return user;
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw new AppError('CONFLICT', 'Another user has this external id');
    throw err;
  }
}
