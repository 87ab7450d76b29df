import { DAY, HOUR } from '../../clock.js';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError, UnauthorizedError } from '../../errors.js';
import { type Delivery, deliverMail, enqueueMail, type QueuedMail, renderMail } from '../../lib/mailer.js';
import { limitAttempt } from '../../lib/rate-limiter.js';
import { randomBase62, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { profileOf, USER_COLUMNS, type UserProfile, type UserRow } from './profile.js';

/**
 * Email verification (docs/accounts.md): a new user's address is proven by a mailed link before it can accept an
 * invitation. The link carries a bearer token (`cgev_` + 36 base62 characters, 214 random bits),
 * stored only as SHA-256 in `email_verifications`, valid 24 hours. It is put in the URL's fragment
 * (`/verify-email#token=…`), which browsers never send to a server, so no access log or proxy on the
 * way sees it; the page there posts it to `POST /auth/verify-email`. See docs/accounts.md.
 */
export const VERIFICATION_TTL_MS = DAY;
export const VERIFICATION_TOKEN_PREFIX = 'cgev_';
/** Fresh links a signed-in user may ask for per sliding hour (each is a mail to their address). */
export const RESEND_LIMIT = 5;

export interface VerificationSent {
  email: string;
  expires_at: string;
  email_delivery: Delivery;
}

/** Inside the caller's transaction: a new verification row and its mail (body encrypted at rest: it holds the token). */
export async function queueVerification(
  ctx: Ctx,
  tx: Queryable,
  user: { id: string; email: string },
): Promise<{ token: string; expiresAt: Date; mail: QueuedMail }> {
  const now = ctx.clock.now();
  const token = `${VERIFICATION_TOKEN_PREFIX}${randomBase62(36)}`;
  const expiresAt = new Date(now.getTime() + VERIFICATION_TTL_MS);
  await tx.query('INSERT INTO email_verifications (user_id, email, token_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)', [
    user.id,
    user.email,
    sha256Hex(token),
    now,
    expiresAt,
  ]);
  const content = renderMail('verify_email', {
    publicBaseUrl: ctx.config.publicBaseUrl,
    verification: { verifyUrl: `${ctx.config.publicBaseUrl}/verify-email#token=${token}`, expiresAt },
  });
  const mail = await enqueueMail(tx, now, { to: user.email, template: 'verify_email', ...content, containsSecret: true }, ctx.config);
  return { token, expiresAt, mail };
}

/**
 * A fresh verification link for an unverified user, mailed. Returns the token too: only for callers
 * that are not an HTTP answer (the test harness proves an address through the real route with it);
 * the routes never show it, or the mail would prove nothing.
 */
export async function startEmailVerification(ctx: Ctx, userId: string): Promise<VerificationSent & { token: string }> {
  const { sent, mail, token } = await ctx.db.transaction(async (tx) => {
    const rows = await tx.query<{ id: string; email: string; email_verified_at: Date | null }>(
      'SELECT id, email, email_verified_at FROM users WHERE id = $1 FOR UPDATE',
      [userId],
    );
    const user = rows[0];
    if (!user) throw new UnauthorizedError('The user no longer exists');
    if (user.email_verified_at) throw new AppError('CONFLICT', 'Your email address is already verified');
    const queued = await queueVerification(ctx, tx, user);
    return { sent: { email: user.email, expires_at: queued.expiresAt.toISOString() }, mail: queued.mail, token: queued.token };
  });
  return { ...sent, email_delivery: await deliverMail(ctx, mail), token };
}

/** POST /auth/resend-verification: 409 when already verified; at most RESEND_LIMIT mails per user per sliding hour (exact). */
export async function resendVerification(ctx: Ctx, userId: string): Promise<VerificationSent> {
  const rows = await ctx.db.query<{ email_verified_at: Date | null }>('SELECT email_verified_at FROM users WHERE id = $1', [userId]);
  if (!rows[0]) throw new UnauthorizedError('The user no longer exists');
  if (rows[0].email_verified_at) throw new AppError('CONFLICT', 'Your email address is already verified');
  await limitAttempt(
    ctx.limiter,
    [{ subject: `verify-mail:${userId}`, name: 'verification', limit: RESEND_LIMIT, windowMs: HOUR, exact: true }],
    'verification mails',
  );
  const { token: _token, ...sent } = await startEmailVerification(ctx, userId);
  return sent;
}

/**
 * POST /auth/verify-email {token}: marks the address verified, by one guarded update of the token
 * (unused, unexpired). Presenting a link again once the address is verified answers the same profile
 * (a second click is not an error); an unknown token is 404; an expired one, for an address still
 * unverified, is 409 pointing to resend.
 */
export async function verifyEmail(ctx: Ctx, token: string): Promise<UserProfile> {
  const now = ctx.clock.now();
  const hash = sha256Hex(token);
  return ctx.db.transaction(async (tx) => {
    const claimed = await tx.query<{ user_id: string; email: string }>(
      `UPDATE email_verifications SET used_at = $2 WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2 RETURNING user_id, email`,
      [hash, now],
    );
    const link =
      claimed[0] ?? (await tx.query<{ user_id: string; email: string }>('SELECT user_id, email FROM email_verifications WHERE token_hash = $1', [hash]))[0];
    if (!link) throw new NotFoundError('Verification link');
    if (!claimed[0]) {
      const done = await tx.query<UserRow>(
        `SELECT ${USER_COLUMNS} FROM users WHERE id = $1 AND lower(email) = lower($2) AND email_verified_at IS NOT NULL`,
        [link.user_id, link.email],
      );
      if (done[0]) return profileOf(done[0]);
      throw new AppError('CONFLICT', 'This verification link has expired; ask for a new one (POST /auth/resend-verification)');
    }
    // The address must still be the account's (the link proves that address, not whatever it is now).
    const rows = await tx.query<UserRow>(
      `UPDATE users SET email_verified_at = COALESCE(email_verified_at, $3), updated_at = $3
       WHERE id = $1 AND lower(email) = lower($2) RETURNING ${USER_COLUMNS}`,
      [link.user_id, link.email, now],
    );
    if (!rows[0]) throw new AppError('CONFLICT', 'This link was sent to an address the account no longer has');
    const userCtx: Ctx = { ...ctx, actor: { type: 'user', userId: link.user_id } };
    await writeAudit(tx, userCtx, { organizationId: null, action: 'verify_email', resourceType: 'user', resourceId: link.user_id });
    return profileOf(rows[0]);
  });
}
