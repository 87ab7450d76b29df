import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, joinByInvitation } from '../../../test/harness.js';
import { memberFixtures } from '../../../test/member-fixtures.js';

/**
 * Nobody acts above their own role, and a key never holds more than its creator (docs/accounts.md,
 * Powers), written as the attacks a security review found: a member granted `members.update` made
 * themself admin and demoted admins; a member granted `api_keys.manage` minted a `write` key that
 * rotated the deployment secret their own role may not touch; an admin denied a permission got it back
 * through an admin key, new or old.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;
const { setMember, orgWith } = memberFixtures(() => h);
const makeKey = async (headers: Headers, orgId: string, scopes: string[]) => {
  const res = await h.request({ method: 'POST', url: `/organizations/${orgId}/api-keys`, headers, payload: { name: 'mine', scopes } });
  expect(res.statusCode, res.body).toBe(201);
  return bearer((res.json() as { data: { key: string } }).data.key);
};
const get = (headers: Headers, url: string) => h.request({ method: 'GET', url, headers });
const roleOf = async (orgId: string, userId: string) =>
  (await h.deps.db.query<{ role: string }>('SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, userId]))[0]
    ?.role;


describe('role changes stay at or below the caller', () => {
  it('a member granted members.update and members.remove cannot make themself admin, nor demote or remove an admin; below them they can', async () => {
    const { ob, user, ub, orgId } = await orgWith('member');
    const admin = await joinByInvitation(h, ob, orgId, 'admin');
    const viewer = await joinByInvitation(h, ob, orgId, 'viewer');
    expect((await setMember(ob, orgId, user.userId, { permissions: { 'members.update': true, 'members.remove': true } })).statusCode).toBe(200);

    const promote = await setMember(ub, orgId, user.userId, { role: 'admin' });
    expect(promote.statusCode, promote.body).toBe(403);
    expect((await setMember(ub, orgId, admin.userId, { role: 'viewer' })).statusCode).toBe(403);
    expect((await h.request({ method: 'DELETE', url: `/organizations/${orgId}/users/${admin.userId}`, headers: ub })).statusCode).toBe(403);
    expect((await setMember(ub, orgId, viewer.userId, { role: 'admin' })).statusCode).toBe(403);
    expect(await roleOf(orgId, user.userId)).toBe('member');
    expect(await roleOf(orgId, admin.userId)).toBe('admin');
    expect(await roleOf(orgId, viewer.userId)).toBe('viewer');

    // At or below their own role, the grants work.
    expect((await setMember(ub, orgId, viewer.userId, { role: 'member' })).statusCode).toBe(200);
    expect(await roleOf(orgId, viewer.userId)).toBe('member');
    expect((await h.request({ method: 'DELETE', url: `/organizations/${orgId}/users/${viewer.userId}`, headers: ub })).statusCode).toBe(200);
  });

  it('an admin may still manage admins and members; an admin key acts with its creator’s role', async () => {
    const { ob, user, ub, orgId } = await orgWith('admin');
    const other = await joinByInvitation(h, ob, orgId, 'admin');
    expect((await setMember(ub, orgId, other.userId, { role: 'member' })).statusCode).toBe(200);
    const key = await makeKey(ub, orgId, ['read', 'write', 'admin']);
    expect((await setMember(key, orgId, other.userId, { role: 'admin' })).statusCode).toBe(200);
    // The creator demoted to member: their admin key is taken back (docs/accounts.md, Powers).
    expect((await setMember(ob, orgId, user.userId, { role: 'member' })).statusCode).toBe(200);
    expect((await setMember(key, orgId, other.userId, { role: 'viewer' })).statusCode).toBe(401);
  });
});

describe('a demotion takes the higher role’s grants back; deleting stays an owner’s', () => {
  it('a co-owner who granted themself permissions, demoted to viewer, keeps none of them and cannot delete the organization', async () => {
    const { owner, ob, orgId } = await orgWith('viewer');
    const coOwner = await joinByInvitation(h, ob, orgId, 'owner');
    const cb = bearer(coOwner.accessToken);
    // While an owner, the grants look like no-ops: an owner holds everything.
    const self = await setMember(cb, orgId, coOwner.userId, { permissions: { 'organization.delete': true, 'members.update': true, 'billing.manage': true } });
    expect(self.statusCode, self.body).toBe(200);
    expect((await setMember(ob, orgId, coOwner.userId, { role: 'viewer' })).statusCode).toBe(200);
    const grants = await h.deps.db.query('SELECT 1 FROM user_permissions WHERE organization_id = $1 AND user_id = $2 AND granted', [orgId, coOwner.userId]);
    expect(grants).toEqual([]);
    const del = await h.request({ method: 'DELETE', url: `/organizations/${orgId}`, headers: cb });
    expect(del.statusCode, del.body).toBe(403);
    // A grant made in the same request as the demotion is what the demoter asked for, and stays.
    const again = await joinByInvitation(h, ob, orgId, 'admin');
    expect((await setMember(ob, orgId, again.userId, { role: 'member', permissions: { 'templates.manage': true } })).statusCode).toBe(200);
    expect(await h.deps.db.query('SELECT 1 FROM user_permissions WHERE organization_id = $1 AND user_id = $2 AND granted', [orgId, again.userId])).toHaveLength(1);
    expect(await roleOf(orgId, owner.userId)).toBe('owner');
  });

  it('an admin an owner granted organization.delete still cannot delete it: deleting is an owner’s, by role', async () => {
    const { ob, user, ub, orgId } = await orgWith('admin');
    expect((await setMember(ob, orgId, user.userId, { permissions: { 'organization.delete': true } })).statusCode).toBe(200);
    const del = await h.request({ method: 'DELETE', url: `/organizations/${orgId}`, headers: ub });
    expect(del.statusCode, del.body).toBe(403);
    const [org] = await h.deps.db.query<{ deleted_at: Date | null }>('SELECT deleted_at FROM organizations WHERE id = $1', [orgId]);
    expect(org!.deleted_at).toBeNull();
    expect((await h.request({ method: 'DELETE', url: `/organizations/${orgId}`, headers: ob })).statusCode).toBe(200);
  });
});

describe('a key never holds more than its creator', () => {
  it('a member or viewer granted api_keys.manage: a write key cannot rotate the deployment secret or rename the organization', async () => {
    for (const role of ['member', 'viewer'] as const) {
      const { owner, ob, user, ub, orgId } = await orgWith(role);
      expect((await setMember(ob, orgId, user.userId, { permissions: { 'api_keys.manage': true } })).statusCode).toBe(200);
      const key = await makeKey(ub, orgId, ['read', 'write']);
      const rotate = await h.request({ method: 'POST', url: `/organizations/${orgId}/deployments/${owner.deploymentId}/secret`, headers: key });
      expect(rotate.statusCode, `${role}: ${rotate.body}`).toBe(403);
      const rename = await h.request({ method: 'PUT', url: `/organizations/${orgId}`, headers: key, payload: { name: 'pwned' } });
      expect(rename.statusCode, role).toBe(403);
      // The owner's deployment secret still works.
      const quota = await get({ 'x-deployment-id': owner.deploymentId, 'x-deployment-secret': owner.deploymentSecret }, '/api/v1/ai/quota');
      expect(quota.statusCode, role).toBe(200);
      // What the creator may do, the key may: reading the organization's deployments.
      expect((await get(key, `/organizations/${orgId}/deployments`)).statusCode, role).toBe(200);
    }
  });

  it('a viewer granted api_keys.manage: a read key cannot read the billing a viewer may not read', async () => {
    const { ob, user, ub, orgId } = await orgWith('viewer');
    expect((await setMember(ob, orgId, user.userId, { permissions: { 'api_keys.manage': true } })).statusCode).toBe(200);
    const key = await makeKey(ub, orgId, ['read']);
    for (const url of [`/billing/invoices?organization_id=${orgId}`, `/billing/usage?organization_id=${orgId}`]) {
      expect((await get(ub, url)).statusCode, url).toBe(403);
      expect((await get(key, url)).statusCode, url).toBe(403);
    }
  });

  it('an admin denied permissions cannot use them through an admin key, one made before the denial or after', async () => {
    const { owner, ob, user, ub, orgId } = await orgWith('admin');
    const victim = await joinByInvitation(h, ob, orgId, 'admin');
    const before = await makeKey(ub, orgId, ['read', 'write', 'admin']);
    expect(
      (await setMember(ob, orgId, user.userId, { permissions: { 'members.update': false, 'deployments.manage': false, 'audit.read': false } })).statusCode,
    ).toBe(200);
    const after = await makeKey(ub, orgId, ['read', 'write', 'admin']);
    for (const key of [before, after]) {
      expect((await setMember(key, orgId, victim.userId, { role: 'viewer' })).statusCode).toBe(403);
      const rotate = await h.request({ method: 'POST', url: `/organizations/${orgId}/deployments/${owner.deploymentId}/secret`, headers: key });
      expect(rotate.statusCode).toBe(403);
      expect((await get(key, `/organizations/${orgId}/audit-logs`)).statusCode).toBe(403);
    }
    expect(await roleOf(orgId, victim.userId)).toBe('admin');
    // What the admin still holds, the keys still do.
    expect((await get(before, `/organizations/${orgId}/users`)).statusCode).toBe(200);
  });
});
