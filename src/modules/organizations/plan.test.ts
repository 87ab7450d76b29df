import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, type Harness, json, signUp, unique } from '../../../test/harness.js';
import { createApiKey } from '../api-keys/service.js';

/**
 * An organization's plan is `free` unless paid for (docs/decisions.md, Organization plan). A security review found that
 * `POST /organizations {tier:"enterprise"}` gave any user the enterprise hourly limit for nothing.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const slug = () => unique('plan').toLowerCase().replace(/[^a-z0-9-]/g, '-');
const create = (headers: Record<string, string>, payload: Record<string, unknown>) =>
  h.request({ method: 'POST', url: '/organizations', headers, payload });
const setPlan = (id: string, payload: Record<string, unknown>, headers = adminHeaders(h)) =>
  h.request({ method: 'PUT', url: `/api/v1/admin/organizations/${id}`, headers, payload });

describe('POST /organizations names a paid plan', () => {
  it('pro or enterprise → 403 FORBIDDEN pointing to /billing/subscription, and nothing is created', async () => {
    const user = await signUp(h);
    for (const tier of ['enterprise', 'pro']) {
      const s = slug();
      const res = await create(bearer(user.accessToken), { name: 'Free ride', slug: s, tier });
      expect(res.statusCode).toBe(403);
      expect(json(res)).toMatchObject({ success: false, error: { code: 'FORBIDDEN', message: expect.stringContaining('/billing/subscription') } });
      expect(await h.deps.db.query('SELECT id FROM organizations WHERE slug = $1', [s])).toEqual([]);
    }
    const free = await create(bearer(user.accessToken), { name: 'Honest', slug: slug(), tier: 'free' });
    expect(free.statusCode).toBe(201);
    expect(json(free).data).toMatchObject({ tier: 'free' });
    const unnamed = await create(bearer(user.accessToken), { name: 'Default', slug: slug() });
    expect(json(unnamed).data).toMatchObject({ tier: 'free' });
  });

  it('an admin-scoped API key cannot create a paid organization either', async () => {
    const user = await signUp(h);
    const org = json(await create(bearer(user.accessToken), { name: 'Base', slug: slug() })).data as { id: string };
    const { key } = await createApiKey(h.ctx, { organizationId: org.id, name: 'k', scopes: ['read', 'write', 'admin'], createdBy: user.userId });
    const res = await create(bearer(key), { name: 'Via key', slug: slug(), tier: 'enterprise' });
    expect(res.statusCode).toBe(403);
    expect(json(res)).toMatchObject({ error: { code: 'FORBIDDEN' } });
  });
});

describe('PUT /api/v1/admin/organizations/{id} {plan}', () => {
  it('sets the plan, audits it, and the hourly limit follows at once', async () => {
    const user = await signUp(h);
    const org = json(await create(bearer(user.accessToken), { name: 'Upgraded', slug: slug() })).data as { id: string };
    const { key } = await createApiKey(h.ctx, { organizationId: org.id, name: 'k', scopes: ['read'] });
    const before = await h.request({ method: 'GET', url: `/organizations/${org.id}`, headers: bearer(key) });
    expect(before.headers['x-ratelimit-limit']).toBe('1000');

    const res = await setPlan(org.id, { plan: 'pro' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ id: org.id, plan: 'pro' });
    const after = await h.request({ method: 'GET', url: `/organizations/${org.id}`, headers: bearer(key) });
    expect(after.headers['x-ratelimit-limit']).toBe('10000');
    expect(json(after).data).toMatchObject({ tier: 'pro' });

    const audit = await h.deps.db.query<{ actor: string; metadata: unknown }>(
      "SELECT actor, metadata FROM audit_logs WHERE organization_id = $1 AND resource_type = 'organization' AND action = 'update'",
      [org.id],
    );
    expect(audit).toEqual([{ actor: 'operator', metadata: { plan: { from: 'free', to: 'pro' } } }]);
  });

  it('refuses a bad plan (400), an unknown organization (404) and a missing admin key (401), changing nothing', async () => {
    const user = await signUp(h);
    const org = json(await create(bearer(user.accessToken), { name: 'Kept', slug: slug() })).data as { id: string };
    expect((await setPlan(org.id, { plan: 'platinum' })).statusCode).toBe(400);
    expect((await setPlan(org.id, { plan: 'pro', tier: 'growth' })).statusCode).toBe(400);
    expect((await setPlan('6f1c3d2e-0000-4000-8000-000000000000', { plan: 'pro' })).statusCode).toBe(404);
    expect((await setPlan(org.id, { plan: 'enterprise' }, bearer(user.accessToken))).statusCode).toBe(401);
    const rows = await h.deps.db.query<{ plan: string }>('SELECT plan FROM organizations WHERE id = $1', [org.id]);
    expect(rows).toEqual([{ plan: 'free' }]);
  });
});
