import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, signUp } from '../../../test/harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Data = { data: Record<string, unknown> };
const me = (token: string) => h.request({ method: 'GET', url: '/auth/me', headers: bearer(token) });
const refresh = (token: string) => h.request({ method: 'POST', url: '/auth/refresh', payload: { refresh_token: token } });

describe('signup and login', () => {
  it('signs up with 201, the envelope and a profile; the password is never echoed', async () => {
    const email = `new-${Date.now()}@example.com`;
    const res = await h.request({ method: 'POST', url: '/auth/signup', payload: { email, password: 'longenough1', full_name: 'Ada' } });
    expect(res.statusCode).toBe(201);
    const body = json<{ success: boolean; data: { user: Record<string, unknown>; token_type: string; expires_in: number }; message: string }>(res);
    expect(body.success).toBe(true);
    expect(body.data.user).toMatchObject({ email, full_name: 'Ada', avatar_url: null, bio: null });
    expect(body.data).toMatchObject({ token_type: 'Bearer', expires_in: 900 });
    expect(res.body).not.toContain('longenough1');
    const stored = await h.deps.db.query<{ password_hash: string }>('SELECT password_hash FROM users WHERE email = $1', [email]);
    expect(stored[0]!.password_hash).toMatch(/^\$scrypt\$ln=\d+,r=8,p=1\$/);
  });

  it('refuses a duplicate email (any case) with 409 CONFLICT', async () => {
    const u = await signUp(h);
    const res = await h.request({ method: 'POST', url: '/auth/signup', payload: { email: u.email.toUpperCase(), password: 'longenough1' } });
    expect(res.statusCode).toBe(409);
    expect(json(res)).toMatchObject({ success: false, error: { code: 'CONFLICT' }, details: { timestamp: expect.any(String) } });
  });

  it('refuses malformed email, short or huge password, unknown fields with 400 VALIDATION_ERROR naming the field', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ email: 'not-an-email', password: 'longenough1' }, 'email'],
      [{ email: 'a@example.com', password: 'short' }, 'password'],
      [{ email: 'a@example.com', password: 'x'.repeat(1025) }, 'password'],
      [{ email: 'a@example.com', password: 'longenough1', admin: true }, 'admin'],
    ];
    for (const [payload, field] of cases) {
      const res = await h.request({ method: 'POST', url: '/auth/signup', payload });
      expect(res.statusCode, JSON.stringify(payload).slice(0, 80)).toBe(400);
      const body = json<{ error: { code: string }; details: { fields: Array<{ field: string }> } }>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields.map((f) => f.field)).toContain(field);
    }
  });

  it('logs in with the right password only; an unknown email gets the same 401', async () => {
    const u = await signUp(h);
    const good = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password } });
    expect(good.statusCode).toBe(200);
    expect(json<Data>(good).data).toMatchObject({ token_type: 'Bearer', user: { id: u.userId } });
    const bad = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: 'wrong password' } });
    const unknown = await h.request({ method: 'POST', url: '/auth/login', payload: { email: `nobody-${u.email}`, password: 'wrong password' } });
    expect(bad.statusCode).toBe(401);
    expect(unknown.statusCode).toBe(401);
    expect(json<{ error: unknown }>(bad).error).toEqual(json<{ error: unknown }>(unknown).error);
  });

  it('limits login to 10 attempts per 15 minutes per (IP, email), then 429 with Retry-After', async () => {
    const u = await signUp(h);
    for (let i = 0; i < 10; i++) {
      const res = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: 'wrong password' } });
      expect(res.statusCode).toBe(401);
    }
    const limited = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password } });
    expect(limited.statusCode).toBe(429);
    expect(json(limited)).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // Another IP is its own window.
    const other = await h.request({ method: 'POST', url: '/auth/login', remoteAddress: '10.9.8.7', payload: { email: u.email, password: u.password } });
    expect(other.statusCode).toBe(200);
    // Waiting as told gets in (the window slides; refused attempts did not count).
    h.clock.advance(Number(limited.headers['retry-after']) * 1000);
    const later = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password } });
    expect(later.statusCode).toBe(200);
  });

  it('writes audit rows for signup, email verification, login and logout', async () => {
    const u = await signUp(h);
    await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password } });
    await h.request({ method: 'POST', url: '/auth/logout', headers: bearer(u.accessToken) });
    const rows = await h.deps.db.query<{ action: string }>('SELECT action FROM audit_logs WHERE user_id = $1 ORDER BY created_at, action', [u.userId]);
    expect(rows.map((r) => r.action).sort()).toEqual(['login', 'logout', 'signup', 'verify_email']);
  });
});

describe('access tokens and sessions', () => {
  it('a valid token reads /auth/me; a forged, expired or API-key token is 401', async () => {
    const u = await signUp(h);
    expect(json<Data>(await me(u.accessToken)).data).toMatchObject({ id: u.userId, email: u.email });
    const [header, payload, signature] = u.accessToken.split('.');
    const forged = `${header}.${payload}.${signature!.slice(0, -4)}AAAA`;
    expect((await me(forged)).statusCode).toBe(401);
    const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${payload}.`;
    expect((await me(none)).statusCode).toBe(401);
    h.clock.advance(15 * 60_000 + 1000);
    const expired = await me(u.accessToken);
    expect(expired.statusCode).toBe(401);
    expect(json(expired)).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
  });

  it('logout ends the session: its access token stops at once, and so does its refresh token', async () => {
    const u = await signUp(h);
    expect((await h.request({ method: 'POST', url: '/auth/logout', headers: bearer(u.accessToken) })).statusCode).toBe(200);
    expect((await me(u.accessToken)).statusCode).toBe(401);
    expect((await refresh(u.refreshToken)).statusCode).toBe(401);
  });

  it('updates only its own profile; a default organization must be one of its own', async () => {
    const u = await signUp(h);
    const res = await h.request({ method: 'PUT', url: '/auth/me', headers: bearer(u.accessToken), payload: { full_name: 'Grace', bio: 'hi' } });
    expect(json<Data>(res).data).toMatchObject({ full_name: 'Grace', bio: 'hi' });
    const other = await h.request({
      method: 'PUT',
      url: '/auth/me',
      headers: bearer(u.accessToken),
      payload: { default_organization_id: '6f1c3d2e-0000-4000-8000-000000000000' },
    });
    expect(other.statusCode).toBe(400);
  });
});

describe('refresh token rotation (docs/accounts.md, RFC 9700)', () => {
  it('rotates: the new pair works and the old refresh token is spent', async () => {
    const u = await signUp(h);
    const res = await refresh(u.refreshToken);
    expect(res.statusCode).toBe(200);
    const pair = json<{ data: { access_token: string; refresh_token: string } }>(res).data;
    expect(pair.refresh_token).not.toBe(u.refreshToken);
    expect((await me(pair.access_token)).statusCode).toBe(200);
    expect((await refresh(pair.refresh_token)).statusCode).toBe(200);
  });

  it('concurrent refreshes of one token within the grace each get a pair for the same session', async () => {
    const u = await signUp(h);
    const results = await Promise.all([refresh(u.refreshToken), refresh(u.refreshToken), refresh(u.refreshToken)]);
    expect(results.map((r) => r.statusCode)).toEqual([200, 200, 200]);
    const sessions = await h.deps.db.query<{ n: number; revoked: number }>(
      'SELECT count(*)::int AS n, count(revoked_at)::int AS revoked FROM sessions WHERE user_id = $1',
      [u.userId],
    );
    expect(sessions[0]).toEqual({ n: 1, revoked: 0 });
  });

  it('reusing a rotated token after the grace revokes the whole session', async () => {
    const u = await signUp(h);
    const pair = json<{ data: { access_token: string; refresh_token: string } }>(await refresh(u.refreshToken)).data;
    h.clock.advance(11_000);
    const replay = await refresh(u.refreshToken);
    expect(replay.statusCode).toBe(401);
    // The thief's replay took the legitimate holder's tokens down with it.
    expect((await refresh(pair.refresh_token)).statusCode).toBe(401);
    expect((await me(pair.access_token)).statusCode).toBe(401);
    const audit = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE user_id = $1 AND action = 'revoke' AND resource_type = 'session'", [u.userId]);
    expect(audit).toHaveLength(1);
  });

  it('within 10 s, a rotated token whose child was used is a replay, whatever unused siblings the grace made', async () => {
    const u = await signUp(h);
    // Two tabs refresh the token at once: two children, one of them the grace's.
    const [first, second] = await Promise.all([refresh(u.refreshToken), refresh(u.refreshToken)]);
    expect([first.statusCode, second.statusCode]).toEqual([200, 200]);
    // One tab moves on: its child is used.
    h.clock.advance(2_000);
    expect((await refresh(json<{ data: { refresh_token: string } }>(first).data.refresh_token)).statusCode).toBe(200);
    // The first token presented again 3 s after its rotation: a replay, not a third tab.
    h.clock.advance(1_000);
    expect((await refresh(u.refreshToken)).statusCode).toBe(401);
    const sessions = await h.deps.db.query<{ revoked_reason: string }>('SELECT revoked_reason FROM sessions WHERE user_id = $1', [u.userId]);
    expect(sessions[0]!.revoked_reason).toBe('refresh_token_reuse');
  });

  it('reusing the grandparent even within 10 s is a replay (only the immediate parent has grace)', async () => {
    const u = await signUp(h);
    const second = json<{ data: { refresh_token: string } }>(await refresh(u.refreshToken)).data.refresh_token;
    json(await refresh(second));
    expect((await refresh(u.refreshToken)).statusCode).toBe(401);
    const sessions = await h.deps.db.query<{ revoked_reason: string }>('SELECT revoked_reason FROM sessions WHERE user_id = $1', [u.userId]);
    expect(sessions[0]!.revoked_reason).toBe('refresh_token_reuse');
  });

  it('an expired refresh token (30 days) is refused', async () => {
    const u = await signUp(h);
    h.clock.advance(30 * 24 * 3600_000 + 1000);
    expect((await refresh(u.refreshToken)).statusCode).toBe(401);
  });
});
