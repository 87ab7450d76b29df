import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, json, signUp } from '../../../test/harness.js';
import { memberFixtures } from '../../../test/member-fixtures.js';

/**
 * A key never holds more than its creator (docs/accounts.md, Powers), written as the attacks a security review found: a member
 * granted only `api_keys.manage` minted an `admin` key, read the audit log and promoted themselves;
 * keys and pending invitations outlived a demotion or a removal (a removed admin re-joined through
 * their own key).
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;
const makeKey = (headers: Headers, orgId: string, scopes: string[]) =>
  h.request({ method: 'POST', url: `/organizations/${orgId}/api-keys`, headers, payload: { name: 'mine', scopes } });
const removeMember = (headers: Headers, orgId: string, userId: string) =>
  h.request({ method: 'DELETE', url: `/organizations/${orgId}/users/${userId}`, headers });
const readAudit = (headers: Headers, orgId: string) => h.request({ method: 'GET', url: `/organizations/${orgId}/audit-logs`, headers });
const keyOf = (res: { json(): unknown }) => (res.json() as { data: { key: string; id: string } }).data;
const codeOf = (res: { json(): unknown }) => (res.json() as { error: { code: string } }).error.code;

const { setMember, orgWith } = memberFixtures(() => h);

async function revokedEvents(orgId: string): Promise<string[]> {
  const rows = await h.deps.db.query<{ data: { api_key_id: string } }>(
    "SELECT data FROM outbox_events WHERE organization_id = $1 AND type = 'api_key.revoked'",
    [orgId],
  );
  return rows.map((r) => r.data.api_key_id);
}

describe('a member granted only api_keys.manage', () => {
  it('cannot mint an admin key, so cannot read the audit log or promote themselves; read/write keys are fine', async () => {
    const { ob, user, ub, orgId } = await orgWith('member');
    expect((await setMember(ob, orgId, user.userId, { permissions: { 'api_keys.manage': true } })).statusCode).toBe(200);

    const admin = await makeKey(ub, orgId, ['read', 'write', 'admin']);
    expect(admin.statusCode).toBe(403);
    expect(codeOf(admin)).toBe('FORBIDDEN');
    const rw = await makeKey(ub, orgId, ['read', 'write']);
    expect(rw.statusCode).toBe(201);

    const key = bearer(keyOf(rw).key);
    expect((await readAudit(key, orgId)).statusCode).toBe(403);
    const promote = await setMember(key, orgId, user.userId, { role: 'admin' });
    expect(promote.statusCode).toBe(403);
    const roles = await h.deps.db.query<{ role: string }>('SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2', [
      orgId,
      user.userId,
    ]);
    expect(roles).toEqual([{ role: 'member' }]);
  });

  it('loses the keys it made when the grant is taken away', async () => {
    const { ob, user, ub, orgId } = await orgWith('member');
    await setMember(ob, orgId, user.userId, { permissions: { 'api_keys.manage': true } });
    const made = keyOf(await makeKey(ub, orgId, ['read', 'write']));
    expect((await readAudit(bearer(made.key), orgId)).statusCode).toBe(403); // works (403 for scope, not 401)
    expect((await setMember(ob, orgId, user.userId, { permissions: { 'api_keys.manage': null } })).statusCode).toBe(200);
    const res = await h.request({ method: 'GET', url: `/organizations/${orgId}`, headers: bearer(made.key) });
    expect(res.statusCode).toBe(401);
    expect(await revokedEvents(orgId)).toContain(made.id);
  });
});

describe('a demoted admin', () => {
  it("loses the admin keys they made (the key stops at once: 401), with an audit row and an api_key.revoked event", async () => {
    const { ob, user, ub, orgId } = await orgWith('admin');
    const made = keyOf(await makeKey(ub, orgId, ['read', 'write', 'admin']));
    expect((await readAudit(bearer(made.key), orgId)).statusCode).toBe(200);

    expect((await setMember(ob, orgId, user.userId, { role: 'member' })).statusCode).toBe(200);
    const after = await readAudit(bearer(made.key), orgId);
    expect(after.statusCode).toBe(401);
    // Nor can the key promote its maker back.
    expect((await setMember(bearer(made.key), orgId, user.userId, { role: 'admin' })).statusCode).toBe(401);
    expect(await revokedEvents(orgId)).toContain(made.id);
    const audit = await h.deps.db.query<{ metadata: { reason: string } }>(
      "SELECT metadata FROM audit_logs WHERE organization_id = $1 AND action = 'revoke' AND resource_id = $2",
      [orgId, made.id],
    );
    expect(audit).toEqual([{ metadata: expect.objectContaining({ reason: 'creator_lost_power' }) }]);
  });

  it('a key minted by their key belongs to them and is taken back with it', async () => {
    const { ob, user, ub, orgId } = await orgWith('admin');
    const first = keyOf(await makeKey(ub, orgId, ['read', 'write', 'admin']));
    const second = await makeKey(bearer(first.key), orgId, ['read', 'admin']);
    expect(second.statusCode).toBe(201);
    const rows = await h.deps.db.query<{ created_by: string }>('SELECT created_by FROM api_keys WHERE id = $1', [keyOf(second).id]);
    expect(rows).toEqual([{ created_by: user.userId }]);
    await setMember(ob, orgId, user.userId, { role: 'viewer' });
    for (const key of [first.key, keyOf(second).key]) {
      expect((await h.request({ method: 'GET', url: `/organizations/${orgId}`, headers: bearer(key) })).statusCode).toBe(401);
    }
  });

  it('racing a demotion with key creation never leaves the demoted member an admin key', async () => {
    for (let round = 0; round < 5; round++) {
      const { ob, user, ub, orgId } = await orgWith('admin');
      const [, created] = await Promise.all([setMember(ob, orgId, user.userId, { role: 'member' }), makeKey(ub, orgId, ['read', 'admin'])]);
      expect([201, 403]).toContain(created.statusCode);
      const live = await h.deps.db.query(
        "SELECT id FROM api_keys WHERE organization_id = $1 AND created_by = $2 AND revoked_at IS NULL AND 'admin' = ANY(scopes)",
        [orgId, user.userId],
      );
      expect(live).toEqual([]);
    }
  });
});

describe('a removed admin', () => {
  it('cannot come back through their own key or their pending invitation', async () => {
    const { ob, user, ub, orgId } = await orgWith('admin');
    const made = keyOf(await makeKey(ub, orgId, ['read', 'write', 'admin']));
    const alt = await signUp(h, 'Alt account');
    const invited = await h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers: ub, payload: { email: alt.email, role: 'admin' } });
    expect(invited.statusCode).toBe(201);
    const token = (json(invited).data as { token: string }).token;

    expect((await removeMember(ob, orgId, user.userId)).statusCode).toBe(200);

    // The key is refused: it cannot invite the removed user back, nor do anything else.
    const reinvite = await h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers: bearer(made.key), payload: { email: user.email, role: 'admin' } });
    expect(reinvite.statusCode).toBe(401);
    // The invitation they sent is withdrawn.
    const accept = await h.request({ method: 'POST', url: `/invitations/${token}/accept`, headers: bearer(alt.accessToken) });
    expect(accept.statusCode).toBeGreaterThanOrEqual(400);
    const members = await h.deps.db.query('SELECT user_id FROM organization_members WHERE organization_id = $1 AND user_id = ANY($2::uuid[])', [
      orgId,
      [user.userId, alt.userId],
    ]);
    expect(members).toEqual([]);
    const withdrawn = await h.deps.db.query<{ revoked: boolean }>(
      'SELECT revoked_at IS NOT NULL AS revoked FROM invitations WHERE organization_id = $1 AND lower(email) = lower($2)',
      [orgId, alt.email],
    );
    expect(withdrawn).toEqual([{ revoked: true }]);
  });

  it('a member who leaves on their own loses their keys too', async () => {
    const { user, ub, orgId } = await orgWith('admin');
    const made = keyOf(await makeKey(ub, orgId, ['read']));
    expect((await removeMember(ub, orgId, user.userId)).statusCode).toBe(200);
    expect((await h.request({ method: 'GET', url: `/organizations/${orgId}`, headers: bearer(made.key) })).statusCode).toBe(401);
  });
});

describe('inviting', () => {
  it('a member granted members.invite invites members and viewers, not admins (no escalation through a second account)', async () => {
    const { ob, user, ub, orgId } = await orgWith('member');
    expect((await setMember(ob, orgId, user.userId, { permissions: { 'members.invite': true } })).statusCode).toBe(200);
    const invite = (role: string) =>
      h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers: ub, payload: { email: `${role}-${Date.now()}@example.com`, role } });
    const admin = await invite('admin');
    expect(admin.statusCode).toBe(403);
    expect(codeOf(admin)).toBe('FORBIDDEN');
    expect((await invite('member')).statusCode).toBe(201);
    expect((await invite('viewer')).statusCode).toBe(201);
    // Taking the grant away withdraws what it sent.
    await setMember(ob, orgId, user.userId, { permissions: { 'members.invite': null } });
    const open = await h.deps.db.query(
      'SELECT id FROM invitations WHERE organization_id = $1 AND invited_by = $2 AND revoked_at IS NULL AND accepted_at IS NULL',
      [orgId, user.userId],
    );
    expect(open).toEqual([]);
  });
});
