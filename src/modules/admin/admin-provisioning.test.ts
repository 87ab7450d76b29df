import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures, expectInvalid, uniqueAction } from '../../../test/admin-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json, signUpUnverified, unique, verifyEmailOf } from '../../../test/harness.js';
import { DAY } from '../../clock.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * provisioning organizations and API keys.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { admin, view, resolve, entitlements, operatorAudit } = adminFixtures(() => h);

describe('POST organizations and api-keys', () => {
  it('provisions an organization with its primary deployment, the secret shown once and working', async () => {
    const slug = uniqueAction('prov');
    const email = `${unique('owner')}@example.com`;
    const res = await admin('POST', '/api/v1/admin/organizations', { name: 'Provisioned', slug, tier: 'launch', owner_email: email });
    expect(res.statusCode, res.body).toBe(201);
    const body = json<{
      organization: { id: string; name: string; slug: string; tier: string; created_at: string };
      owner_user_id: string | null;
      deployment: { id: string; tier: string; secret: string };
    }>(res);
    expect(body.organization).toEqual({ id: expect.any(String), name: 'Provisioned', slug, tier: 'free', created_at: h.clock.now().toISOString() });
    expect(body.deployment).toMatchObject({ tier: 'launch' });
    expect(body.deployment.secret).toMatch(/^cgds_[0-9A-Za-z]{36}$/);
    expect(body.owner_user_id).toEqual(expect.any(String));

    const d = await view(body.deployment.id);
    expect(d).toMatchObject({ organization_id: body.organization.id, is_primary: true, tier: 'launch', secret_prefix: body.deployment.secret.slice(0, 10) });
    const snapshot = await entitlements(body.deployment.id, body.deployment.secret);
    expect(snapshot.statusCode).toBe(200);
    expect(json(snapshot)).toMatchObject({ status: 'active', tier: 'launch' });
    expect(json(await resolve(body.owner_user_id!))).toMatchObject({ deployment_id: body.deployment.id, organization_id: body.organization.id });

    // Duplicate slug: 409, nothing created.
    const dup = await admin('POST', '/api/v1/admin/organizations', { name: 'Again', slug });
    expect(dup.statusCode).toBe(409);
    expect(json(dup)).toMatchObject({ error: 'conflict', code: 'CONFLICT' });
    const orgs = await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug]);
    expect(orgs).toHaveLength(1);

    expectInvalid(await admin('POST', '/api/v1/admin/organizations', { name: 'Bad', slug: 'Not A Slug' }), 'slug');
    expectInvalid(await admin('POST', '/api/v1/admin/organizations', { name: 'Bad', slug: uniqueAction('s'), tier: 'gold' }), 'tier');

    expect(await operatorAudit('organization', body.organization.id, 'create')).toHaveLength(1);
    expect(await operatorAudit('deployment', body.deployment.id, 'create')).toHaveLength(1);
  });

  it('gives a new organization the NEW_ORG_TIER (sandbox) when no tier is named, and reuses an existing owner by email', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const email = (await h.deps.db.query<{ email: string }>('SELECT email FROM users WHERE id = $1', [t.userId]))[0]!.email;
    const res = await admin('POST', '/api/v1/admin/organizations', { name: 'Second', slug: uniqueAction('second'), owner_email: email.toUpperCase() });
    expect(res.statusCode, res.body).toBe(201);
    const body = json<{ owner_user_id: string; deployment: { id: string; tier: string } }>(res);
    expect(body.deployment.tier).toBe('sandbox');
    expect(body.owner_user_id).toBe(t.userId);
    expect((await view(body.deployment.id)).balance).toMatchObject({ monthly_allocation: 0, available: 0 });
  });

  it('an account that never proved the address is not made owner by owner_email (409, nothing made); once verified it is', async () => {
    // Someone signs up with the address of the customer the operator is about to onboard, and cannot verify it.
    const squatter = await signUpUnverified(h, 'Mallory');
    const slug = uniqueAction('onboarded');
    const create = () => admin('POST', '/api/v1/admin/organizations', { name: 'Onboarded', slug, owner_email: squatter.email.toUpperCase() });
    const refused = await create();
    expect(refused.statusCode, refused.body).toBe(409);
    expect(json<{ code: string }>(refused).code).toBe('CONFLICT');
    expect(await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug])).toEqual([]);
    const mine = await h.request({ method: 'GET', url: '/api/users/me', headers: bearer(squatter.accessToken) });
    expect(json<{ data: { organizations: unknown[] } }>(mine).data.organizations).toEqual([]);
    // The address proven, the same call makes its account the owner.
    await verifyEmailOf(h, squatter.userId);
    const made = await create();
    expect(made.statusCode, made.body).toBe(201);
    expect(json<{ owner_user_id: string }>(made).owner_user_id).toBe(squatter.userId);
  });

  it('creates an API key for an organization, shown once, with the asked scopes, usable for stdio metering', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const res = await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'ci', scopes: ['read', 'write'] });
    expect(res.statusCode, res.body).toBe(201);
    const key = json<{ id: string; key: string; key_prefix: string; scopes: string[]; expires_at: string | null }>(res);
    expect(key.key).toMatch(/^cg_[0-9A-Za-z]{36}$/);
    expect(key).toMatchObject({ key_prefix: key.key.slice(0, 10), scopes: ['read', 'write'], expires_at: null });
    const stored = await h.deps.db.query<{ key_hash: string }>('SELECT key_hash FROM api_keys WHERE id = $1', [key.id]);
    expect(stored[0]!.key_hash).not.toContain(key.key);

    const record = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: 'x' } });
    expect(json(record)).toMatchObject({ success: true, credits_used: 1 });

    // Default scopes: [read] — checks work, recording is refused.
    const readOnly = json<{ key: string; scopes: string[] }>(
      await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'ro' }),
    );
    expect(readOnly.scopes).toEqual(['read']);
    const check = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(readOnly.key), payload: { tool_name: 'x' } });
    expect(json(check)).toMatchObject({ allowed: true });
    const refused = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(readOnly.key), payload: { tool_name: 'x' } });
    expect(refused.statusCode).toBe(403);

    const unknown = await admin('POST', `/api/v1/admin/organizations/${randomUUID()}/api-keys`, { name: 'x' });
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown).code).toBe('NOT_FOUND');
    const past = new Date(h.clock.now().getTime() - 1000).toISOString();
    expectInvalid(await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'old', expires_at: past }), 'expires_at');
    // docs/input.md, Dates: year 10000 once the offset is applied.
    expectInvalid(await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'far', expires_at: '9999-12-31T23:59:59-23:59' }), 'expires_at');
    expectInvalid(await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'x', scopes: ['root'] }), 'scopes');

    expect(await operatorAudit('api_key', key.id, 'create')).toHaveLength(1);
    expect((await operatorAudit('api_key', key.id, 'create'))[0]!.organization_id).toBe(t.organizationId);
  });

  it('an expiring key stops working at its expiry', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    const res = await admin('POST', `/api/v1/admin/organizations/${t.organizationId}/api-keys`, { name: 'temp', expires_at: expiresAt.toISOString() });
    const key = json<{ key: string; expires_at: string }>(res);
    expect(key.expires_at).toBe(expiresAt.toISOString());
    const call = () => h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(key.key), payload: { tool_name: 'x' } });
    expect((await call()).statusCode).toBe(200);
    h.clock.set(expiresAt);
    const expired = await call();
    expect(expired.statusCode).toBe(401);
    expect(json(expired)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  });
});
