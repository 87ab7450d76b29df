import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  signUp,
  signUpAsMember,
  signUpWithOrganization,
  unique,
} from '../../../test/harness.js';
import { authorize } from './rbac.js';
import { addMember } from './service.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const slug = () => unique('s').toLowerCase().replace(/[^a-z0-9-]/g, '-');
type Body = { success: boolean; data: Record<string, unknown>; error?: { code: string }; details?: { fields?: Array<{ field: string }> } };

describe('POST /organizations', () => {
  it('creates with 201: the creator is owner, a primary deployment at NEW_ORG_TIER with its secret shown once', async () => {
    const u = await signUp(h);
    const s = slug();
    const res = await h.request({ method: 'POST', url: '/organizations', headers: bearer(u.accessToken), payload: { name: 'Acme', slug: s } });
    expect(res.statusCode).toBe(201);
    const body = json<Body>(res);
    expect(body).toMatchObject({ success: true, data: { name: 'Acme', slug: s, tier: 'free', role: 'owner' } });
    const deployment = body.data.deployment as { id: string; tier: string; secret: string };
    expect(deployment.tier).toBe('sandbox');
    expect(deployment.secret).toMatch(/^cgds_/);
    const check = await h.request({
      method: 'POST',
      url: '/api/v1/entitlements/check',
      payload: { deployment_id: deployment.id, deployment_secret: deployment.secret },
    });
    expect(json(check)).toMatchObject({ status: 'active', tier: 'sandbox' });
    const member = await h.deps.db.query<{ role: string }>('SELECT role FROM organization_members WHERE organization_id = $1 AND user_id = $2', [
      body.data.id,
      u.userId,
    ]);
    expect(member).toEqual([{ role: 'owner' }]);
  });

  it('the self-hosted /api/organizations path creates too (201)', async () => {
    const u = await signUp(h);
    const res = await h.request({ method: 'POST', url: '/api/organizations', headers: bearer(u.accessToken), payload: { name: 'Self', slug: slug(), tier: 'free' } });
    expect(res.statusCode).toBe(201);
    expect(json<Body>(res).data.tier).toBe('free');
    // A paid plan is not for the asking here either (plan.test.ts covers the rule).
    const paid = await h.request({ method: 'POST', url: '/api/organizations', headers: bearer(u.accessToken), payload: { name: 'Paid', slug: slug(), tier: 'pro' } });
    expect(paid.statusCode).toBe(403);
  });

  it('refuses a duplicate slug with 409 and leaves nothing half-created', async () => {
    const u = await signUp(h);
    const s = slug();
    await h.request({ method: 'POST', url: '/organizations', headers: bearer(u.accessToken), payload: { name: 'One', slug: s } });
    const before = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM deployments');
    const res = await h.request({ method: 'POST', url: '/organizations', headers: bearer(u.accessToken), payload: { name: 'Two', slug: s } });
    expect(res.statusCode).toBe(409);
    expect(json<Body>(res).error?.code).toBe('CONFLICT');
    const orgs = await h.deps.db.query('SELECT 1 FROM organizations WHERE name = $1 AND slug = $2', ['Two', s]);
    expect(orgs).toHaveLength(0);
    const after = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM deployments');
    expect(after[0]!.n).toBeLessThanOrEqual(before[0]!.n + 1); // other tests may create concurrently on PostgreSQL
  });

  it('refuses a bad slug, a missing name and an unknown tier with 400 naming the field', async () => {
    const u = await signUp(h);
    for (const [payload, field] of [
      [{ name: 'x', slug: 'Bad_Slug' }, 'slug'],
      [{ name: 'x', slug: '-lead' }, 'slug'],
      [{ slug: slug() }, 'name'],
      [{ name: 'x', slug: slug(), tier: 'gold' }, 'tier'],
      [{ name: 'x'.repeat(201), slug: slug() }, 'name'],
    ] as const) {
      const res = await h.request({ method: 'POST', url: '/organizations', headers: bearer(u.accessToken), payload });
      expect(res.statusCode).toBe(400);
      const body = json<Body>(res);
      expect(body.error?.code).toBe('VALIDATION_ERROR');
      expect(body.details?.fields?.map((f) => f.field)).toContain(field);
    }
  });
});

describe('reading, updating and deleting', () => {
  it('lists the caller’s organizations as an array with cursor pagination', async () => {
    const u = await signUp(h);
    for (let i = 0; i < 3; i++) {
      await h.request({ method: 'POST', url: '/organizations', headers: bearer(u.accessToken), payload: { name: `O${i}`, slug: slug() } });
      h.clock.advance(1000);
    }
    const first = json<{ data: Array<{ name: string }>; meta: { next_cursor: string | null } }>(
      await h.request({ method: 'GET', url: '/organizations?limit=2', headers: bearer(u.accessToken) }),
    );
    expect(first.data.map((o) => o.name)).toEqual(['O0', 'O1']);
    expect(first.meta.next_cursor).toBeTruthy();
    const second = json<{ data: Array<{ name: string }>; meta: { next_cursor: string | null } }>(
      await h.request({ method: 'GET', url: `/organizations?limit=2&cursor=${first.meta.next_cursor}`, headers: bearer(u.accessToken) }),
    );
    expect(second.data.map((o) => o.name)).toEqual(['O2']);
    expect(second.meta.next_cursor).toBeNull();
    const bad = await h.request({ method: 'GET', url: '/organizations?cursor=garbage', headers: bearer(u.accessToken) });
    expect(bad.statusCode).toBe(400);
  });

  it('owners and admins update; members and viewers get 403; strangers 404', async () => {
    const owner = await signUpWithOrganization(h);
    const roles = { admin: await signUp(h), member: await signUp(h), viewer: await signUp(h) };
    for (const [role, u] of Object.entries(roles)) {
      await addMember(h.ctx, { organizationId: owner.organizationId, userId: u.userId, role: role as 'admin' });
    }
    const stranger = await signUp(h);
    const put = (token: string, name: string) =>
      h.request({ method: 'PUT', url: `/organizations/${owner.organizationId}`, headers: bearer(token), payload: { name } });
    expect((await put(owner.accessToken, 'By owner')).statusCode).toBe(200);
    expect(json<Body>(await put(roles.admin.accessToken, 'By admin')).data.name).toBe('By admin');
    expect(json<Body>(await put(roles.member.accessToken, 'x')).error?.code).toBe('FORBIDDEN');
    expect((await put(roles.viewer.accessToken, 'x')).statusCode).toBe(403);
    expect((await put(stranger.accessToken, 'x')).statusCode).toBe(404);
    const get = await h.request({ method: 'GET', url: `/organizations/${owner.organizationId}`, headers: bearer(roles.viewer.accessToken) });
    expect(json<Body>(get).data).toMatchObject({ name: 'By admin', role: 'viewer' });
    expect((await h.request({ method: 'GET', url: `/organizations/${owner.organizationId}`, headers: bearer(stranger.accessToken) })).statusCode).toBe(404);
  });

  it('only the owner deletes; deletion is soft and every key and deployment secret stops at once', async () => {
    const owner = await signUpWithOrganization(h);
    const admin = await signUp(h);
    await addMember(h.ctx, { organizationId: owner.organizationId, userId: admin.userId, role: 'admin' });
    const del = (token: string) => h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}`, headers: bearer(token) });
    expect((await del(admin.accessToken)).statusCode).toBe(403);
    expect((await del(owner.accessToken)).statusCode).toBe(200);
    const check = await h.request({
      method: 'POST',
      url: '/api/v1/entitlements/check',
      payload: { deployment_id: owner.deploymentId, deployment_secret: owner.deploymentSecret },
    });
    expect(check.statusCode).toBe(401);
    expect((await h.request({ method: 'GET', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken) })).statusCode).toBe(404);
    const row = await h.deps.db.query<{ deleted_at: Date | null }>('SELECT deleted_at FROM organizations WHERE id = $1', [owner.organizationId]);
    expect(row[0]!.deleted_at).not.toBeNull();
    const audit = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE organization_id = $1 AND action = 'delete' AND resource_type = 'organization'", [
      owner.organizationId,
    ]);
    expect(audit).toHaveLength(1);
  });

  it('no API key can delete an organization, whatever its scopes (owner only)', async () => {
    const owner = await signUpWithOrganization(h);
    const key = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/api-keys`,
      headers: bearer(owner.accessToken),
      payload: { name: 'all scopes', scopes: ['read', 'write', 'admin'] },
    });
    expect(key.statusCode).toBe(201);
    const res = await h.request({
      method: 'DELETE',
      url: `/organizations/${owner.organizationId}`,
      headers: { 'x-api-key': json<{ data: { key: string } }>(key).data.key },
    });
    expect(res.statusCode).toBe(403);
    expect(json<Body>(res).error?.code).toBe('FORBIDDEN');
    const row = await h.deps.db.query<{ deleted_at: Date | null }>('SELECT deleted_at FROM organizations WHERE id = $1', [owner.organizationId]);
    expect(row[0]!.deleted_at).toBeNull();
  });
});

describe('GET /organizations lists what GET /organizations/{id} answers (docs/accounts.md, Organizations)', () => {
  type Listed = { data: Array<{ id: string; role: string | null }> };
  const list = async (headers: Record<string, string>) => {
    const res = await h.request({ method: 'GET', url: '/organizations', headers });
    expect(res.statusCode, res.body).toBe(200);
    return json<Listed>(res).data.map((o) => o.id);
  };
  const readOne = async (headers: Record<string, string>, id: string) => (await h.request({ method: 'GET', url: `/organizations/${id}`, headers })).statusCode;
  const revoke = async (owner: { accessToken: string; organizationId: string }, userId: string) => {
    const res = await h.request({
      method: 'PUT',
      url: `/organizations/${owner.organizationId}/users/${userId}`,
      headers: bearer(owner.accessToken),
      payload: { permissions: { 'organization.read': false } },
    });
    expect(res.statusCode, res.body).toBe(200);
  };

  it('a key without the read scope lists nothing; a read key lists its organization', async () => {
    const o = await signUpWithOrganization(h);
    const writeOnly = bearer((await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['write'] })).key);
    const reader = bearer((await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read'] })).key);
    expect(await readOne(writeOnly, o.organizationId)).toBe(403);
    expect(await list(writeOnly)).toEqual([]);
    expect(await readOne(reader, o.organizationId)).toBe(200);
    expect(await list(reader)).toEqual([o.organizationId]);
  });

  it("a member whose override removed organization.read, and that member's keys, no longer list it; their other organizations stay", async () => {
    const o = await signUpWithOrganization(h);
    const admin = await signUpAsMember(h, o.organizationId, 'admin');
    const other = await h.request({ method: 'POST', url: '/organizations', headers: bearer(admin.accessToken), payload: { name: 'Own', slug: slug() } });
    expect(other.statusCode).toBe(201);
    const ownId = json<Body>(other).data.id as string;
    const key = bearer((await createKeyOverHttp(h, bearer(admin.accessToken), o.organizationId, { scopes: ['read'] })).key);
    expect((await list(bearer(admin.accessToken))).sort()).toEqual([o.organizationId, ownId].sort());
    expect(await list(key)).toEqual([o.organizationId]);

    await revoke(o, admin.userId);
    expect(await readOne(bearer(admin.accessToken), o.organizationId)).toBe(403);
    expect(await list(bearer(admin.accessToken))).toEqual([ownId]);
    expect(await readOne(key, o.organizationId)).toBe(403);
    expect(await list(key)).toEqual([]);
    // The owner, who holds it, still lists the organization.
    expect(await list(bearer(o.accessToken))).toEqual([o.organizationId]);
  });
});

describe('organization ids in any case (docs/input.md, UUID ids)', () => {
  it('an API key reads its own organization written in upper case, as a user does', async () => {
    const o = await signUpWithOrganization(h);
    const key = bearer((await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read'] })).key);
    const upper = o.organizationId.toUpperCase();
    for (const path of [`/organizations/${upper}`, `/organizations/${upper}/usage/records`]) {
      for (const headers of [bearer(o.accessToken), key]) {
        const res = await h.request({ method: 'GET', url: path, headers });
        expect(res.statusCode, `${path}: ${res.body}`).toBe(200);
      }
    }
    // Another organization's id in upper case is still 404 for the key.
    const other = await signUpWithOrganization(h);
    expect((await h.request({ method: 'GET', url: `/organizations/${other.organizationId.toUpperCase()}`, headers: key })).statusCode).toBe(404);
  });

  it('authorize compares a key with its organization whatever the case it is given in', async () => {
    const o = await signUpWithOrganization(h);
    const made = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read'] });
    const ctx = { ...h.ctx, actor: { type: 'api_key' as const, apiKeyId: made.id, organizationId: o.organizationId } };
    await expect(authorize(ctx, o.organizationId.toUpperCase(), 'organization.read')).resolves.toMatchObject({ role: null });
  });
});
