import { MINUTE } from '../../clock.js';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, UnauthorizedError } from '../../errors.js';
import { deliverMail, type QueuedMail } from '../../lib/mailer.js';
import { hashedSubject, limitAttempt, retryAfterSeconds } from '../../lib/rate-limiter.js';
import { randomBase62, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { queueVerification } from './email-verification.js';
import { assertAcceptablePassword } from './password-policy.js';
import { hashPassword, verifyPassword } from './passwords.js';
import { profileOf, USER_COLUMNS, type UserProfile, type UserRow } from './profile.js';
import { ACCESS_TOKEN_TTL_S, REFRESH_TOKEN_TTL_MS, signAccessToken, verifyAccessToken } from './tokens.js';

/** A parent token reused this soon after its rotation is a concurrent refresh, not theft (docs/accounts.md, Tokens and sessions). */
export const REFRESH_GRACE_MS = 10_000;

export { profileOf, type UserProfile } from './profile.js';

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  token_type: 'Bearer';
  expires_in: number;
  user: UserProfile;
}

const newRefreshToken = () => `cgrt_${randomBase62(36)}`;

async function issuePair(ctx: Ctx, tx: Queryable, user: UserRow, sessionId: string, parentId: string | null): Promise<TokenPair> {
  const now = ctx.clock.now();
  const refresh = newRefreshToken();
  await tx.query(
    `INSERT INTO refresh_tokens (session_id, token_hash, parent_id, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
    [sessionId, sha256Hex(refresh), parentId, now, new Date(now.getTime() + REFRESH_TOKEN_TTL_MS)],
  );
  return {
    access_token: await signAccessToken(ctx.config.jwtSecret, { userId: user.id, sessionId }, now),
    refresh_token: refresh,
    token_type: 'Bearer',
    expires_in: ACCESS_TOKEN_TTL_S,
    user: profileOf(user),
  };
}

async function startSession(ctx: Ctx, tx: Queryable, user: UserRow): Promise<TokenPair> {
  const rows = await tx.query<{ id: string }>(
    'INSERT INTO sessions (user_id, created_at, ip_address, user_agent) VALUES ($1, $2, $3, $4) RETURNING id',
    [user.id, ctx.clock.now(), ctx.ip ?? null, ctx.userAgent ?? null],
  );
  return issuePair(ctx, tx, user, rows[0]!.id, null);
}

/**
 * Sign-ups refused because the address has an account, per client IP (docs/accounts.md, "Sign-up and
 * existing addresses"): 10 in any hour, counted exactly. Past them every sign-up from that IP is 429,
 * for a new address too, so the limit does not become the oracle it bounds.
 */
export const SIGNUP_TAKEN_LIMIT = 10;
export const SIGNUP_TAKEN_WINDOW_MS = 60 * MINUTE;

const signupTakenWindow = (ip: string) => [
  { subject: hashedSubject('signup-taken', ip), name: 'signup-taken', limit: SIGNUP_TAKEN_LIMIT, windowMs: SIGNUP_TAKEN_WINDOW_MS, exact: true },
];

/**
 * POST /auth/signup: the profile (unverified), its verification mail and a first session, in one
 * transaction; the mail is sent after the commit. A weak password is refused before any hashing; an
 * IP past its sign-ups for taken addresses before anything else (SIGNUP_TAKEN_LIMIT).
 */
export async function signup(ctx: Ctx, input: { email: string; password: string; full_name?: string | undefined }): Promise<TokenPair> {
  const taken = signupTakenWindow(ctx.ip ?? '');
  const room = await ctx.limiter.hit(taken, { peek: true });
  if (!room.allowed) {
    const seconds = retryAfterSeconds(room);
    throw new AppError('RATE_LIMITED', `Too many sign-ups for addresses that have an account; retry in ${seconds} seconds`, {}, { 'retry-after': String(seconds) });
  }
  await assertAcceptablePassword(input.password, { email: input.email, fullName: input.full_name });
  const hash = await hashPassword(input.password, ctx.config.passwordHashLogN);
  const now = ctx.clock.now();
  let result: { pair: TokenPair; mail: QueuedMail };
  try {
    result = await ctx.db.transaction(async (tx) => {
      const rows = await tx.query<UserRow>(
        `INSERT INTO users (email, password_hash, full_name, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
         RETURNING ${USER_COLUMNS}, password_hash`,
        [input.email, hash, input.full_name ?? null, now],
      );
      const user = rows[0]!;
      const userCtx: Ctx = { ...ctx, actor: { type: 'user', userId: user.id } };
      await writeAudit(tx, userCtx, { organizationId: null, action: 'signup', resourceType: 'user', resourceId: user.id });
      const { mail } = await queueVerification(userCtx, tx, user);
      return { pair: await startSession(userCtx, tx, user), mail };
    });
  } catch (err) {
    if ((err as { code?: string }).code === '23505') {
      // Counted; a count refused (concurrent sign-ups took the last slots) is the 429 the next one gets.
      await limitAttempt(ctx.limiter, taken, 'sign-ups for addresses that have an account');
      throw new AppError('CONFLICT', 'An account with this email exists');
    }
    throw err;
  }
  await deliverMail(ctx, result.mail);
  return result.pair;
}

/**
 * Login attempts per (IP, email) (docs/accounts.md, Tokens and sessions): 10 in any 15 minutes, counted exactly (a sliding log,
 * not the request limits' approximating counter), shared by every instance.
 */
export const LOGIN_LIMIT = 10;
export const LOGIN_WINDOW_MS = 15 * MINUTE;

/**
 * POST /auth/login, limited per (IP, email). Unknown email and wrong password give one answer after
 * the same work. The attempt is counted before the hash, so refused attempts cost no scrypt; an attempt
 * the full hash queue refuses (429) has still used one of the ten.
 */
export async function login(ctx: Ctx, input: { email: string; password: string }): Promise<TokenPair> {
  await limitAttempt(
    ctx.limiter,
    [
      {
        subject: hashedSubject('login', ctx.ip ?? '', input.email.toLowerCase()),
        name: 'login',
        limit: LOGIN_LIMIT,
        windowMs: LOGIN_WINDOW_MS,
        exact: true,
      },
    ],
    'login attempts',
  );
  const rows = await ctx.db.query<UserRow>(`SELECT ${USER_COLUMNS}, password_hash FROM users WHERE lower(email) = lower($1)`, [
    input.email,
  ]);
  const user = rows[0];
  const check = await verifyPassword(input.password, user?.password_hash ?? null, ctx.config.passwordHashLogN);
  if (!user || !check.ok) throw new UnauthorizedError('Wrong email or password');
  const userCtx: Ctx = { ...ctx, actor: { type: 'user', userId: user.id } };
  // A stronger hash is a nicety: when the queue is full, sign in now and rehash at a later login.
  const rehash = check.needsRehash ? await hashPassword(input.password, ctx.config.passwordHashLogN).catch(() => null) : null;
  return ctx.db.transaction(async (tx) => {
    if (rehash) await tx.query('UPDATE users SET password_hash = $2 WHERE id = $1', [user.id, rehash]);
    await writeAudit(tx, userCtx, { organizationId: null, action: 'login', resourceType: 'user', resourceId: user.id });
    return startSession(userCtx, tx, user);
  });
}

interface TokenRow {
  id: string;
  session_id: string;
  parent_id: string | null;
  expires_at: Date;
  used_at: Date | null;
  revoked_at: Date | null;
  user_id: string;
}

/**
 * POST /auth/refresh: rotation by one conditional UPDATE. A token already used is either a
 * concurrent refresh (its rotation is under 10 s old and its child is unused: a new pair for the same
 * session) or a replay, which revokes the whole session (RFC 9700).
 */
export async function refresh(ctx: Ctx, token: string): Promise<TokenPair> {
  const now = ctx.clock.now();
  const hash = sha256Hex(token);
  const outcome = await ctx.db.transaction(async (tx): Promise<TokenPair | 'replay'> => {
    const rotated = await tx.query<TokenRow>(
      `UPDATE refresh_tokens t SET used_at = $2 FROM sessions s
       WHERE t.token_hash = $1 AND t.used_at IS NULL AND t.expires_at > $2 AND s.id = t.session_id AND s.revoked_at IS NULL
       RETURNING t.id, t.session_id, t.parent_id, t.expires_at, t.used_at, s.revoked_at, s.user_id`,
      [hash, now],
    );
    let row = rotated[0];
    if (!row) {
      const found = await tx.query<TokenRow>(
        `SELECT t.id, t.session_id, t.parent_id, t.expires_at, t.used_at, s.revoked_at, s.user_id
         FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id WHERE t.token_hash = $1 FOR UPDATE OF s`,
        [hash],
      );
      row = found[0];
      if (!row || row.revoked_at || row.expires_at.getTime() <= now.getTime() || !row.used_at) {
        throw new UnauthorizedError('Invalid or expired refresh token');
      }
      const withinGrace = now.getTime() - row.used_at.getTime() <= REFRESH_GRACE_MS;
      // A concurrent refresh only while none of the token's children (its rotation's, and those the
      // grace gave concurrent refreshes) has been used: once one has, the holder moved on and this is a replay.
      const children = await tx.query<{ live: number; used: number }>(
        'SELECT count(*) FILTER (WHERE used_at IS NULL)::int AS live, count(*) FILTER (WHERE used_at IS NOT NULL)::int AS used FROM refresh_tokens WHERE parent_id = $1',
        [row.id],
      );
      if (!withinGrace || children[0]!.live === 0 || children[0]!.used > 0) {
        await tx.query("UPDATE sessions SET revoked_at = $2, revoked_reason = 'refresh_token_reuse' WHERE id = $1", [row.session_id, now]);
        await writeAudit(tx, { ...ctx, actor: { type: 'user', userId: row.user_id } }, {
          organizationId: null,
          action: 'revoke',
          resourceType: 'session',
          resourceId: row.session_id,
          metadata: { reason: 'refresh_token_reuse' },
        });
        return 'replay';
      }
    }
    const users = await tx.query<UserRow>(`SELECT ${USER_COLUMNS}, password_hash FROM users WHERE id = $1`, [row.user_id]);
    return issuePair(ctx, tx, users[0]!, row.session_id, row.id);
  });
  // The revocation commits; only then is the caller refused.
  if (outcome === 'replay') throw new UnauthorizedError('Refresh token reused; the session has been revoked');
  return outcome;
}

/** POST /auth/logout: the session ends; its access and refresh tokens stop working at once. */
export async function logout(ctx: Ctx, sessionId: string): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    await tx.query("UPDATE sessions SET revoked_at = COALESCE(revoked_at, $2), revoked_reason = COALESCE(revoked_reason, 'logout') WHERE id = $1", [
      sessionId,
      ctx.clock.now(),
    ]);
    await writeAudit(tx, ctx, { organizationId: null, action: 'logout', resourceType: 'session', resourceId: sessionId });
  });
}

/**
 * Ends the session a refresh token belongs to, whichever of its tokens it is (the console's cookie may
 * hold one already rotated): sign-out by the cookie alone, once the access token has expired. False
 * when no live session has this token (an ended one is not ended, nor audited, again).
 */
export async function logoutByRefreshToken(ctx: Ctx, token: string): Promise<boolean> {
  const rows = await ctx.db.query<{ session_id: string; user_id: string }>(
    'SELECT t.session_id, s.user_id FROM refresh_tokens t JOIN sessions s ON s.id = t.session_id AND s.revoked_at IS NULL WHERE t.token_hash = $1',
    [sha256Hex(token)],
  );
  if (!rows[0]) return false;
  await logout({ ...ctx, actor: { type: 'user', userId: rows[0].user_id } }, rows[0].session_id);
  return true;
}

/** An access token's user, if its session is still live (one query per request). */
export async function authenticateAccessToken(ctx: Pick<Ctx, 'db' | 'clock' | 'config'>, token: string): Promise<{ userId: string; sessionId: string }> {
  const claims = await verifyAccessToken(ctx.config.jwtSecret, token, ctx.clock.now());
  const rows = await ctx.db.query<{ revoked_at: Date | null }>(
    'SELECT revoked_at FROM sessions WHERE id = $1 AND user_id = $2',
    [claims.sessionId, claims.userId],
    'session_check',
  );
  if (!rows[0] || rows[0].revoked_at) throw new UnauthorizedError('The session has ended; sign in again');
  return claims;
}

export async function getProfile(ctx: Ctx, userId: string): Promise<UserProfile> {
  const rows = await ctx.db.query<UserRow>(`SELECT ${USER_COLUMNS} FROM users WHERE id = $1`, [userId]);
  if (!rows[0]) throw new UnauthorizedError('The user no longer exists');
  return profileOf(rows[0]);
}

export interface ProfileUpdate {
  full_name?: string | null | undefined;
  avatar_url?: string | null | undefined;
  bio?: string | null | undefined;
  default_organization_id?: string | null | undefined;
}

/** Users read and update only their own profile. A default organization must be one of theirs. */
export async function updateProfile(ctx: Ctx, userId: string, input: ProfileUpdate): Promise<UserProfile> {
  const user = await ctx.db.transaction(async (tx) => {
    if (input.default_organization_id) {
      const member = await tx.query(
        `SELECT 1 FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
         WHERE m.user_id = $1 AND m.organization_id = $2`,
        [userId, input.default_organization_id],
      );
      if (member.length === 0) {
        throw new AppError('VALIDATION_ERROR', 'default_organization_id must be an organization you belong to', {
          fields: [{ field: 'default_organization_id', message: 'is not one of your organizations' }],
        });
      }
    }
    const sets: string[] = [];
    const values: unknown[] = [userId];
    for (const key of ['full_name', 'avatar_url', 'bio', 'default_organization_id'] as const) {
      if (input[key] !== undefined) {
        values.push(input[key]);
        sets.push(`${key} = $${values.length}`);
      }
    }
    values.push(ctx.clock.now());
    const rows = await tx.query<UserRow>(
      `UPDATE users SET ${[...sets, `updated_at = $${values.length}`].join(', ')} WHERE id = $1 RETURNING ${USER_COLUMNS}`,
      values,
    );
    await writeAudit(tx, ctx, { organizationId: null, action: 'update', resourceType: 'user', resourceId: userId, metadata: { fields: Object.keys(input) } });
    return rows[0]!;
  });
  if (input.default_organization_id !== undefined) ctx.bus.publish('resolve-cache');
  return profileOf(user);
}

