
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  createTenant,
  type Harness,
  json,
  signUpWithOrganization,
} from '../../../test/harness.js';
import { addMember } from '../organizations/service.js';

let h: Harness;
beforeAll(async () => {
  // Until selfHostedRoutes registers it, the test adds the route itself (and stops once it is wired in).
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const me = (headers: Record<string, string>) => h.request({ method: 'GET', url: '/api/users/me', headers });

describe('GET /api/users/me', () => {
  it('a user: its profile (as /auth/me) and its organizations with roles', async () => {
    const u = await signUpWithOrganization(h);
    const other = await signUpWithOrganization(h);
    h.clock.advance(1000);
    await addMember(h.ctx, { organizationId: other.organizationId, userId: u.userId, role: 'viewer' });

    const res = await me(bearer(u.accessToken));
    expect(res.statusCode).toBe(200);
    const data = json<{ data: Record<string, unknown> & { organizations: Array<Record<string, unknown>> } }>(res).data;
    const profile = json<{ data: Record<string, unknown> }>(await h.request({ method: 'GET', url: '/auth/me', headers: bearer(u.accessToken) })).data;
    expect(data).toMatchObject(profile);
    expect(data.organizations.map((o) => [o.id, o.role])).toEqual([
      [u.organizationId, 'owner'],
      [other.organizationId, 'viewer'],
    ]);
    expect(data.organizations[0]).toMatchObject({ slug: expect.any(String), tier: 'free', joined_at: expect.any(String) });
  });

  it('an API key: the key and its creator while a member, without the creator’s other organizations', async () => {
    const u = await signUpWithOrganization(h);
    const key = await createKeyOverHttp(h, bearer(u.accessToken), u.organizationId, { name: 'cli', scopes: ['read'] });
    for (const headers of [{ 'x-api-key': key.key }, bearer(key.key)]) {
      const res = await me(headers);
      expect(res.statusCode).toBe(200);
      const data = json<{ data: { api_key: Record<string, unknown>; user: Record<string, unknown> | null } }>(res).data;
      expect(data.api_key).toEqual({
        id: key.id,
        organization_id: u.organizationId,
        name: 'cli',
        key_prefix: key.key_prefix,
        scopes: ['read'],
        expires_at: null,
        created_at: expect.any(String),
      });
      expect(data.user).toMatchObject({ id: u.userId, email: u.email });
    }
    expect(json(await me({ 'x-api-key': key.key }))).not.toHaveProperty('data.organizations');
    // The creator is no member any more (a removal also revokes the key; here only the membership goes):
    // the key holds nothing its creator does not, so it is refused.
    await h.deps.db.query('DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2', [u.organizationId, u.userId]);
    const gone = await me({ 'x-api-key': key.key });
    expect(gone.statusCode, gone.body).toBe(403);
    expect(json(gone)).toMatchObject({ success: false, error: { code: 'FORBIDDEN' } });
  });

  it('a key made by the operator has no user; a key without read scope gets 403; revoked or absent is 401', async () => {
    const t = await createTenant(h, { scopes: ['read'] });
    const res = await me({ 'x-api-key': t.apiKey });
    expect(res.statusCode).toBe(200);
    expect(json<{ data: { user: unknown } }>(res).data.user).toBeNull();

    const owner = await signUpWithOrganization(h);
    const writeOnly = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['write'] });
    const forbidden = await me({ 'x-api-key': writeOnly.key });
    expect(forbidden.statusCode).toBe(403);
    expect(json(forbidden)).toMatchObject({ success: false, error: { code: 'FORBIDDEN' } });

    await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}/api-keys/${writeOnly.id}`, headers: bearer(owner.accessToken) });
    expect((await me({ 'x-api-key': writeOnly.key })).statusCode).toBe(401);
    const none = await me({});
    expect(none.statusCode).toBe(401);
    expect(json(none)).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
  });

  it('is in the OpenAPI document with its error responses, and registered once', async () => {
    const doc = json<{ paths: Record<string, Record<string, { summary?: string; responses: Record<string, unknown> }>> }>(
      await h.request({ method: 'GET', url: '/openapi.json' }),
    );
    const op = doc.paths['/api/users/me']?.get;
    expect(op?.summary).toBeTruthy();
    expect(Object.keys(op!.responses)).toEqual(expect.arrayContaining(['200', '401', '403', '500', '503']));
    expect(h.app.routeList.filter((r) => r.url === '/api/users/me' && r.method === 'GET')).toHaveLength(1);
  });
});
