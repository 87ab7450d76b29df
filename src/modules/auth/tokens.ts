import { jwtVerify, SignJWT } from 'jose';
import { UnauthorizedError } from '../../errors.js';

/** Access tokens are JWTs (HS256, pinned), 15 minutes, carrying the session id (docs/accounts.md, Tokens and sessions). */
export const ACCESS_TOKEN_TTL_S = 15 * 60;
export const REFRESH_TOKEN_TTL_MS = 30 * 24 * 60 * 60 * 1000;
const ISSUER = 'creditgate';
const AUDIENCE = 'creditgate-api';

export interface AccessClaims {
  userId: string;
  sessionId: string;
}

const keyOf = (secret: string) => new TextEncoder().encode(secret);

export async function signAccessToken(secret: string, claims: AccessClaims, now: Date): Promise<string> {
  const iat = Math.floor(now.getTime() / 1000);
  return new SignJWT({ sid: claims.sessionId })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(claims.userId)
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setIssuedAt(iat)
    .setExpirationTime(iat + ACCESS_TOKEN_TTL_S)
    .sign(keyOf(secret));
}

/** Verify signature (HS256 only), issuer, audience and expiry against our clock. */
export async function verifyAccessToken(secret: string, token: string, now: Date): Promise<AccessClaims> {
  try {
    const { payload } = await jwtVerify(token, keyOf(secret), {
      algorithms: ['HS256'],
      issuer: ISSUER,
      audience: AUDIENCE,
      currentDate: now,
      requiredClaims: ['sub', 'exp', 'sid'],
    });
    if (typeof payload.sub !== 'string' || typeof payload.sid !== 'string') throw new Error('claims');
    return { userId: payload.sub, sessionId: payload.sid };
  } catch {
    throw new UnauthorizedError('Invalid or expired access token');
  }
}
