/**
 * DEMO AUTHENTICATION: DO NOT USE IT IN PRODUCTION.
 *
 * This takes `Authorization: Bearer <user id>` at its word, so any caller can claim to be any user and
 * spend that user's organization's credits. Its only job is to show where the end user's id has to
 * end up: `req.auth.extra.userId`. The SDK passes `req.auth` to every tool as `extra.authInfo`, and
 * the creditgate middleware reads `authInfo.extra.userId` (or `user_id`, or `sub`) from there.
 *
 * A real hosted server verifies an OAuth access token instead, with the SDK's `requireBearerAuth`
 * (`@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js`) and an `OAuthTokenVerifier` that
 * returns the token's subject in `extra`, or with its own identity provider's verifier.
 */
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';

export type DemoAuthResult =
  /** `auth` is undefined for a request without Authorization: an anonymous session (calls get `no_user`). */
  | { ok: true; auth: AuthInfo | undefined }
  | { ok: false; message: string };

/** A user id as creditgate accepts it: its own user id, or the external id of a user who signs in elsewhere. */
const USER_ID = /^[^\s,;]{1,200}$/;

export function demoAuthenticate(authorization: string | undefined): DemoAuthResult {
  if (authorization === undefined || authorization.trim() === '') return { ok: true, auth: undefined };
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  const userId = match?.[1];
  if (!userId || !USER_ID.test(userId)) {
    return { ok: false, message: 'Authorization must be "Bearer <user id>" (demo authentication)' };
  }
  return { ok: true, auth: { token: userId, clientId: 'demo', scopes: [], extra: { userId } } };
}
