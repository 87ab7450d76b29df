import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, type Harness, joinByInvitation, json, signUp, signUpWithOrganization } from '../../../test/harness.js';
import { memberFixtures } from '../../../test/member-fixtures.js';
import { MINUTE } from '../../clock.js';

/**
 * docs/accounts.md, "Invitations act for a member", written as the attack a security review ran: an
 * admin makes an `admin` API key and with it invites a second address of theirs as admin (on both
 * invite paths); the owner removes the admin; the key is revoked, but the invitation had no inviter and
 * was never withdrawn, so the second address accepted and was admin.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;
type Path = 'organizations' | 'api';
const invite = (headers: Headers, orgId: string, email: string, role: string, path: Path = 'organizations') =>
  h.request({ method: 'POST', url: path === 'api' ? `/api/organizations/${orgId}/invitations` : `/organizations/${orgId}/users`, headers, payload: { email, role } });
const tokenOf = (res: { json(): unknown }) => (res.json() as { data: { token: string } }).data.token;
const lookUp = (token: string) => h.request({ method: 'GET', url: `/invitations/${token}` });
const accept = (token: string, headers: Headers) => h.request({ method: 'POST', url: `/invitations/${token}/accept`, headers });
const { setMember } = memberFixtures(() => h);

async function orgWithAdmin() {
  const owner = await signUpWithOrganization(h);
  const ob = bearer(owner.accessToken);
  const admin = await joinByInvitation(h, ob, owner.organizationId, 'admin');
  const key = await h.request({
    method: 'POST',
    url: `/organizations/${owner.organizationId}/api-keys`,
    headers: bearer(admin.accessToken),
    payload: { name: 'admin key', scopes: ['read', 'write', 'admin'] },
  });
  expect(key.statusCode).toBe(201);
  const { id: keyId, key: secret } = (key.json() as { data: { id: string; key: string } }).data;
  return { owner, ob, admin, ab: bearer(admin.accessToken), orgId: owner.organizationId, keyId, kb: { 'x-api-key': secret } };
}

/** Unknown token, withdrawn invitation: the same 404 NOT_FOUND on GET and on accept. */
async function expectUnknown(token: string, headers: Headers): Promise<void> {
  for (const res of [await lookUp(token), await accept(token, headers)]) {
    expect(res.statusCode).toBe(404);
    expect(json<{ error: { code: string } }>(res).error.code).toBe('NOT_FOUND');
  }
}

const membersOf = async (orgId: string, userIds: string[]) =>
  h.deps.db.query<{ user_id: string; role: string }>('SELECT user_id, role FROM organization_members WHERE organization_id = $1 AND user_id = ANY($2::uuid[])', [
    orgId,
    userIds,
  ]);

const invitationRow = async (token: string) =>
  (
    await h.deps.db.query<{ invited_by: string | null; api_key_id: string | null; withdrawn_reason: string | null; revoked: boolean }>(
      `SELECT invited_by, api_key_id, withdrawn_reason, revoked_at IS NOT NULL AS revoked FROM invitations
       WHERE token_hash = encode(sha256(convert_to($1, 'UTF8')), 'hex')`,
      [token],
    )
  )[0];

describe('a removed admin does not come back through an invitation sent with their key', () => {
  it.each<Path>(['organizations', 'api'])('via the %s invite path: after the removal the token is unknown (404) and nobody joins', async (path) => {
    const { ob, admin, orgId, keyId, kb } = await orgWithAdmin();
    const alt = await signUp(h, 'Second address');
    const sent = await invite(kb, orgId, alt.email, 'admin', path);
    expect(sent.statusCode).toBe(201);
    expect(json<{ data: { invited_by: string; api_key_id: string } }>(sent).data).toMatchObject({ invited_by: admin.userId, api_key_id: keyId });
    const token = tokenOf(sent);
    // Before the removal the link shows who it acts for.
    expect(json<{ data: { inviter: { email: string } } }>(await lookUp(token)).data.inviter.email).toBe(admin.email);

    expect((await h.request({ method: 'DELETE', url: `/organizations/${orgId}/users/${admin.userId}`, headers: ob })).statusCode).toBe(200);

    await expectUnknown(token, bearer(alt.accessToken));
    expect(await membersOf(orgId, [admin.userId, alt.userId])).toEqual([]);
    expect(await invitationRow(token)).toEqual({ invited_by: admin.userId, api_key_id: keyId, withdrawn_reason: 'api_key_revoked', revoked: true });
    const audit = await h.deps.db.query<{ metadata: Record<string, unknown> }>(
      "SELECT metadata FROM audit_logs WHERE organization_id = $1 AND action = 'revoke' AND resource_type = 'invitation'",
      [orgId],
    );
    expect(audit).toEqual([{ metadata: expect.objectContaining({ reason: 'api_key_revoked', api_key_id: keyId, invited_by: admin.userId }) }]);
  });

  it('the accept rule holds on its own: an invitation of a removed inviter is refused even if it was never withdrawn', async () => {
    const { ob, admin, ab, orgId } = await orgWithAdmin();
    const alt = await signUp(h, 'Second address');
    const token = tokenOf(await invite(ab, orgId, alt.email, 'admin'));
    await h.request({ method: 'DELETE', url: `/organizations/${orgId}/users/${admin.userId}`, headers: ob });
    // As an old row or a missed withdrawal would be: open again, no reason.
    await h.deps.db.query('UPDATE invitations SET revoked_at = NULL, withdrawn_reason = NULL WHERE organization_id = $1', [orgId]);
    await expectUnknown(token, bearer(alt.accessToken));
    expect(await membersOf(orgId, [alt.userId])).toEqual([]);
  });
});

describe('a demoted admin', () => {
  it('loses the invitations above their new role and those sent with the keys they lost; the rest still work', async () => {
    const { ob, admin, ab, orgId, kb } = await orgWithAdmin();
    const [asAdmin, asMember, byKey] = [await signUp(h), await signUp(h), await signUp(h)];
    const adminInvite = tokenOf(await invite(ab, orgId, asAdmin.email, 'admin'));
    const memberInvite = tokenOf(await invite(ab, orgId, asMember.email, 'member', 'api'));
    const keyInvite = tokenOf(await invite(kb, orgId, byKey.email, 'member'));

    // A member who keeps members.invite: member and viewer invitations are still theirs to give, an
    // admin one is not, and an admin key is not theirs to hold.
    const demoted = await setMember(ob, orgId, admin.userId, { role: 'member', permissions: { 'members.invite': true } });
    expect(demoted.statusCode).toBe(200);

    await expectUnknown(adminInvite, bearer(asAdmin.accessToken));
    await expectUnknown(keyInvite, bearer(byKey.accessToken));
    expect((await invitationRow(adminInvite))?.withdrawn_reason).toBe('inviter_lost_power');
    expect((await invitationRow(keyInvite))?.withdrawn_reason).toBe('api_key_revoked');
    const joined = await accept(memberInvite, bearer(asMember.accessToken));
    expect(joined.statusCode).toBe(200);
    expect(await membersOf(orgId, [asAdmin.userId, asMember.userId, byKey.userId])).toEqual([{ user_id: asMember.userId, role: 'member' }]);
  });

  it('taking members.invite away withdraws every invitation they sent', async () => {
    const { ob, admin, orgId } = await orgWithAdmin();
    await setMember(ob, orgId, admin.userId, { role: 'member', permissions: { 'members.invite': true } });
    const guest = await signUp(h);
    const token = tokenOf(await invite(bearer(admin.accessToken), orgId, guest.email, 'viewer'));
    await setMember(ob, orgId, admin.userId, { permissions: { 'members.invite': false } });
    await expectUnknown(token, bearer(guest.accessToken));
    expect(await membersOf(orgId, [guest.userId])).toEqual([]);
  });
});

describe('an API key that sent invitations', () => {
  it('revoked by hand: its pending invitations are withdrawn (404); its maker still invites by session', async () => {
    const { ob, ab, orgId, keyId, kb } = await orgWithAdmin();
    const [viaKey, viaSession] = [await signUp(h), await signUp(h)];
    const keyToken = tokenOf(await invite(kb, orgId, viaKey.email, 'member', 'api'));
    expect((await h.request({ method: 'DELETE', url: `/organizations/${orgId}/api-keys/${keyId}`, headers: ob })).statusCode).toBe(200);
    await expectUnknown(keyToken, bearer(viaKey.accessToken));
    expect((await invitationRow(keyToken))?.withdrawn_reason).toBe('api_key_revoked');

    const sessionToken = tokenOf(await invite(ab, orgId, viaSession.email, 'member'));
    expect((await accept(sessionToken, bearer(viaSession.accessToken))).statusCode).toBe(200);
    expect(await membersOf(orgId, [viaKey.userId, viaSession.userId])).toEqual([{ user_id: viaSession.userId, role: 'member' }]);
  });

  it('expired: its invitations can no longer be accepted', async () => {
    const { ab, orgId } = await orgWithAdmin();
    const key = await h.request({
      method: 'POST',
      url: `/organizations/${orgId}/api-keys`,
      headers: ab,
      payload: { name: 'short', scopes: ['read', 'write', 'admin'], expires_at: new Date(h.clock.now().getTime() + 10 * MINUTE).toISOString() },
    });
    const guest = await signUp(h);
    const token = tokenOf(await invite({ 'x-api-key': (key.json() as { data: { key: string } }).data.key }, orgId, guest.email, 'member'));
    // Ten minutes: the key is past its expiry, the guest's access token (15 minutes) is not.
    h.clock.advance(10 * MINUTE);
    await expectUnknown(token, bearer(guest.accessToken));
  });

  it('made by the operator belongs to no member: it cannot invite (403), and the operator API has no invitation route', async () => {
    const owner = await signUpWithOrganization(h);
    const made = await h.request({
      method: 'POST',
      url: `/api/v1/admin/organizations/${owner.organizationId}/api-keys`,
      headers: adminHeaders(h),
      payload: { name: 'operator key', scopes: ['read', 'write', 'admin'] },
    });
    expect(made.statusCode).toBe(201);
    const res = await invite({ 'x-api-key': (made.json() as { key: string }).key }, owner.organizationId, `${owner.organizationId}-x@example.com`, 'member');
    expect(res.statusCode).toBe(403);
    expect(json<{ error: { code: string } }>(res).error.code).toBe('FORBIDDEN');
    expect(await h.deps.db.query('SELECT 1 FROM invitations WHERE organization_id = $1', [owner.organizationId])).toEqual([]);
    const paths = Object.keys((h.app.swagger() as unknown as { paths: Record<string, unknown> }).paths);
    expect(paths.filter((p) => p.startsWith('/api/v1/admin') && /invit/i.test(p))).toEqual([]);
  });
});

describe('a legitimate invitation', () => {
  it("an owner's invitation, and one sent with a member's live key, are accepted as before", async () => {
    const { ob, orgId, kb, admin } = await orgWithAdmin();
    const [a, b] = [await signUp(h), await signUp(h)];
    const byOwner = tokenOf(await invite(ob, orgId, a.email, 'admin', 'api'));
    const byKey = tokenOf(await invite(kb, orgId, b.email, 'viewer'));
    expect((await accept(byOwner, bearer(a.accessToken))).statusCode).toBe(200);
    const joined = await accept(byKey, bearer(b.accessToken));
    expect(joined.statusCode).toBe(200);
    expect(json<{ data: { role: string; invited_by: string } }>(joined).data).toMatchObject({ role: 'viewer', invited_by: admin.userId });
  });
});
