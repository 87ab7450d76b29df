import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyCookie from '@fastify/cookie';
import fastifyStatic from '@fastify/static';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { AppError, UnauthorizedError } from '../../errors.js';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { Profile } from '../auth/routes.js';
import { authenticateAccessToken, login, logout, logoutByRefreshToken, refresh, signup, type TokenPair } from '../auth/service.js';
import { clearSessionCookie, isSameOrigin, SESSION_COOKIE, SESSION_PATH, sessionCookies, setSessionCookie } from './session.js';

/** Where `npm run build` puts the console (vite, console/vite.config.ts): dist/console beside dist/app.js. */
export const CONSOLE_DIR = fileURLToPath(new URL('../../../dist/console/', import.meta.url));

/** The console's own page: no framing, scripts from this origin only (docs/console.md "Tokens"). */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

/**
 * The page's CSP: CONSOLE_CSP, with `script-src` also allowing each inline script of the built page
 * by its SHA-256 (the theme, applied before the first paint: docs/console.md "Theme"). No other
 * inline script runs.
 */
export function consolePageCsp(html: string): string {
  const hashes = [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)]
    .map((m) => m[1] ?? '')
    .filter((code) => code.trim() !== '')
    .map((code) => `'sha256-${createHash('sha256').update(code).digest('base64')}'`);
  if (hashes.length === 0) return CONSOLE_CSP;
  return CONSOLE_CSP.replace("script-src 'self'", `script-src 'self' ${hashes.join(' ')}`);
}

const ConsoleSession = Type.Object(
  {
    access_token: Type.String({ description: 'JWT, 15 minutes; keep it in memory' }),
    token_type: Type.Literal('Bearer'),
    expires_in: Type.Integer({ examples: [900] }),
    user: Profile,
  },
  { title: 'ConsoleSession', description: 'An access token; the refresh token went into the HttpOnly session cookie' },
);

const SetCookie = {
  'set-cookie': Type.String({
    description: `${SESSION_COOKIE}: the refresh token, HttpOnly, SameSite=Strict, Path=${SESSION_PATH}, Secure over https`,
  }),
};

const Email = Type.String({ format: 'email', maxLength: 320 });
const tags = ['Console'];
const bearer = [{ bearerAuth: [] }];
const cookieAuth = [{ consoleSession: [] }];

function forgedRequest(): AppError {
  return new AppError('FORBIDDEN', 'The console session endpoints answer the console only (same origin, X-Creditgate-Console: 1)');
}

/** The session endpoints: the auth API's sign-in, with the refresh token kept in the cookie. */
async function sessionRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const config = fastify.deps.config;
  await fastify.register(fastifyCookie);

  fastify.addHook('preHandler', async (request) => {
    if (!isSameOrigin(request)) throw forgedRequest();
  });

  const answer = (request: FastifyRequest, reply: FastifyReply, pair: TokenPair) => {
    setSessionCookie(reply, request, config, pair.refresh_token);
    reply.header('cache-control', 'no-store');
    return { access_token: pair.access_token, token_type: pair.token_type, expires_in: pair.expires_in, user: pair.user };
  };
  const consoleHeader = Type.Object({ 'x-creditgate-console': Type.Literal('1', { description: 'Set by the console; a cross-site form cannot' }) });

  app.post(
    `${SESSION_PATH}`,
    {
      config: { auth: 'public' },
      schema: {
        tags,
        security: [],
        operationId: 'consoleSignIn',
        summary: 'Sign in to the console: the refresh token goes into an HttpOnly cookie, the access token into the answer',
        headers: consoleHeader,
        body: Type.Object({ email: Email, password: Type.String({ minLength: 1, maxLength: 1024 }) }, { additionalProperties: false }),
        response: { 200: { ...Envelope(ConsoleSession), headers: SetCookie }, ...envelopeErrors(400, 401, 403, 429) },
      },
    },
    async (request, reply) => ok(answer(request, reply, await login(ctxOf(request), request.body)), 'Signed in'),
  );

  app.post(
    `${SESSION_PATH}/signup`,
    {
      config: { auth: 'public' },
      schema: {
        tags,
        security: [],
        operationId: 'consoleSignUp',
        summary: 'Create an account from the console and sign in (POST /auth/signup with the cookie)',
        headers: consoleHeader,
        body: Type.Object(
          {
            email: Email,
            password: Type.String({ minLength: 8, maxLength: 1024 }),
            full_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
          },
          { additionalProperties: false },
        ),
        response: { 201: { ...Envelope(ConsoleSession), headers: SetCookie }, ...envelopeErrors(400, 403, 409, 429) },
      },
    },
    async (request, reply) => reply.code(201).send(ok(answer(request, reply, await signup(ctxOf(request), request.body)), 'Account created')),
  );

  app.post(
    `${SESSION_PATH}/refresh`,
    {
      config: { auth: 'public' },
      schema: {
        tags,
        security: cookieAuth,
        operationId: 'consoleRefresh',
        summary: 'Trade the session cookie for a new access token; the cookie is rotated as POST /auth/refresh rotates',
        headers: consoleHeader,
        response: { 200: { ...Envelope(ConsoleSession), headers: SetCookie }, ...envelopeErrors(401, 403) },
      },
    },
    async (request, reply) => {
      const cookies = sessionCookies(request);
      if (cookies.length > 1) {
        // Two session cookies: one was planted beside the console's. Neither is trusted.
        clearSessionCookie(reply, request, config);
        throw new UnauthorizedError('More than one console session cookie was sent: sign in again');
      }
      const token = cookies[0];
      if (!token || token.length > 200) throw new UnauthorizedError('No console session: sign in');
      try {
        return ok(answer(request, reply, await refresh(ctxOf(request), token)), 'Refreshed');
      } catch (err) {
        // A cookie that no longer works (expired, revoked, reused) is dropped so the console shows the sign-in.
        if (err instanceof AppError && err.status === 401) clearSessionCookie(reply, request, config);
        throw err;
      }
    },
  );

  app.delete(
    `${SESSION_PATH}`,
    {
      // Public like refresh: a tab idle past the access token's 15 minutes still signs out, by the cookie.
      config: { auth: 'public' },
      schema: {
        tags,
        security: [...cookieAuth, ...bearer],
        operationId: 'consoleSignOut',
        summary:
          'Sign out of the console: ends the session of the cookie (and of the access token, when one is sent and still valid), as POST /auth/logout, and clears the cookie; always 200',
        headers: consoleHeader,
        response: { 200: Envelope(Type.Null()), ...envelopeErrors(403) },
      },
    },
    async (request, reply) => {
      const ctx = ctxOf(request);
      // Every session cookie sent (a planted one beside the console's ends too: its holder planted it).
      // (A browser sends one, two when one was planted: a request with more is not worth more lookups.)
      for (const token of sessionCookies(request).slice(0, 2)) if (token.length <= 200) await logoutByRefreshToken(ctx, token);
      const bearerToken = /^Bearer (.+)$/i.exec(request.headers.authorization ?? '')?.[1];
      if (bearerToken) {
        const claims = await authenticateAccessToken(ctx, bearerToken).catch(() => null);
        if (claims) await logout({ ...ctx, actor: { type: 'user', userId: claims.userId } }, claims.sessionId);
      }
      clearSessionCookie(reply, request, config);
      return ok(null, 'Signed out');
    },
  );
}

/**
 * The console's files (docs/console.md "Files and caching"): hashed assets cached for a year, every
 * other path under /console answered with the app's page (the app routes in the browser). Without a
 * build, a clear 503. Each file goes as the build's brotli or gzip copy beside it (`.br`, `.gz`) when
 * the request's Accept-Encoding takes one, with Content-Encoding and `Vary: Accept-Encoding`.
 */
async function staticRoutes(fastify: FastifyInstance, { root }: { root: string }): Promise<void> {
  const built = existsSync(join(root, 'index.html'));
  const csp = built ? consolePageCsp(readFileSync(join(root, 'index.html'), 'utf8')) : CONSOLE_CSP;
  await fastify.register(fastifyStatic, { root, serve: false, preCompressed: true });

  const page = async (_request: FastifyRequest, reply: FastifyReply) => {
    if (!built) {
      return reply
        .code(503)
        .header('retry-after', '60')
        .type('text/plain; charset=utf-8')
        .send('The console is not built: run `npm run build`.\n');
    }
    return reply
      .header('cache-control', 'no-cache')
      .header('content-security-policy', csp)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .sendFile('index.html', root, { cacheControl: false });
  };

  const hidden = { hide: true };
  fastify.get('/console', { schema: hidden }, async (_request, reply) => reply.redirect('/console/', 301));
  fastify.get('/console/', { schema: hidden }, page);
  // The invitation link's page: its token is a secret in the path, so it stays out of the logs.
  fastify.get('/console/invitations/:token', { schema: hidden, config: { secretParams: ['token'] } }, page);
  fastify.get('/console/assets/*', { schema: hidden }, async (request, reply) => {
    if (!built) return reply.code(404).send();
    const file = (request.params as { '*': string })['*'];
    return reply
      .header('x-content-type-options', 'nosniff')
      .sendFile(`assets/${file}`, root, { maxAge: '365d', immutable: true, dotfiles: 'deny' });
  });
  fastify.get('/console/*', { schema: hidden }, async (request, reply) => {
    const rest = (request.params as { '*': string })['*'];
    // A file the build copied from console/public (favicon): short cache, its name is not hashed.
    if (built && /^[\w-]+\.(svg|png|ico|txt)$/.test(rest) && existsSync(join(root, rest))) {
      return reply.header('x-content-type-options', 'nosniff').sendFile(rest, root, { maxAge: '1h' });
    }
    return page(request, reply);
  });
}

export interface ConsoleRoutesOptions {
  /** Where the built console is (tests point it elsewhere); dist/console by default. */
  root?: string;
}

export async function consoleRoutes(fastify: FastifyInstance, options: ConsoleRoutesOptions): Promise<void> {
  await fastify.register(sessionRoutes);
  await fastify.register(staticRoutes, { root: options.root ?? CONSOLE_DIR });
}

/** Whether the console is built (GET / sends browsers there when it is). */
export function consoleIsBuilt(root = CONSOLE_DIR): boolean {
  return existsSync(join(root, 'index.html'));
}
