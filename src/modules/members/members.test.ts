import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, joinByInvitation, json, signUp, signUpWithOrganization } from '../../../test/harness.js';
import { createApiKey, type Scope } from '../api-keys/service.js';
import { PERMISSION_NAMES } from './schemas.js';

let h: Harness;
let published = 0;
beforeAll(async () => {
  h = await createHarness();
  h.deps.bus.subscribe('resolve-cache', () => {
    published += 1;
  });
});
afterAll(async () => {
  await h.close();
});

type Member = { id: string; user_id: string; email: string; full_name: string | null; role: string; invited_by: string | null; joined_at: string; permissions: Record<string, boolean> };
type Err = { success: false; error: { code: string; message: string }; details: { fields?: Array<{ field: string }> } };

const list = (headers: Record<string, string>, orgId: string, query = '') =>
  h.request({ method: 'GET', url: `/organizations/${orgId}/users${query}`, headers });
const put = (headers: Record<string, string>, orgId: string, userId: string, payload: unknown) =>
  h.request({ method: 'PUT', url: `/organizations/${orgId}/users/${userId}`, headers, payload: payload as Record<string, unknown> });
const remove = (headers: Record<string, string>, orgId: string, userId: string) =>
  h.request({ method: 'DELETE', url: `/organizations/${orgId}/users/${userId}`, headers });
const invite = (headers: Record<string, string>, orgId: string, payload: Record<string, unknown>) =>
  h.request({ method: 'POST', url: `/organizations/${orgId}/users`, headers, payload });
/** A key of `orgId` made by `createdBy` (a key-sent invitation acts for its maker: docs/accounts.md). */
const keyFor = async (orgId: string, scopes: Scope[], createdBy: string | null = null) =>
  bearer((await createApiKey(h.ctx, { organizationId: orgId, name: 'k', scopes, createdBy })).key);
const codeOf = (res: { json(): unknown }) => (res.json() as Err).error.code;

async function orgWithRoles() {
  const owner = await signUpWithOrganization(h);
  const ob = bearer(owner.accessToken);
  const admin = await joinByInvitation(h, ob, owner.organizationId, 'admin');
  const member = await joinByInvitation(h, ob, owner.organizationId, 'member');
  const viewer = await joinByInvitation(h, ob, owner.organizationId, 'viewer');
  return { owner, admin, member, viewer, orgId: owner.organizationId };
}

async function auditRows(orgId: string, action: string) {
  return h.deps.db.query<{ action: string; resource_type: string; resource_id: string; user_id: string | null; actor: string; metadata: Record<string, unknown> }>(
    'SELECT * FROM audit_logs WHERE organization_id = $1 AND action = $2 ORDER BY created_at',
    [orgId, action],
  );
}

describe('GET /organizations/{id}/users', () => {
  it('lists members with email, name, role, inviter and overrides, paginated by cursor', async () => {
    const { owner, admin, member, viewer, orgId } = await orgWithRoles();
    const first = await list(bearer(viewer.accessToken), orgId, '?limit=3');
    expect(first.statusCode).toBe(200);
    const body = json<{ data: Member[]; meta: { next_cursor: string | null } }>(first);
    expect(body.data).toHaveLength(3);
    expect(body.meta.next_cursor).toEqual(expect.any(String));
    const second = json<{ data: Member[]; meta: { next_cursor: string | null } }>(
      await list(bearer(viewer.accessToken), orgId, `?limit=3&cursor=${body.meta.next_cursor}`),
    );
    expect(second.meta.next_cursor).toBeNull();
    const all = [...body.data, ...second.data];
    expect(all.map((m) => m.user_id).sort()).toEqual([owner.userId, admin.userId, member.userId, viewer.userId].sort());
    const a = all.find((m) => m.user_id === admin.userId)!;
    expect(a).toMatchObject({ email: admin.email, full_name: 'Joined admin', role: 'admin', invited_by: owner.userId, permissions: {} });
    expect(all.find((m) => m.user_id === owner.userId)).toMatchObject({ role: 'owner', invited_by: null });
  });

  it('refuses a cursor it did not give out and a limit out of range (400)', async () => {
    const owner = await signUpWithOrganization(h);
    const bad = await list(bearer(owner.accessToken), owner.organizationId, `?cursor=${Buffer.from('{"at":"x","id":"y"}').toString('base64url')}`);
    expect(bad.statusCode).toBe(400);
    expect((await list(bearer(owner.accessToken), owner.organizationId, '?limit=101')).statusCode).toBe(400);
  });

  it('another organization\'s user, and an unknown organization, get 404', async () => {
    const { orgId } = await orgWithRoles();
    const stranger = await signUpWithOrganization(h);
    for (const res of [
      await list(bearer(stranger.accessToken), orgId),
      await list(bearer(stranger.accessToken), '6f1c3d2e-0000-4000-8000-000000000000'),
      await invite(bearer(stranger.accessToken), orgId, { email: 'x@example.com' }),
      await put(bearer(stranger.accessToken), orgId, stranger.userId, { role: 'admin' }),
      await remove(bearer(stranger.accessToken), orgId, stranger.userId),
    ]) {
      expect(res.statusCode).toBe(404);
      expect(codeOf(res)).toBe('NOT_FOUND');
    }
  });
});

describe('RBAC per role', () => {
  it('owner and admin manage members; member and viewer read only (403 FORBIDDEN)', async () => {
    const { owner, admin, member, viewer, orgId } = await orgWithRoles();
    for (const [user, allowed] of [
      [owner, true],
      [admin, true],
      [member, false],
      [viewer, false],
    ] as const) {
      const headers = bearer(user.accessToken);
      expect((await list(headers, orgId)).statusCode).toBe(200);
      const inv = await invite(headers, orgId, { email: `${user.userId}-guest@example.com`, role: 'viewer' });
      expect(inv.statusCode, `invite as ${user.email}`).toBe(allowed ? 201 : 403);
      const target = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'viewer');
      const upd = await put(headers, orgId, target.userId, { role: 'member' });
      expect(upd.statusCode).toBe(allowed ? 200 : 403);
      const del = await remove(headers, orgId, target.userId);
      expect(del.statusCode).toBe(allowed ? 200 : 403);
      if (!allowed) expect(codeOf(del)).toBe('FORBIDDEN');
    }
  });

  it('API keys: members.read needs read, managing members needs the admin scope; another org\'s key gets 404', async () => {
    const { owner, viewer, orgId } = await orgWithRoles();
    const read = await keyFor(orgId, ['read']);
    const write = await keyFor(orgId, ['read', 'write']);
    const admin = await keyFor(orgId, ['read', 'write', 'admin'], owner.userId);
    expect((await list(read, orgId)).statusCode).toBe(200);
    expect((await list({ 'x-api-key': read.authorization!.slice(7) }, orgId)).statusCode).toBe(200);
    for (const key of [read, write]) {
      const res = await invite(key, orgId, { email: 'k@example.com' });
      expect(res.statusCode).toBe(403);
      expect(json<Err>(res).error.message).toContain('"admin" scope');
      expect((await put(key, orgId, viewer.userId, { role: 'member' })).statusCode).toBe(403);
    }
    expect((await invite(admin, orgId, { email: `${orgId}-k@example.com` })).statusCode).toBe(201);
    expect((await put(admin, orgId, viewer.userId, { role: 'member' })).statusCode).toBe(200);
    // A key grants what an admin could, never more.
    expect((await put(admin, orgId, viewer.userId, { permissions: { 'api_keys.manage': true } })).statusCode).toBe(200);
    expect((await put(admin, orgId, viewer.userId, { permissions: { 'organization.delete': true } })).statusCode).toBe(403);
    // A key is never an owner: it cannot touch an owner.
    const ownerChange = await put(admin, orgId, owner.userId, { role: 'admin' });
    expect(ownerChange.statusCode).toBe(403);
    const other = await signUpWithOrganization(h);
    expect((await list(await keyFor(other.organizationId, ['read', 'admin']), orgId)).statusCode).toBe(404);
    expect((await remove(admin, orgId, viewer.userId)).statusCode).toBe(200);
  });
});

describe('PUT /organizations/{id}/users/{userId}', () => {
  it('changes the role and writes an update audit row', async () => {
    const { owner, member, orgId } = await orgWithRoles();
    const res = await put(bearer(owner.accessToken), orgId, member.userId, { role: 'admin' });
    expect(res.statusCode).toBe(200);
    expect(json<{ data: Member }>(res).data).toMatchObject({ user_id: member.userId, role: 'admin' });
    const rows = await auditRows(orgId, 'update');
    expect(rows.at(-1)).toMatchObject({ resource_type: 'member', resource_id: member.userId, user_id: owner.userId, metadata: { role: { from: 'member', to: 'admin' } } });
  });

  it('sets, changes and removes permission overrides, and authorize() honours them', async () => {
    const { owner, viewer, orgId } = await orgWithRoles();
    const ob = bearer(owner.accessToken);
    const granted = await put(ob, orgId, viewer.userId, { permissions: { 'members.invite': true, 'members.read': false } });
    expect(granted.statusCode).toBe(200);
    expect(json<{ data: Member }>(granted).data.permissions).toEqual({ 'members.invite': true, 'members.read': false });
    // A viewer invites with their own role or below (organizations/powers.ts): a viewer, not a member.
    expect((await invite(bearer(viewer.accessToken), orgId, { email: `${viewer.userId}-m@example.com` })).statusCode).toBe(403);
    expect((await invite(bearer(viewer.accessToken), orgId, { email: `${viewer.userId}-x@example.com`, role: 'viewer' })).statusCode).toBe(201);
    expect((await list(bearer(viewer.accessToken), orgId)).statusCode).toBe(403);
    const cleared = await put(ob, orgId, viewer.userId, { permissions: { 'members.invite': null, 'members.read': null } });
    expect(json<{ data: Member }>(cleared).data.permissions).toEqual({});
    expect((await list(bearer(viewer.accessToken), orgId)).statusCode).toBe(200);
  });

  it('nobody grants a permission they do not hold (an admin cannot grant organization.delete)', async () => {
    const { admin, member, orgId } = await orgWithRoles();
    const res = await put(bearer(admin.accessToken), orgId, member.userId, { permissions: { 'organization.delete': true } });
    expect(res.statusCode).toBe(403);
    expect(codeOf(res)).toBe('FORBIDDEN');
    const ok = await put(bearer(admin.accessToken), orgId, member.userId, { permissions: { 'api_keys.manage': true } });
    expect(ok.statusCode).toBe(200);
  });

  it('only an owner makes or unmakes an owner; the last owner cannot be demoted (409)', async () => {
    const { owner, admin, member, orgId } = await orgWithRoles();
    const promote = await put(bearer(admin.accessToken), orgId, member.userId, { role: 'owner' });
    expect(promote.statusCode).toBe(403);
    const demoteOwner = await put(bearer(admin.accessToken), orgId, owner.userId, { role: 'viewer' });
    expect(demoteOwner.statusCode).toBe(403);
    const last = await put(bearer(owner.accessToken), orgId, owner.userId, { role: 'admin' });
    expect(last.statusCode).toBe(409);
    expect(codeOf(last)).toBe('CONFLICT');
    expect((await put(bearer(owner.accessToken), orgId, member.userId, { role: 'owner' })).statusCode).toBe(200);
    // Two owners now: one may step down, then the other is the last again.
    expect((await put(bearer(member.accessToken), orgId, owner.userId, { role: 'admin' })).statusCode).toBe(200);
    expect((await put(bearer(member.accessToken), orgId, member.userId, { role: 'admin' })).statusCode).toBe(409);
    const denyOwner = await put(bearer(member.accessToken), orgId, member.userId, { permissions: { 'members.read': false } });
    expect(denyOwner.statusCode).toBe(400);
    expect(json<Err>(denyOwner).details.fields?.map((f) => f.field)).toContain('permissions.members.read');
  });

  it('two owners demoting each other at once leave exactly one owner', async () => {
    const { owner, orgId } = await orgWithRoles();
    const second = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'owner');
    const [a, b] = await Promise.all([
      put(bearer(owner.accessToken), orgId, second.userId, { role: 'admin' }),
      put(bearer(second.accessToken), orgId, owner.userId, { role: 'admin' }),
    ]);
    // The loser is refused either as no longer an owner (403) or as the last owner's demoter (409).
    const codes = [a.statusCode, b.statusCode].sort();
    expect(codes[0]).toBe(200);
    expect([403, 409]).toContain(codes[1]);
    const owners = await h.deps.db.query("SELECT 1 FROM organization_members WHERE organization_id = $1 AND role = 'owner'", [orgId]);
    expect(owners).toHaveLength(1);
  });

  it('two owners leaving at once: one leaves, the other is the last owner (409)', async () => {
    for (let round = 0; round < 3; round++) {
      const { owner, orgId } = await orgWithRoles();
      const second = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'owner');
      const results = await Promise.all([remove(bearer(owner.accessToken), orgId, owner.userId), remove(bearer(second.accessToken), orgId, second.userId)]);
      expect(results.map((r) => r.statusCode).sort()).toEqual([200, 409]);
      const owners = await h.deps.db.query("SELECT 1 FROM organization_members WHERE organization_id = $1 AND role = 'owner'", [orgId]);
      expect(owners).toHaveLength(1);
    }
  });

  it('refuses bad input with 400 VALIDATION_ERROR naming the field; an unknown member is 404', async () => {
    const { owner, member, orgId } = await orgWithRoles();
    const ob = bearer(owner.accessToken);
    const cases: Array<[unknown, string]> = [
      [{ role: 'superuser' }, 'role'],
      [{ permissions: { 'members.fly': true } }, 'permissions.members.fly'],
      [{ permissions: { 'members.read': 'yes' } }, 'permissions.members.read'],
      [{ role: 'admin', extra: 1 }, 'extra'],
      [{}, 'body'],
    ];
    for (const [payload, field] of cases) {
      const res = await put(ob, orgId, member.userId, payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(codeOf(res)).toBe('VALIDATION_ERROR');
      expect(json<Err>(res).details.fields?.map((f) => f.field)).toContain(field);
    }
    const unknown = await put(ob, orgId, (await signUp(h)).userId, { role: 'admin' });
    expect(unknown.statusCode).toBe(404);
    expect((await put(ob, orgId, 'not-a-uuid', { role: 'admin' })).statusCode).toBe(404); // docs/input.md: a path id that is not a UUID
  });

  it('PERMISSION_NAMES is exactly the seeded permission table', async () => {
    const rows = await h.deps.db.query<{ name: string }>('SELECT name FROM permissions ORDER BY name');
    expect(rows.map((r) => r.name)).toEqual([...PERMISSION_NAMES].sort());
  });
});

describe('DELETE /organizations/{id}/users/{userId}', () => {
  it('removes a member (their overrides and default organization go too), audits it and drops the resolve cache', async () => {
    const { owner, member, orgId } = await orgWithRoles();
    await put(bearer(owner.accessToken), orgId, member.userId, { permissions: { 'billing.manage': true } });
    await h.deps.db.query('UPDATE users SET default_organization_id = $2 WHERE id = $1', [member.userId, orgId]);
    const before = published;
    const res = await remove(bearer(owner.accessToken), orgId, member.userId);
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ success: true, data: null });
    expect(published).toBeGreaterThan(before);
    expect(await h.deps.db.query('SELECT 1 FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, member.userId])).toHaveLength(0);
    expect(await h.deps.db.query('SELECT 1 FROM user_permissions WHERE organization_id = $1 AND user_id = $2', [orgId, member.userId])).toHaveLength(0);
    const u = await h.deps.db.query<{ default_organization_id: string | null }>('SELECT default_organization_id FROM users WHERE id = $1', [member.userId]);
    expect(u[0]!.default_organization_id).toBeNull();
    expect((await auditRows(orgId, 'remove')).at(-1)).toMatchObject({ resource_type: 'member', resource_id: member.userId, metadata: { role: 'member', left: false } });
    expect((await list(bearer(member.accessToken), orgId)).statusCode).toBe(404);
    expect((await remove(bearer(owner.accessToken), orgId, member.userId)).statusCode).toBe(404);
  });

  it('a viewer may leave without members.remove; the last owner may not leave or be removed (409)', async () => {
    const { owner, admin, viewer, orgId } = await orgWithRoles();
    const left = await remove(bearer(viewer.accessToken), orgId, viewer.userId);
    expect(left.statusCode).toBe(200);
    expect((await auditRows(orgId, 'remove')).at(-1)).toMatchObject({ metadata: { left: true } });
    const lastLeaves = await remove(bearer(owner.accessToken), orgId, owner.userId);
    expect(lastLeaves.statusCode).toBe(409);
    expect(codeOf(lastLeaves)).toBe('CONFLICT');
    const adminRemovesOwner = await remove(bearer(admin.accessToken), orgId, owner.userId);
    expect(adminRemovesOwner.statusCode).toBe(403);
    const second = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'owner');
    expect((await remove(bearer(second.accessToken), orgId, owner.userId)).statusCode).toBe(200);
    expect((await remove(bearer(second.accessToken), orgId, second.userId)).statusCode).toBe(409);
  });
});
