import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY } from '../../clock.js';
import { DELIVERED_SECRET_BODY, readOutboxBody } from '../../lib/mailer.js';
import { sha256Hex } from '../../lib/secrets.js';
import { bearer, createHarness, type Harness, joinByInvitation, json, signUp, signUpWithOrganization } from '../../../test/harness.js';
import { type SmtpStandIn, startSmtpStandIn } from '../../../test/smtp-stand-in.js';
import { createApiKey } from '../api-keys/service.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Created = { id: string; email: string; role: string; status: string; expires_at: string; token: string; accept_url: string; email_delivery: string };
type Err = { error: { code: string; message: string }; details: { fields?: Array<{ field: string }> } };

const invite = (headers: Record<string, string>, orgId: string, payload: Record<string, unknown>, url = `/organizations/${orgId}/users`) =>
  h.request({ method: 'POST', url, headers, payload });
const accept = (token: string, accessToken: string) => h.request({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(accessToken) });
const show = (token: string) => h.request({ method: 'GET', url: `/invitations/${token}` });
const codeOf = (res: { json(): unknown }) => (res.json() as Err).error.code;

async function invited(role = 'member') {
  const owner = await signUpWithOrganization(h);
  const guest = await signUp(h);
  const res = await invite(bearer(owner.accessToken), owner.organizationId, { email: guest.email.toUpperCase(), role });
  expect(res.statusCode).toBe(201);
  return { owner, guest, orgId: owner.organizationId, created: json<{ data: Created }>(res).data };
}

describe('POST /organizations/{id}/users (invite)', () => {
  it('answers 201 with a cginv_ token shown once, accept_url and a 7-day expiry; stores only the hash; audits; outbox mail without SMTP_URL', async () => {
    const { owner, orgId, created } = await invited('admin');
    expect(created.token).toMatch(/^cginv_[0-9A-Za-z]{36}$/);
    expect(created.accept_url).toBe(`${h.config.publicBaseUrl}/invitations/${created.token}`);
    expect(created).toMatchObject({ role: 'admin', status: 'pending', email_delivery: 'outbox' });
    expect(new Date(created.expires_at).getTime()).toBe(h.clock.now().getTime() + 7 * DAY);
    const stored = await h.deps.db.query<Record<string, unknown>>('SELECT * FROM invitations WHERE id = $1', [created.id]);
    expect(stored[0]!.token_hash).toBe(sha256Hex(created.token));
    expect(JSON.stringify(stored)).not.toContain(created.token);
    const mail = await h.deps.db.query<{ to: string; subject: string; body: string; body_encrypted: boolean; template: string; sent_at: Date | null }>(
      'SELECT * FROM email_outbox WHERE organization_id = $1',
      [orgId],
    );
    expect(mail).toHaveLength(1);
    expect(mail[0]).toMatchObject({ to: created.email, template: 'invitation', sent_at: null, body_encrypted: true });
    // The link is a secret: encrypted at rest until sent, readable through the mailer's reader.
    expect(mail[0]!.body).not.toContain(created.token);
    expect(readOutboxBody(h.config, mail[0]!)).toContain(created.accept_url);
    const audit = await h.deps.db.query<{ user_id: string; resource_id: string; metadata: Record<string, unknown> }>(
      "SELECT * FROM audit_logs WHERE organization_id = $1 AND action = 'invite'",
      [orgId],
    );
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ user_id: owner.userId, resource_id: created.id, metadata: { role: 'admin' } });
    expect(JSON.stringify(audit)).not.toContain(created.token);
  });

  it('refuses bad input with 400 VALIDATION_ERROR naming the field', async () => {
    const owner = await signUpWithOrganization(h);
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ email: 'not-an-email' }, 'email'],
      [{ email: `${'a'.repeat(320)}@example.com` }, 'email'],
      [{ email: 'a@example.com', role: 'owner' }, 'role'],
      [{ email: 'a@example.com', role: 'god' }, 'role'],
      [{ email: 'a@example.com', note: 'hi' }, 'note'],
      [{ role: 'member' }, 'email'],
    ];
    for (const [payload, field] of cases) {
      const res = await invite(bearer(owner.accessToken), owner.organizationId, payload);
      expect(res.statusCode, JSON.stringify(payload).slice(0, 60)).toBe(400);
      expect(codeOf(res)).toBe('VALIDATION_ERROR');
      expect(json<Err>(res).details.fields?.map((f) => f.field)).toContain(field);
    }
  });

  it('inviting a member is 409; re-inviting an address replaces its open invitation', async () => {
    const { owner, guest, orgId, created } = await invited();
    const again = await invite(bearer(owner.accessToken), orgId, { email: guest.email });
    expect(again.statusCode).toBe(201);
    const second = json<{ data: Created }>(again).data;
    expect(json<{ data: { status: string } }>(await show(created.token)).data.status).toBe('revoked');
    expect((await accept(created.token, guest.accessToken)).statusCode).toBe(409);
    expect((await accept(second.token, guest.accessToken)).statusCode).toBe(200);
    const member = await invite(bearer(owner.accessToken), orgId, { email: guest.email });
    expect(member.statusCode).toBe(409);
    expect(codeOf(member)).toBe('CONFLICT');
    const self = await invite(bearer(owner.accessToken), orgId, { email: owner.email });
    expect(self.statusCode).toBe(409);
  });

  it('the /api path takes owner, from an owner only (admin and API key: 403)', async () => {
    const owner = await signUpWithOrganization(h);
    const orgId = owner.organizationId;
    const url = `/api/organizations/${orgId}/invitations`;
    const admin = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'admin');
    // Made by the owner: a key-sent invitation acts for the key's maker (docs/accounts.md), and a key still never invites an owner.
    const { key } = await createApiKey(h.ctx, { organizationId: orgId, name: 'k', scopes: ['read', 'write', 'admin'], createdBy: owner.userId });
    const asAdmin = await invite(bearer(admin.accessToken), orgId, { email: 'boss@example.com', role: 'owner' }, url);
    expect(asAdmin.statusCode).toBe(403);
    expect((await invite({ 'x-api-key': key }, orgId, { email: 'boss@example.com', role: 'owner' }, url)).statusCode).toBe(403);
    const byKey = await invite({ 'x-api-key': key }, orgId, { email: `${orgId}-keyed@example.com`, role: 'viewer' }, url);
    expect(byKey.statusCode).toBe(201);
    expect(json<{ data: { invited_by: string | null } }>(byKey).data.invited_by).toBe(owner.userId);
    const boss = await signUp(h);
    const res = await invite(bearer(owner.accessToken), orgId, { email: boss.email, role: 'owner' }, url);
    expect(res.statusCode).toBe(201);
    const joined = await accept(json<{ data: Created }>(res).data.token, boss.accessToken);
    expect(json<{ data: { role: string } }>(joined).data.role).toBe('owner');
    expect((await invite(bearer(owner.accessToken), orgId, { email: 'x@example.com', role: 'king' }, url)).statusCode).toBe(400);
  });
});

describe('GET /invitations/{token} (no auth)', () => {
  it('shows organization name, role, inviter, expiry and status through the lifecycle', async () => {
    const owner = await signUpWithOrganization(h);
    const guest = await signUp(h);
    const res = await invite(bearer(owner.accessToken), owner.organizationId, { email: guest.email, role: 'viewer' });
    const { token } = json<{ data: Created }>(res).data;
    const view = await show(token);
    expect(view.statusCode).toBe(200);
    expect(json<{ data: unknown }>(view).data).toEqual({
      organization_name: expect.stringMatching(/^Org /),
      email: guest.email,
      role: 'viewer',
      inviter: { name: 'Test User', email: owner.email },
      expires_at: expect.any(String),
      status: 'pending',
    });
    expect(view.body).not.toContain(owner.organizationId);
    await accept(token, guest.accessToken);
    expect(json<{ data: { status: string } }>(await show(token)).data.status).toBe('accepted');
  });

  it('unknown, malformed and over-long tokens: 404 (or 400 past 200 characters)', async () => {
    expect((await show(`cginv_${'a'.repeat(36)}`)).statusCode).toBe(404);
    expect(codeOf(await show('nonsense'))).toBe('NOT_FOUND');
    expect((await show('x'.repeat(201))).statusCode).toBe(400);
  });
});

describe('POST /invitations/{token}/accept', () => {
  it('joins with the invited role (email compared in any case), audits, and drops the resolve cache', async () => {
    let published = 0;
    h.deps.bus.subscribe('resolve-cache', () => {
      published += 1;
    });
    const { owner, guest, orgId, created } = await invited('admin');
    const res = await accept(created.token, guest.accessToken);
    expect(res.statusCode).toBe(200);
    expect(json<{ data: unknown }>(res).data).toMatchObject({ organization_id: orgId, user_id: guest.userId, role: 'admin', invited_by: owner.userId });
    expect(published).toBeGreaterThan(0);
    const audit = await h.deps.db.query("SELECT * FROM audit_logs WHERE organization_id = $1 AND action = 'accept' AND resource_id = $2", [orgId, created.id]);
    expect(audit).toHaveLength(1);
    // Now an admin: can list and invite.
    expect((await invite(bearer(guest.accessToken), orgId, { email: `${orgId}-next@example.com` })).statusCode).toBe(201);
  });

  it('another signed-in user gets 403; no token or an API key gets 401; an unknown token 404', async () => {
    const { orgId, created } = await invited();
    const other = await signUp(h);
    const res = await accept(created.token, other.accessToken);
    expect(res.statusCode).toBe(403);
    expect(codeOf(res)).toBe('FORBIDDEN');
    expect((await h.request({ method: 'POST', url: `/invitations/${created.token}/accept` })).statusCode).toBe(401);
    const { key } = await createApiKey(h.ctx, { organizationId: orgId, name: 'k', scopes: ['read', 'write', 'admin'] });
    expect((await h.request({ method: 'POST', url: `/invitations/${created.token}/accept`, headers: bearer(key) })).statusCode).toBe(401);
    expect((await accept(`cginv_${'b'.repeat(36)}`, other.accessToken)).statusCode).toBe(404);
  });

  it('accepting twice is 409, and two accepts at once make one membership', async () => {
    const { guest, orgId, created } = await invited();
    const both = await Promise.all([accept(created.token, guest.accessToken), accept(created.token, guest.accessToken)]);
    expect(both.map((r) => r.statusCode).sort()).toEqual([200, 409]);
    const again = await accept(created.token, guest.accessToken);
    expect(again.statusCode).toBe(409);
    expect(json<Err>(again).error.message).toContain('accepted');
    expect(await h.deps.db.query('SELECT 1 FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, guest.userId])).toHaveLength(1);
  });

  it('after 7 days the invitation is expired: 409, and its status says so', async () => {
    const { guest, created } = await invited();
    h.clock.advance(7 * DAY);
    // Access tokens live 15 minutes on the same clock: sign in again.
    const login = await h.request({ method: 'POST', url: '/auth/login', payload: { email: guest.email, password: guest.password } });
    const res = await accept(created.token, json<{ data: { access_token: string } }>(login).data.access_token);
    expect(res.statusCode).toBe(409);
    expect(json<Err>(res).error.message).toContain('expired');
    expect(json<{ data: { status: string } }>(await show(created.token)).data.status).toBe('expired');
  });

  it('a user who joined meanwhile another way gets 409 and the invitation stays pending', async () => {
    const owner = await signUpWithOrganization(h);
    const guest = await signUp(h);
    const first = json<{ data: Created }>(await invite(bearer(owner.accessToken), owner.organizationId, { email: guest.email })).data;
    await h.deps.db.query("INSERT INTO organization_members (organization_id, user_id, role, joined_at) VALUES ($1, $2, 'viewer', $3)", [
      owner.organizationId,
      guest.userId,
      h.clock.now(),
    ]);
    const res = await accept(first.token, guest.accessToken);
    expect(res.statusCode).toBe(409);
    expect(json<{ data: { status: string } }>(await show(first.token)).data.status).toBe('pending');
  });
});

describe('invitation lists and revocation', () => {
  it('lists open invitations (all with ?status=all); revoking stops the link; accepted ones cannot be revoked', async () => {
    const { owner, guest, orgId, created } = await invited();
    const late = await signUp(h);
    const other = json<{ data: Created }>(await invite(bearer(owner.accessToken), orgId, { email: late.email })).data;
    const viewer = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'viewer');
    const listed = await h.request({ method: 'GET', url: `/organizations/${orgId}/invitations?limit=1`, headers: bearer(viewer.accessToken) });
    expect(listed.statusCode).toBe(200);
    const page1 = json<{ data: Array<{ id: string }>; meta: { next_cursor: string } }>(listed);
    expect(page1.data).toHaveLength(1);
    const page2 = json<{ data: Array<{ id: string; email: string }>; meta: { next_cursor: string | null } }>(
      await h.request({ method: 'GET', url: `/organizations/${orgId}/invitations?limit=1&cursor=${page1.meta.next_cursor}`, headers: bearer(viewer.accessToken) }),
    );
    // Same clock tick: the order between the two is by id; together they are the two open ones.
    expect([...page1.data, ...page2.data].map((i) => i.id).sort()).toEqual([created.id, other.id].sort());
    expect(page2.meta.next_cursor).toBeNull();
    expect(JSON.stringify(page2)).not.toContain('token');

    const del = (id: string, token: string) => h.request({ method: 'DELETE', url: `/organizations/${orgId}/invitations/${id}`, headers: bearer(token) });
    expect((await del(other.id, viewer.accessToken)).statusCode).toBe(403);
    const revoked = await del(other.id, owner.accessToken);
    expect(revoked.statusCode).toBe(200);
    expect(json<{ data: { status: string } }>(revoked).data.status).toBe('revoked');
    expect((await del(other.id, owner.accessToken)).statusCode).toBe(200);
    const refused = await accept(other.token, late.accessToken);
    expect(refused.statusCode).toBe(409);
    expect(json<Err>(refused).error.message).toContain('revoked');
    expect(await h.deps.db.query("SELECT 1 FROM audit_logs WHERE organization_id = $1 AND action = 'revoke' AND resource_id = $2", [orgId, other.id])).toHaveLength(2);

    await accept(created.token, guest.accessToken);
    const conflict = await del(created.id, owner.accessToken);
    expect(conflict.statusCode).toBe(409);
    const all = json<{ data: Array<{ id: string; status: string }> }>(
      await h.request({ method: 'GET', url: `/organizations/${orgId}/invitations?status=all`, headers: bearer(owner.accessToken) }),
    );
    expect(all.data.find((i) => i.id === created.id)?.status).toBe('accepted');
    expect(all.data.find((i) => i.id === other.id)?.status).toBe('revoked');
    const stranger = await signUpWithOrganization(h);
    expect((await del(created.id, stranger.accessToken)).statusCode).toBe(404);
    expect((await h.request({ method: 'DELETE', url: `/organizations/${stranger.organizationId}/invitations/${created.id}`, headers: bearer(stranger.accessToken) })).statusCode).toBe(404);
  });
});

describe('invitation mail over SMTP', () => {
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

  it('sends the accept link by SMTP after the commit and marks the outbox row sent (link scrubbed)', async () => {
    const owner = await signUpWithOrganization(hs);
    const email = `smtp-guest-${Date.now()}@example.com`;
    const res = await hs.request({ method: 'POST', url: `/organizations/${owner.organizationId}/users`, headers: bearer(owner.accessToken), payload: { email } });
    expect(res.statusCode).toBe(201);
    const created = json<{ data: Created }>(res).data;
    expect(created.email_delivery).toBe('smtp');
    const [message] = (await smtp.waitFor(1)).filter((m) => m.to.includes(email));
    expect(message?.data).toContain(created.accept_url);
    expect(message?.data).toMatch(/Subject: You are invited to join Org /);
    const row = await hs.deps.db.query<{ sent_at: Date | null; body: string; body_encrypted: boolean }>(
      'SELECT sent_at, body, body_encrypted FROM email_outbox WHERE organization_id = $1',
      [owner.organizationId],
    );
    expect(row[0]).toMatchObject({ body: DELIVERED_SECRET_BODY, body_encrypted: false });
    expect(row[0]!.sent_at).toBeInstanceOf(Date);
  });
});
