import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  signUp,
  signUpUnverified,
  signUpWithOrganization,
  unique,
} from '../../../test/harness.js';
import { type SmtpStandIn, startSmtpStandIn } from '../../../test/smtp-stand-in.js';
import { HOUR, MINUTE } from '../../clock.js';
import { readOutboxBody } from '../../lib/mailer.js';
import { createUser } from '../users/service.js';
import { RESEND_LIMIT, VERIFICATION_TTL_MS } from './email-verification.js';

/**
 * Email verification (docs/accounts.md): a new user's address is verified by a mailed link, and only a verified
 * user can accept an invitation. The attack of the review: anyone could sign up with an address they
 * do not own and take the invitation sent to it.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Env<T> = { success: boolean; data: T; error?: { code: string; message: string } };
const verify = (token: string) => h.request({ method: 'POST', url: '/auth/verify-email', payload: { token } });
const resend = (accessToken?: string) =>
  h.request({ method: 'POST', url: '/auth/resend-verification', ...(accessToken ? { headers: bearer(accessToken) } : {}) });
const me = async (accessToken: string) => json<Env<{ email_verified: boolean }>>(await h.request({ method: 'GET', url: '/auth/me', headers: bearer(accessToken) })).data;

/** The verification links mailed to `email`, oldest first, read from the outbox (bodies are stored encrypted). */
async function mailedTokens(email: string): Promise<string[]> {
  const rows = await h.deps.db.query<{ body: string; body_encrypted: boolean }>(
    `SELECT body, body_encrypted FROM email_outbox WHERE "to" = $1 AND template = 'verify_email' ORDER BY created_at, id`,
    [email],
  );
  return rows.map((row) => {
    expect(row.body_encrypted, 'a body holding a verification link is encrypted at rest').toBe(true);
    const match = /^Confirm that this address belongs to your creditgate account: http:\/\/creditgate\.test\/verify-email#token=(cgev_[0-9A-Za-z]{36})$/m.exec(
      readOutboxBody(h.config, row),
    );
    expect(match).not.toBeNull();
    expect(row.body).not.toContain(match![1]);
    return match![1]!;
  });
}

describe('signup mails a verification link', () => {
  it('a new user is unverified; the mailed link verifies it; the same link again answers the same', async () => {
    const u = await signUpUnverified(h);
    expect(await me(u.accessToken)).toMatchObject({ email_verified: false });
    const [token] = await mailedTokens(u.email);

    const res = await verify(token!);
    expect(res.statusCode).toBe(200);
    expect(json<Env<unknown>>(res)).toMatchObject({ success: true, data: { id: u.userId, email: u.email, email_verified: true } });
    expect(await me(u.accessToken)).toMatchObject({ email_verified: true });
    const users = await h.request({ method: 'GET', url: '/api/users/me', headers: bearer(u.accessToken) });
    expect(json<Env<unknown>>(users).data).toMatchObject({ email_verified: true });

    const again = await verify(token!);
    expect(again.statusCode).toBe(200);
    expect(json<Env<{ email_verified: boolean }>>(again).data.email_verified).toBe(true);
    const audit = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE user_id = $1 AND action = 'verify_email'", [u.userId]);
    expect(audit).toHaveLength(1);
  });

  it('an unknown token is 404; an empty or oversized one 400; an expired one 409 until a fresh link is asked for', async () => {
    const u = await signUpUnverified(h);
    const [token] = await mailedTokens(u.email);
    expect((await verify(`cgev_${'x'.repeat(36)}`)).statusCode).toBe(404);
    for (const bad of ['', 'x'.repeat(201)]) {
      const res = await verify(bad);
      expect(res.statusCode).toBe(400);
      expect(json<{ details: { fields: Array<{ field: string }> } }>(res).details.fields.map((f) => f.field)).toContain('token');
    }

    h.clock.advance(VERIFICATION_TTL_MS);
    const expired = await verify(token!);
    expect(expired.statusCode).toBe(409);
    expect(json<Env<unknown>>(expired).error).toMatchObject({ code: 'CONFLICT', message: expect.stringContaining('resend-verification') });
    expect(await me((await login(u)).access_token)).toMatchObject({ email_verified: false });

    const sent = await resend((await login(u)).access_token);
    expect(sent.statusCode).toBe(200);
    const [, fresh] = await mailedTokens(u.email);
    expect(fresh).not.toBe(token);
    expect((await verify(fresh!)).statusCode).toBe(200);
  });
});

describe('GET /verify-email, the page the mail links to', () => {
  it('is HTML that runs only its own script (CSP by hash), posts the fragment token to /auth/verify-email, and is never cached', async () => {
    const res = await h.request({ method: 'GET', url: '/verify-email' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.headers['referrer-policy']).toBe('no-referrer');
    const script = /<script>([\s\S]*)<\/script>/.exec(res.body)?.[1];
    expect(script).toContain("fetch('/auth/verify-email'");
    expect(script).toContain('location.hash');
    const hash = createHash('sha256').update(script!).digest('base64');
    expect(res.headers['content-security-policy']).toContain(`script-src 'sha256-${hash}'`);
    expect(res.headers['content-security-policy']).toContain("default-src 'none'");
  });
});

async function login(u: { email: string; password: string }): Promise<{ access_token: string }> {
  const res = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password }, remoteAddress: '198.51.100.200' });
  return json<Env<{ access_token: string }>>(res).data;
}

describe('POST /auth/resend-verification', () => {
  it(`needs a signed-in user; mails a fresh link (never shown in the answer), at most ${RESEND_LIMIT} an hour; a verified user gets 409`, async () => {
    expect((await resend()).statusCode).toBe(401);
    const u = await signUpUnverified(h);
    for (let i = 0; i < RESEND_LIMIT; i++) {
      const res = await resend(u.accessToken);
      expect(res.statusCode, `resend ${i + 1}`).toBe(200);
      expect(json<Env<unknown>>(res).data).toMatchObject({ email: u.email, email_delivery: 'outbox', expires_at: expect.any(String) });
      expect(res.body).not.toContain('cgev_');
      h.clock.advance(MINUTE);
    }
    const limited = await resend(u.accessToken);
    expect(limited.statusCode).toBe(429);
    expect(json<Env<unknown>>(limited).error).toMatchObject({ code: 'RATE_LIMITED' });
    expect(Number(limited.headers['retry-after'])).toBe(HOUR / 1000 - RESEND_LIMIT * 60);

    const tokens = await mailedTokens(u.email);
    expect(tokens).toHaveLength(1 + RESEND_LIMIT);
    expect(new Set(tokens).size).toBe(tokens.length);
    // Every link of the day works; the first one used verifies.
    expect((await verify(tokens[2]!)).statusCode).toBe(200);
    const verified = await resend(u.accessToken);
    expect(verified.statusCode).toBe(409);
    expect(json<Env<unknown>>(verified).error).toMatchObject({ code: 'CONFLICT' });
  });
});

describe('only a verified user accepts an invitation', () => {
  it('someone who signed up with the invited address but never proved it gets 403 FORBIDDEN; after verifying, the same accept works', async () => {
    const owner = await signUpWithOrganization(h);
    const email = `${unique('invitee')}@example.com`.toLowerCase();
    const invited = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/users`,
      headers: bearer(owner.accessToken),
      payload: { email, role: 'admin' },
    });
    expect(invited.statusCode).toBe(201);
    const invitation = json<Env<{ token: string }>>(invited).data.token;

    const squatter = await h.request({ method: 'POST', url: '/auth/signup', payload: { email, password: 'not my mailbox 42' } });
    expect(squatter.statusCode).toBe(201);
    const squatterToken = json<Env<{ access_token: string }>>(squatter).data.access_token;
    const refused = await h.request({ method: 'POST', url: `/invitations/${invitation}/accept`, headers: bearer(squatterToken) });
    expect(refused.statusCode).toBe(403);
    expect(json<Env<unknown>>(refused).error).toMatchObject({ code: 'FORBIDDEN', message: expect.stringMatching(/verify your email/i) });
    const members = await h.deps.db.query('SELECT 1 FROM organization_members WHERE organization_id = $1', [owner.organizationId]);
    expect(members).toHaveLength(1);

    // The owner of the mailbox reads the link and proves it; the invitation is still open.
    const [token] = await mailedTokens(email);
    expect((await verify(token!)).statusCode).toBe(200);
    const accepted = await h.request({ method: 'POST', url: `/invitations/${invitation}/accept`, headers: bearer(squatterToken) });
    expect(accepted.statusCode).toBe(200);
  });
});

describe('EMAIL_VERIFICATION=off', () => {
  let off: Harness;
  beforeAll(async () => {
    off = await createHarness({ emailVerification: 'off' });
  });
  afterAll(async () => {
    await off.close();
  });

  it('the signed-in user with the invited address accepts unverified; another address is still refused', async () => {
    const owner = await signUpWithOrganization(off);
    const invitee = await signUpUnverified(off);
    const invite = async (email: string) => {
      const url = `/organizations/${owner.organizationId}/users`;
      const res = await off.request({ method: 'POST', url, headers: bearer(owner.accessToken), payload: { email, role: 'member' } });
      expect(res.statusCode).toBe(201);
      return json<Env<{ token: string }>>(res).data.token;
    };
    const accept = (token: string, accessToken: string) => off.request({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(accessToken) });

    const elsewhere = await accept(await invite(`${unique('other')}@example.com`.toLowerCase()), invitee.accessToken);
    expect(elsewhere.statusCode).toBe(403);
    expect(json<Env<unknown>>(elsewhere).error?.message).toMatch(/another email address/);

    const accepted = await accept(await invite(invitee.email), invitee.accessToken);
    expect(accepted.statusCode).toBe(200);
    const members = await off.deps.db.query<{ role: string }>('SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2', [
      owner.organizationId,
      invitee.userId,
    ]);
    expect(members).toEqual([{ role: 'member' }]);
    // The address stays unproven (the mailed link still works when SMTP reaches it).
    const profile = await off.request({ method: 'GET', url: '/auth/me', headers: bearer(invitee.accessToken) });
    expect(json<Env<{ email_verified: boolean }>>(profile).data).toMatchObject({ email_verified: false });
  });
});

describe('users made by the operator or the service layer', () => {
  it('are verified (the operator vouches for them) unless told otherwise', async () => {
    const tenant = await createTenant(h);
    const unverified = await createUser(h.ctx, { email: `${unique('pending')}@example.com`, emailVerified: false });
    const rows = await h.deps.db.query<{ id: string; verified: boolean }>(
      'SELECT id, email_verified_at IS NOT NULL AS verified FROM users WHERE id = ANY($1::uuid[])',
      [[tenant.userId, unverified.id]],
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, r.verified]))).toEqual({ [tenant.userId]: true, [unverified.id]: false });
    // And the harness's signed-up users prove their address through the route.
    const u = await signUp(h);
    expect(await me(u.accessToken)).toMatchObject({ email_verified: true });
  });
});

describe('with SMTP', () => {
  let smtp: SmtpStandIn;
  let hs: Harness;
  beforeAll(async () => {
    smtp = await startSmtpStandIn();
    hs = await createHarness({ smtpUrl: smtp.url });
  });
  afterAll(async () => {
    await hs.close();
    await smtp.close();
  });

  it('signup sends the link by mail; the received link verifies; the outbox keeps no readable token', async () => {
    const email = `${unique('smtp')}@example.com`.toLowerCase();
    const before = smtp.messages.length;
    const res = await hs.request({ method: 'POST', url: '/auth/signup', payload: { email, password: 'mailbox owner 42' } });
    expect(res.statusCode).toBe(201);
    const got = (await smtp.waitFor(before + 1))[before]!;
    expect(got.to).toEqual([email]);
    // Quoted-printable writes the link's "=" as "=3D".
    const token = /verify-email#token=(?:3D)?(cgev_[0-9A-Za-z]{36})/.exec(got.data)![1]!;
    const rows = await hs.deps.db.query<{ body: string; body_encrypted: boolean; sent_at: Date | null }>(
      `SELECT body, body_encrypted, sent_at FROM email_outbox WHERE "to" = $1`,
      [email],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.sent_at).not.toBeNull();
    expect(readOutboxBody(hs.config, rows[0]!)).not.toContain(token);
    const verified = await hs.request({ method: 'POST', url: '/auth/verify-email', payload: { token } });
    expect(json<Env<{ email: string; email_verified: boolean }>>(verified).data).toMatchObject({ email, email_verified: true });
  });
});
