import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../lib/secrets.js';
import {
  bearer,
  createKeyOverHttp,
  createHarness,
  type Harness,
  json,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Fields = { error: { code: string }; details: { fields?: Array<{ field: string }> } };
type Key = Record<string, unknown> & { id: string };

const keysUrl = (orgId: string) => `/organizations/${orgId}/api-keys`;
const list = (headers: Record<string, string>, orgId: string, query = '') => h.request({ method: 'GET', url: `${keysUrl(orgId)}${query}`, headers });
const create = (headers: Record<string, string>, orgId: string, payload: Record<string, unknown>) =>
  h.request({ method: 'POST', url: keysUrl(orgId), headers, payload });
const revoke = (headers: Record<string, string>, orgId: string, keyId: string) =>
  h.request({ method: 'DELETE', url: `${keysUrl(orgId)}/${keyId}`, headers });
const stdioCheck = (key: string) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(key), payload: { tool_name: 'anything' } });
const apiKeyHeader = (key: string) => ({ 'x-api-key': key });

function expectError(res: { statusCode: number; json(): unknown }, status: number, code: string, field?: string) {
  expect(res.statusCode, JSON.stringify(res.json())).toBe(status);
  const body = res.json() as Fields;
  expect(body.error.code).toBe(code);
  if (field) expect(body.details.fields?.map((f) => f.field)).toContain(field);
}

describe('POST /organizations/{id}/api-keys', () => {
  it('creates a read key by default; the full key is shown once and only its hash is stored', async () => {
    const owner = await signUpWithOrganization(h);
    const res = await create(bearer(owner.accessToken), owner.organizationId, { name: 'CI' });
    expect(res.statusCode).toBe(201);
    const { data } = json<{ data: Key & { key: string; key_prefix: string } }>(res);
    expect(data.key).toMatch(/^cg_[0-9A-Za-z]{36}$/);
    expect(data).toMatchObject({
      organization_id: owner.organizationId,
      name: 'CI',
      key_prefix: data.key.slice(0, 10),
      scopes: ['read'],
      created_by: owner.userId,
      expires_at: null,
      last_used_at: null,
      revoked_at: null,
    });
    expect(res.body).not.toContain('key_hash');
    const stored = await h.deps.db.query<{ key_hash: string }>('SELECT key_hash FROM api_keys WHERE id = $1', [data.id]);
    expect(stored[0]!.key_hash).toBe(sha256Hex(data.key));
    const audit = await h.deps.db.query<{ user_id: string; metadata: { key_prefix: string } }>(
      "SELECT user_id, metadata FROM audit_logs WHERE resource_type = 'api_key' AND resource_id = $1 AND action = 'create'",
      [data.id],
    );
    expect(audit).toHaveLength(1);
    expect(audit[0]!.user_id).toBe(owner.userId);
    expect(JSON.stringify(audit[0]!.metadata)).not.toContain(data.key);
  });

  it('takes scopes and a future expiry', async () => {
    const owner = await signUpWithOrganization(h);
    const expires = new Date(h.clock.now().getTime() + 3600_000).toISOString();
    const res = await create(bearer(owner.accessToken), owner.organizationId, { name: 'x', scopes: ['read', 'write', 'admin'], expires_at: expires });
    expect(res.statusCode).toBe(201);
    expect(json<{ data: Key }>(res).data).toMatchObject({ scopes: ['read', 'write', 'admin'], expires_at: expires });
  });

  it('refuses bad input with 400 VALIDATION_ERROR naming the field', async () => {
    const owner = await signUpWithOrganization(h);
    const past = new Date(h.clock.now().getTime() - 1000).toISOString();
    const cases: Array<[Record<string, unknown>, string]> = [
      [{}, 'name'],
      [{ name: '' }, 'name'],
      [{ name: 'x'.repeat(201) }, 'name'],
      [{ name: 'x', scopes: ['root'] }, 'scopes.0'],
      [{ name: 'x', scopes: [] }, 'scopes'],
      [{ name: 'x', scopes: ['read', 'read'] }, 'scopes'],
      [{ name: 'x', expires_at: 'tomorrow' }, 'expires_at'],
      [{ name: 'x', expires_at: past }, 'expires_at'],
      [{ name: 'x', expires_at: h.clock.now().toISOString() }, 'expires_at'],
      [{ name: 'x', expires_at: '9999-12-31T23:59:59-23:59' }, 'expires_at'], // docs/input.md, Dates: year 10000
      [{ name: 'x', owner: true }, 'owner'],
    ];
    for (const [payload, field] of cases) expectError(await create(bearer(owner.accessToken), owner.organizationId, payload), 400, 'VALIDATION_ERROR', field);
    expectError(await create(bearer(owner.accessToken), 'not-a-uuid', { name: 'x' }), 404, 'NOT_FOUND'); // docs/input.md: a path id that is not a UUID
    expect(await h.deps.db.query('SELECT 1 FROM api_keys WHERE organization_id = $1', [owner.organizationId])).toHaveLength(0);
  });
});

describe('GET /organizations/{id}/api-keys', () => {
  it('lists newest first with the documented fields, never the key or its hash, and pages by cursor', async () => {
    const owner = await signUpWithOrganization(h);
    const made: string[] = [];
    for (let i = 0; i < 5; i++) {
      made.push((await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { name: `k${i}` })).id);
      h.clock.advance(1000);
    }
    const seen: Key[] = [];
    let cursor: string | null = null;
    do {
      const res = await list(bearer(owner.accessToken), owner.organizationId, `?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.statusCode).toBe(200);
      const body = json<{ data: Key[]; meta: { next_cursor: string | null } }>(res);
      expect(body.data.length).toBeLessThanOrEqual(2);
      seen.push(...body.data);
      cursor = body.meta.next_cursor;
    } while (cursor);
    expect(seen.map((k) => k.id).sort()).toEqual([...made].sort());
    expect(seen.map((k) => k.name)).toEqual(['k4', 'k3', 'k2', 'k1', 'k0']);
    expect(Object.keys(seen[0]!).sort()).toEqual(
      ['id', 'organization_id', 'name', 'key_prefix', 'scopes', 'last_used_at', 'expires_at', 'created_by', 'created_at', 'revoked_at'].sort(),
    );
  });

  it('refuses a forged cursor and a bad limit with 400', async () => {
    const owner = await signUpWithOrganization(h);
    const forged = Buffer.from(JSON.stringify({ at: '2026-01-01T00:00:00.000Z', id: 'not-a-uuid' })).toString('base64url');
    for (const query of ['?cursor=garbage', `?cursor=${forged}`, '?limit=0', '?limit=101', '?limit=x', '?sort=asc']) {
      const res = await list(bearer(owner.accessToken), owner.organizationId, query);
      expect(res.statusCode, query).toBe(400);
      expect(json<Fields>(res).error.code).toBe('VALIDATION_ERROR');
    }
  });
});

describe('RBAC per role', () => {
  it('owner and admin manage keys; member and viewer list only (403); another organization is 404', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const admin = await signUpAsMember(h, org, 'admin');
    const member = await signUpAsMember(h, org, 'member');
    const viewer = await signUpAsMember(h, org, 'viewer');
    const stranger = await signUpWithOrganization(h);

    const byAdmin = await createKeyOverHttp(h, bearer(admin.accessToken), org, { name: 'by admin' });
    expect(byAdmin.created_by).toBe(admin.userId);
    for (const u of [member, viewer]) {
      expect((await list(bearer(u.accessToken), org)).statusCode).toBe(200);
      expectError(await create(bearer(u.accessToken), org, { name: 'nope' }), 403, 'FORBIDDEN');
      expectError(await revoke(bearer(u.accessToken), org, byAdmin.id), 403, 'FORBIDDEN');
    }
    expectError(await list(bearer(stranger.accessToken), org), 404, 'NOT_FOUND');
    expectError(await create(bearer(stranger.accessToken), org, { name: 'nope' }), 404, 'NOT_FOUND');
    expectError(await revoke(bearer(stranger.accessToken), org, byAdmin.id), 404, 'NOT_FOUND');
    // A key of another organization, named under one's own organization, is not found either.
    expectError(await revoke(bearer(stranger.accessToken), stranger.organizationId, byAdmin.id), 404, 'NOT_FOUND');
    expectError(await revoke(bearer(owner.accessToken), org, '6f1c3d2e-0000-4000-8000-000000000000'), 404, 'NOT_FOUND');
    expect((await revoke(bearer(admin.accessToken), org, byAdmin.id)).statusCode).toBe(200);
  });
});

describe('API key callers', () => {
  it('a read key lists but cannot create; a write key cannot create either (admin scope)', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const read = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read'] });
    const write = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read', 'write'] });
    expect((await list(apiKeyHeader(read.key), org)).statusCode).toBe(200);
    expect((await list(bearer(read.key), org)).statusCode).toBe(200);
    expectError(await create(apiKeyHeader(read.key), org, { name: 'x' }), 403, 'FORBIDDEN');
    expectError(await create(apiKeyHeader(write.key), org, { name: 'x' }), 403, 'FORBIDDEN');
    expectError(await revoke(apiKeyHeader(write.key), org, read.id), 403, 'FORBIDDEN');
  });

  it('an admin key creates keys within its own scopes (created_by: the user who made the calling key) and revokes; never stronger keys', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const admin = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read', 'admin'] });
    const res = await create(apiKeyHeader(admin.key), org, { name: 'minted', scopes: ['read'] });
    expect(res.statusCode).toBe(201);
    const minted = json<{ data: Key & { key: string } }>(res).data;
    expect(minted).toMatchObject({ scopes: ['read'], created_by: owner.userId });
    const audit = await h.deps.db.query<{ user_id: string | null; actor: string }>(
      "SELECT user_id, actor FROM audit_logs WHERE resource_id = $1 AND action = 'create'",
      [minted.id],
    );
    expect(audit[0]).toEqual({ user_id: null, actor: `api_key:${admin.id}` });
    expectError(await create(apiKeyHeader(admin.key), org, { name: 'stronger', scopes: ['read', 'write'] }), 403, 'FORBIDDEN');
    expect((await revoke(apiKeyHeader(admin.key), org, minted.id)).statusCode).toBe(200);
    // Another organization through this key: 404.
    const other = await signUpWithOrganization(h);
    expectError(await create(apiKeyHeader(admin.key), other.organizationId, { name: 'x' }), 404, 'NOT_FOUND');
    expectError(await list(apiKeyHeader(admin.key), other.organizationId), 404, 'NOT_FOUND');
  });

  it('a key with an expiry mints keys that expire no later (inherited when left out)', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const expires = new Date(h.clock.now().getTime() + 3600_000).toISOString();
    const admin = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read', 'admin'], expires_at: expires });
    const inherited = await createKeyOverHttp(h, apiKeyHeader(admin.key), org, { scopes: ['read'] });
    expect(inherited.expires_at).toBe(expires);
    const later = new Date(h.clock.now().getTime() + 7200_000).toISOString();
    expectError(await create(apiKeyHeader(admin.key), org, { name: 'x', expires_at: later }), 403, 'FORBIDDEN');
    expectError(await create(apiKeyHeader(admin.key), org, { name: 'x', expires_at: null }), 403, 'FORBIDDEN');
  });
});

describe('key lifecycle end to end', () => {
  it('create over HTTP → works on the stdio endpoint → revoke → refused at once (401)', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const { id, key } = await createKeyOverHttp(h, bearer(owner.accessToken), org, { name: 'mcp', scopes: ['read', 'write'] });
    const before = await stdioCheck(key);
    expect(before.statusCode).toBe(200);
    expect(json(before)).toMatchObject({ allowed: false, reason: 'sandbox_tier', tier: 'sandbox' });

    const res = await revoke(bearer(owner.accessToken), org, id);
    expect(res.statusCode).toBe(200);
    expect(json<{ data: Key }>(res).data).toMatchObject({ id, revoked_at: h.clock.now().toISOString() });

    const after = await stdioCheck(key);
    expect(after.statusCode).toBe(401);
    expect(json(after)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
    expect((await list(apiKeyHeader(key), org)).statusCode).toBe(401);
    // Revoking again answers the same record and keeps the first revocation time.
    h.clock.advance(5000);
    const again = await revoke(bearer(owner.accessToken), org, id);
    expect(again.statusCode).toBe(200);
    expect(json<{ data: Key }>(again).data.revoked_at).toBe(json<{ data: Key }>(res).data.revoked_at);
    const listed = json<{ data: Key[] }>(await list(bearer(owner.accessToken), org)).data.find((k) => k.id === id);
    expect(listed!.revoked_at).not.toBeNull();
    const audit = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE resource_id = $1 AND action = 'revoke'", [id]);
    expect(audit.length).toBeGreaterThanOrEqual(1);
  });

  it('an expiring key stops at its expiry', async () => {
    const owner = await signUpWithOrganization(h);
    const expires = new Date(h.clock.now().getTime() + 60_000).toISOString();
    const { key } = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { expires_at: expires });
    expect((await stdioCheck(key)).statusCode).toBe(200);
    h.clock.advance(60_000);
    expect((await stdioCheck(key)).statusCode).toBe(401);
  });
});
