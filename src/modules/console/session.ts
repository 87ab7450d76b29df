import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../../config.js';
import { REFRESH_TOKEN_TTL_MS } from '../auth/tokens.js';

/**
 * The console's sign-in (docs/console.md "Tokens"): the refresh token lives only in an HttpOnly cookie
 * that script cannot read, scoped to the session paths below and sent same-site only; the access token
 * (15 minutes) lives in the page's memory. A reload trades the cookie for a new pair, so the API's
 * refresh rotation (one use per token, reuse revokes the session) is what the console follows.
 */
export const SESSION_COOKIE = 'cg_console_refresh';
export const SESSION_PATH = '/console/session';
/** The refresh token's own lifetime (docs/accounts.md, Tokens and sessions): the cookie never outlives it. */
export const SESSION_COOKIE_MAX_AGE_S = REFRESH_TOKEN_TTL_MS / 1000;

/** Secure unless the console is reached over plain http (development on a loopback address). */
export function cookieIsSecure(request: FastifyRequest, config: Pick<Config, 'publicBaseUrl'>): boolean {
  return request.protocol === 'https' || config.publicBaseUrl.startsWith('https:');
}

export function setSessionCookie(reply: FastifyReply, request: FastifyRequest, config: Pick<Config, 'publicBaseUrl'>, refreshToken: string): void {
  reply.setCookie(SESSION_COOKIE, refreshToken, {
    httpOnly: true,
    secure: cookieIsSecure(request, config),
    sameSite: 'strict',
    path: SESSION_PATH,
    maxAge: SESSION_COOKIE_MAX_AGE_S,
  });
}

/**
 * Every value of the session cookie the request carries. A browser sends two when a cookie of the same
 * name was planted beside the console's (from a sibling subdomain, with a narrower path, sent first);
 * a cookie parser keeps one of them, and reading the first would sign the victim's console into the
 * planter's account. So the session endpoints read them all and refuse more than one.
 */
export function sessionCookies(request: FastifyRequest): string[] {
  const header = request.headers.cookie;
  if (!header) return [];
  const values: string[] = [];
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq !== -1 && part.slice(0, eq).trim() === SESSION_COOKIE) values.push(part.slice(eq + 1).trim());
  }
  return values;
}

export function clearSessionCookie(reply: FastifyReply, request: FastifyRequest, config: Pick<Config, 'publicBaseUrl'>): void {
  reply.clearCookie(SESSION_COOKIE, { httpOnly: true, secure: cookieIsSecure(request, config), sameSite: 'strict', path: SESSION_PATH });
}

/**
 * A cross-site page must not drive the session endpoints. SameSite=Strict already keeps the cookie off
 * cross-site requests; in addition a browser's `Origin` (sent on every POST and DELETE) must name this
 * service, and the console's own header must be present (a form cannot set it).
 */
export function isSameOrigin(request: FastifyRequest): boolean {
  if (request.headers['x-creditgate-console'] !== '1') return false;
  const origin = request.headers.origin;
  if (origin === undefined) return true; // not a browser, or a same-origin GET: nothing cross-site to fear
  try {
    // Both through URL, so a default port (":80", ":443") compares equal to none.
    return new URL(origin).host === new URL(`${request.protocol}://${request.host}`).host;
  } catch {
    return false;
  }
}
