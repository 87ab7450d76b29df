import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness, signUp, signUpWithOrganization } from '../../../test/harness.js';
import { buildApp } from '../../app.js';
import { SECOND } from '../../clock.js';
import { CONSOLE_CSP } from './routes.js';
import { SESSION_COOKIE } from './session.js';

/** The console's session endpoints and files (docs/console.md). */
let h: Harness;
let app: FastifyInstance;
let logs = '';
const root = mkdtempSync(join(tmpdir(), 'cg-console-files-'));

beforeAll(async () => {
  h = await createHarness();
  mkdirSync(join(root, 'assets'));
  writeFileSync(join(root, 'index.html'), '<!doctype html><title>creditgate console</title><div id="root"></div>');
  writeFileSync(join(root, 'assets', 'index-AbC123.js'), 'console.log("app")');
  writeFileSync(join(root, 'favicon.svg'), '<svg xmlns="http://www.w3.org/2000/svg"/>');
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      logs += chunk.toString();
      done();
    },
  });
  app = await buildApp({ config: { ...h.config, logLevel: 'info' }, db: h.deps.db, clock: h.clock, consoleRoot: root, logStream });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await h.close();
});

const CONSOLE = { 'x-creditgate-console': '1' };

/** The session cookie a response set: its value and attributes. */
function sessionCookie(res: { headers: Record<string, unknown> }): { value: string; attributes: string } | null {
  const raw = res.headers['set-cookie'];
  const all = Array.isArray(raw) ? raw : raw ? [String(raw)] : [];
  const line = all.find((c: string) => c.startsWith(`${SESSION_COOKIE}=`));
  if (!line) return null;
  const [pair, ...attributes] = line.split(';');
  return { value: pair!.slice(SESSION_COOKIE.length + 1), attributes: attributes.map((a: string) => a.trim()).join('; ') };
}

const cookieHeader = (value: string) => ({ cookie: `${SESSION_COOKIE}=${value}` });

describe('console session endpoints', () => {
  it('sign-in sets the refresh token as an HttpOnly, SameSite=Strict cookie on the session path, and answers only the access token', async () => {
    const u = await signUp(h);
    const res = await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: u.email, password: u.password } });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body.data).toMatchObject({ token_type: 'Bearer', expires_in: 900, user: { id: u.userId, email: u.email } });
    expect(body.data).not.toHaveProperty('refresh_token');
    expect(res.headers['cache-control']).toBe('no-store');
    const cookie = sessionCookie(res);
    expect(cookie?.value).toMatch(/.{20,}/);
    expect(cookie?.attributes).toContain('HttpOnly');
    expect(cookie?.attributes).toContain('SameSite=Strict');
    expect(cookie?.attributes).toContain('Path=/console/session');
    expect(cookie?.attributes).toContain(`Max-Age=${30 * 24 * 3600}`);
    expect(cookie?.attributes).not.toContain('Secure'); // PUBLIC_BASE_URL is http here
    expect(body.data.access_token).not.toBe(cookie?.value);
    // The access token works on the API.
    const me = await app.inject({ method: 'GET', url: '/auth/me', headers: { authorization: `Bearer ${body.data.access_token}` } });
    expect(me.statusCode).toBe(200);
    // The cookie never reaches the logs (the refresh token is a bearer secret).
    expect(logs).not.toContain(cookie!.value);
  });

  it('the cookie is Secure when the service is reached over https', async () => {
    const u = await signUp(h);
    const secure = await buildApp({ config: { ...h.config, publicBaseUrl: 'https://console.example.com' }, db: h.deps.db, clock: h.clock, consoleRoot: root });
    try {
      const res = await secure.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: u.email, password: u.password } });
      expect(sessionCookie(res)?.attributes).toContain('Secure');
    } finally {
      await secure.close();
    }
  });

  it('sign-up creates the account and signs in with the cookie', async () => {
    const email = `console-${Date.now()}-${Math.random().toString(36).slice(2)}@example.com`;
    const res = await app.inject({ method: 'POST', url: '/console/session/signup', headers: CONSOLE, payload: { email, password: 'violet-harbor-lantern-42', full_name: 'Ada' } });
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().data).toMatchObject({ user: { email, full_name: 'Ada', email_verified: false } });
    expect(sessionCookie(res)).not.toBeNull();
    const weak = await app.inject({ method: 'POST', url: '/console/session/signup', headers: CONSOLE, payload: { email: `x${email}`, password: 'password' } });
    expect(weak.statusCode).toBe(400);
    expect(sessionCookie(weak)).toBeNull();
  });

  it('refresh rotates the cookie; the parent within 10 s answers again, a later reuse revokes the session and clears the cookie', async () => {
    const u = await signUp(h);
    const first = sessionCookie(await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: u.email, password: u.password } }))!;
    const refreshed = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(first.value) } });
    expect(refreshed.statusCode, refreshed.body).toBe(200);
    const second = sessionCookie(refreshed)!;
    expect(second.value).not.toBe(first.value);
    expect(refreshed.json().data.user.id).toBe(u.userId);

    // Two tabs refreshing at once: the parent, reused within the grace period, gets a pair for the same session.
    const concurrent = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(first.value) } });
    expect(concurrent.statusCode, concurrent.body).toBe(200);

    // Later, the rotated-out token is a stolen one: the whole session ends, and the cookie is cleared.
    h.clock.advance(11 * SECOND);
    const replay = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(first.value) } });
    expect(replay.statusCode).toBe(401);
    expect(sessionCookie(replay)?.value).toBe('');
    const after = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(second.value) } });
    expect(after.statusCode).toBe(401);
  });

  it('refresh without a cookie, or with garbage, is 401', async () => {
    const none = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: CONSOLE });
    expect(none.statusCode).toBe(401);
    expect(none.json()).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
    const garbage = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader('x'.repeat(300)) } });
    expect(garbage.statusCode).toBe(401);
  });

  it('sign-out ends the session: the access token and the cookie stop working at once', async () => {
    const u = await signUp(h);
    const res = await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: u.email, password: u.password } });
    const access = res.json().data.access_token as string;
    const cookie = sessionCookie(res)!;
    const out = await app.inject({ method: 'DELETE', url: '/console/session', headers: { ...CONSOLE, authorization: `Bearer ${access}` } });
    expect(out.statusCode, out.body).toBe(200);
    expect(sessionCookie(out)?.value).toBe('');
    expect((await app.inject({ method: 'GET', url: '/auth/me', headers: { authorization: `Bearer ${access}` } })).statusCode).toBe(401);
    expect((await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(cookie.value) } })).statusCode).toBe(401);
  });

  it('sign-out after the access token expired (a tab left idle) still ends the session by the cookie, and clears it', async () => {
    const u = await signUp(h);
    const res = await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: u.email, password: u.password } });
    const access = res.json().data.access_token as string;
    const cookie = sessionCookie(res)!;
    h.clock.advance(16 * 60 * SECOND);
    // What the console sends: the expired access token, and the cookie the browser adds.
    const out = await app.inject({ method: 'DELETE', url: '/console/session', headers: { ...CONSOLE, authorization: `Bearer ${access}`, ...cookieHeader(cookie.value) } });
    expect(out.statusCode, out.body).toBe(200);
    expect(sessionCookie(out)?.value).toBe('');
    // The next page load is not signed in again.
    expect((await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(cookie.value) } })).statusCode).toBe(401);
    // The console's session ended (the one sign-up made is another, still open).
    const sessions = await h.deps.db.query<{ revoked_reason: string | null }>('SELECT revoked_reason FROM sessions WHERE user_id = $1', [u.userId]);
    expect(sessions.map((r) => r.revoked_reason).sort()).toEqual(['logout', null]);
    // With neither a cookie nor a valid token there is nothing to end: still 200, the cookie cleared.
    const none = await app.inject({ method: 'DELETE', url: '/console/session', headers: CONSOLE });
    expect(none.statusCode, none.body).toBe(200);
    expect(sessionCookie(none)?.value).toBe('');
  });

  it('a session cookie planted beside the console\'s (two cookies) signs no one in, and is cleared', async () => {
    const victim = await signUp(h);
    const planter = await signUp(h);
    const signIn = async (u: { email: string; password: string }) =>
      sessionCookie(await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: u.email, password: u.password } }))!.value;
    const victimCookie = await signIn(victim);
    const planted = await signIn(planter);
    // A cookie of a narrower path is sent first: the planter's, then the victim's own.
    const both = { cookie: `${SESSION_COOKIE}=${planted}; ${SESSION_COOKIE}=${victimCookie}` };
    const res = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...both } });
    expect(res.statusCode, res.body).toBe(401);
    expect(sessionCookie(res)?.value).toBe('');
    // Neither token was spent: the victim's own cookie alone still works.
    const own = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(victimCookie) } });
    expect(own.statusCode, own.body).toBe(200);
    expect(own.json().data.user.id).toBe(victim.userId);
  });

  it('refuses a request from another site: without the console header (400), or with a foreign Origin (403), and sets no cookie', async () => {
    const u = await signUp(h);
    const payload = { email: u.email, password: u.password };
    const noHeader = await app.inject({ method: 'POST', url: '/console/session', payload });
    expect(noHeader.statusCode).toBe(400);
    expect(noHeader.json().error.message).toContain('x-creditgate-console');
    const foreign = await app.inject({ method: 'POST', url: '/console/session', headers: { ...CONSOLE, origin: 'https://evil.example' }, payload });
    expect(foreign.statusCode).toBe(403);
    expect(foreign.json()).toMatchObject({ success: false, error: { code: 'FORBIDDEN' } });
    expect(sessionCookie(foreign)).toBeNull();
    const same = await app.inject({ method: 'POST', url: '/console/session', headers: { ...CONSOLE, origin: 'http://localhost:80', host: 'localhost:80' }, payload });
    expect(same.statusCode, same.body).toBe(200);
    // A forged refresh from another site gets no token even with the cookie.
    const cookie = sessionCookie(same)!;
    const forgedRefresh = await app.inject({ method: 'POST', url: '/console/session/refresh', headers: { ...CONSOLE, ...cookieHeader(cookie.value), origin: 'null' } });
    expect(forgedRefresh.statusCode).toBe(403);
  });

  it('bad sign-in input is 400 naming the field; a wrong password 401', async () => {
    const bad = await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: 'not-an-email', password: 'x' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().details.fields[0].field).toBe('email');
    const user = await signUpWithOrganization(h);
    const wrong = await app.inject({ method: 'POST', url: '/console/session', headers: CONSOLE, payload: { email: user.email, password: 'not the password' } });
    expect(wrong.statusCode).toBe(401);
    expect(sessionCookie(wrong)).toBeNull();
  });
});

describe('console files', () => {
  it('serves the page with a strict Content-Security-Policy and no caching, for every console path', async () => {
    for (const url of ['/console/', '/console/orgs/6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f/api-keys', '/console/operator', '/console/signup']) {
      const res = await app.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-type']).toContain('text/html');
      expect(res.body).toContain('creditgate console');
      expect(res.headers['content-security-policy']).toBe(CONSOLE_CSP);
      expect(res.headers['cache-control']).toBe('no-cache');
    }
    expect(CONSOLE_CSP).toContain("script-src 'self'");
    expect(CONSOLE_CSP).toContain("frame-ancestors 'none'");
    const bare = await app.inject({ method: 'GET', url: '/console' });
    expect(bare.statusCode).toBe(301);
    expect(bare.headers.location).toBe('/console/');
  });

  it('caches hashed assets for a year, immutable; an unknown asset is 404, not the page', async () => {
    const res = await app.inject({ method: 'GET', url: '/console/assets/index-AbC123.js' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('javascript');
    expect(res.headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect((await app.inject({ method: 'GET', url: '/console/assets/missing-123.js' })).statusCode).toBe(404);
    const icon = await app.inject({ method: 'GET', url: '/console/favicon.svg' });
    expect(icon.statusCode).toBe(200);
    expect(icon.headers['cache-control']).toBe('public, max-age=3600');
  });

  it('never serves a file outside the console directory', async () => {
    for (const url of ['/console/assets/..%2F..%2Fpackage.json', '/console/assets/%2e%2e/%2e%2e/package.json', '/console/assets/..%2f..%2f..%2fpackage.json']) {
      const res = await app.inject({ method: 'GET', url });
      expect(res.body, url).not.toContain('"dependencies"');
      expect([400, 403, 404], url).toContain(res.statusCode);
    }
    // A plain "../" is resolved before routing: it names a console path, and gets the page.
    const resolved = await app.inject({ method: 'GET', url: '/console/assets/../../package.json' });
    expect(resolved.body).not.toContain('"dependencies"');
  });

  it('keeps an invitation token in the console path out of the logs', async () => {
    const token = 'inv_secret_token_for_the_log_test_0123456789';
    const res = await app.inject({ method: 'GET', url: `/console/invitations/${token}` });
    expect(res.statusCode).toBe(200);
    expect(logs).not.toContain(token);
  });

  it('sends a browser that opens an invitation link (accept_url) to the console page; an API client still gets JSON', async () => {
    const owner = await signUpWithOrganization(h);
    const invited = await app.inject({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/users`,
      headers: { authorization: `Bearer ${owner.accessToken}` },
      payload: { email: 'invitee-console@example.com', role: 'member' },
    });
    expect(invited.statusCode, invited.body).toBe(201);
    const { token, accept_url } = invited.json().data as { token: string; accept_url: string };
    expect(accept_url).toBe(`${h.config.publicBaseUrl}/invitations/${token}`);
    const browser = await app.inject({ method: 'GET', url: `/invitations/${token}`, headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
    expect(browser.statusCode).toBe(302);
    expect(browser.headers.location).toBe(`/console/invitations/${token}`);
    const client = await app.inject({ method: 'GET', url: `/invitations/${token}`, headers: { accept: 'application/json' } });
    expect(client.statusCode).toBe(200);
    expect(client.json().data).toMatchObject({ email: 'invitee-console@example.com', role: 'member', status: 'pending' });
    expect(logs).not.toContain(token);
  });

  it('without a build, answers 503 saying how to build', async () => {
    const bare = await buildApp({ config: h.config, db: h.deps.db, clock: h.clock, consoleRoot: mkdtempSync(join(tmpdir(), 'cg-unbuilt-')) });
    try {
      const res = await bare.inject({ method: 'GET', url: '/console/' });
      expect(res.statusCode).toBe(503);
      expect(res.body).toContain('npm run build');
    } finally {
      await bare.close();
    }
  });
});
