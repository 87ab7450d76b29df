import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  setTierOverHttp,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';
import { createDeployment } from './service.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Deployment = Record<string, unknown> & { id: string; balance: Record<string, unknown> };
type ErrorBody = { error: { code: string }; details: { fields?: Array<{ field: string }> } };

const list = (headers: Record<string, string>, orgId: string, query = '') =>
  h.request({ method: 'GET', url: `/organizations/${orgId}/deployments${query}`, headers });
const rotate = (headers: Record<string, string>, orgId: string, depId: string) =>
  h.request({ method: 'POST', url: `/organizations/${orgId}/deployments/${depId}/secret`, headers });
const entitlements = (deploymentId: string, secret: string) =>
  h.request({ method: 'POST', url: '/api/v1/entitlements/check', payload: { deployment_id: deploymentId, deployment_secret: secret } });

function expectError(res: { statusCode: number; json(): unknown }, status: number, code: string) {
  expect(res.statusCode, JSON.stringify(res.json())).toBe(status);
  expect((res.json() as ErrorBody).error.code).toBe(code);
}

describe('GET /organizations/{id}/deployments', () => {
  it('lists the primary deployment with its record and balance, never the secret or its hash', async () => {
    const owner = await signUpWithOrganization(h);
    const res = await list(bearer(owner.accessToken), owner.organizationId);
    expect(res.statusCode).toBe(200);
    const body = json<{ data: Deployment[]; meta: { next_cursor: string | null } }>(res);
    expect(body.meta.next_cursor).toBeNull();
    expect(body.data).toHaveLength(1);
    const d = body.data[0]!;
    expect(d).toMatchObject({
      id: owner.deploymentId,
      organization_id: owner.organizationId,
      tier: 'sandbox',
      status: 'active',
      is_primary: true,
      secret_prefix: owner.deploymentSecret.slice(0, 10),
      billing_anchor: h.clock.now().toISOString(),
      created_at: expect.any(String),
      updated_at: expect.any(String),
    });
    expect(d.balance).toMatchObject({ monthly_allocation: 0, monthly_used: 0, purchased: 0, available: 0, period_end: expect.any(String) });
    expect(res.body).not.toContain('secret_hash');
    expect(res.body).not.toContain(owner.deploymentSecret);
  });

  it('shows the new allocation at once after a tier change', async () => {
    const owner = await signUpWithOrganization(h);
    await setTierOverHttp(h, owner.deploymentId, 'launch');
    const d = json<{ data: Deployment[] }>(await list(bearer(owner.accessToken), owner.organizationId)).data[0]!;
    expect(d.tier).toBe('launch');
    expect(d.balance).toMatchObject({ monthly_allocation: 2000, monthly_used: 0, monthly_remaining: 2000, available: 2000 });
  });

  it('pages by cursor in creation order, the primary first', async () => {
    const owner = await signUpWithOrganization(h);
    h.clock.advance(1000);
    const second = await h.deps.db.transaction((tx) =>
      createDeployment(tx, h.ctx, { organizationId: owner.organizationId, name: 'staging', tier: 'trial', isPrimary: false }),
    );
    const first = json<{ data: Deployment[]; meta: { next_cursor: string } }>(await list(bearer(owner.accessToken), owner.organizationId, '?limit=1'));
    expect(first.data.map((d) => d.id)).toEqual([owner.deploymentId]);
    const next = json<{ data: Deployment[]; meta: { next_cursor: string | null } }>(
      await list(bearer(owner.accessToken), owner.organizationId, `?limit=1&cursor=${first.meta.next_cursor}`),
    );
    expect(next.data.map((d) => [d.id, d.is_primary, d.balance.monthly_allocation])).toEqual([[second.deployment.id, false, 100]]);
    expect(next.meta.next_cursor).toBeNull();
  });

  it('every role and a read key may list; another organization is 404; bad input is 400', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    for (const role of ['admin', 'member', 'viewer'] as const) {
      const u = await signUpAsMember(h, org, role);
      expect((await list(bearer(u.accessToken), org)).statusCode, role).toBe(200);
    }
    const read = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read'] });
    expect((await list({ 'x-api-key': read.key }, org)).statusCode).toBe(200);
    const stranger = await signUpWithOrganization(h);
    expectError(await list(bearer(stranger.accessToken), org), 404, 'NOT_FOUND');
    expectError(await list({ 'x-api-key': read.key }, stranger.organizationId), 404, 'NOT_FOUND');
    expectError(await list(bearer(owner.accessToken), 'nope'), 404, 'NOT_FOUND'); // docs/input.md: a path id that is not a UUID
    expectError(await list(bearer(owner.accessToken), org, '?cursor=zzz'), 400, 'VALIDATION_ERROR');
  });
});

describe('POST /organizations/{id}/deployments/{depId}/secret', () => {
  it('rotates: data.secret is the new one, the old one stops at once', async () => {
    const owner = await signUpWithOrganization(h);
    expect((await entitlements(owner.deploymentId, owner.deploymentSecret)).statusCode).toBe(200);
    const res = await rotate(bearer(owner.accessToken), owner.organizationId, owner.deploymentId);
    expect(res.statusCode).toBe(200);
    const { data } = json<{ data: { deployment_id: string; secret: string; secret_prefix: string } }>(res);
    expect(data.deployment_id).toBe(owner.deploymentId);
    expect(data.secret).toMatch(/^cgds_[0-9A-Za-z]{36}$/);
    expect(data.secret_prefix).toBe(data.secret.slice(0, 10));
    expect(data.secret).not.toBe(owner.deploymentSecret);

    const old = await entitlements(owner.deploymentId, owner.deploymentSecret);
    expect(old.statusCode).toBe(401);
    expect(json(old)).toMatchObject({ code: 'INVALID_DEPLOYMENT_CREDENTIALS' });
    expect((await entitlements(owner.deploymentId, data.secret)).statusCode).toBe(200);

    const listed = json<{ data: Deployment[] }>(await list(bearer(owner.accessToken), owner.organizationId)).data[0]!;
    expect(listed.secret_prefix).toBe(data.secret_prefix);
    const audit = await h.deps.db.query<{ user_id: string }>(
      "SELECT user_id FROM audit_logs WHERE resource_id = $1 AND action = 'rotate_secret'",
      [owner.deploymentId],
    );
    expect(audit).toEqual([{ user_id: owner.userId }]);
    expect(JSON.stringify(await h.deps.db.query('SELECT metadata FROM audit_logs WHERE resource_id = $1', [owner.deploymentId]))).not.toContain(
      data.secret,
    );
  });

  it('owner and admin rotate; member and viewer get 403; another tenant 404; a write key may rotate, a read key not', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const admin = await signUpAsMember(h, org, 'admin');
    expect((await rotate(bearer(admin.accessToken), org, owner.deploymentId)).statusCode).toBe(200);
    for (const role of ['member', 'viewer'] as const) {
      const u = await signUpAsMember(h, org, role);
      expectError(await rotate(bearer(u.accessToken), org, owner.deploymentId), 403, 'FORBIDDEN');
    }
    const stranger = await signUpWithOrganization(h);
    expectError(await rotate(bearer(stranger.accessToken), org, owner.deploymentId), 404, 'NOT_FOUND');
    // The stranger's own organization with this organization's deployment: not found, and nothing rotated.
    expectError(await rotate(bearer(stranger.accessToken), stranger.organizationId, owner.deploymentId), 404, 'NOT_FOUND');
    expectError(await rotate(bearer(owner.accessToken), org, '6f1c3d2e-0000-4000-8000-000000000000'), 404, 'NOT_FOUND');
    expectError(await rotate(bearer(owner.accessToken), org, 'not-a-uuid'), 404, 'NOT_FOUND'); // docs/input.md: a path id that is not a UUID

    const read = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read'] });
    const write = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read', 'write'] });
    expectError(await rotate({ 'x-api-key': read.key }, org, owner.deploymentId), 403, 'FORBIDDEN');
    const byKey = await rotate(bearer(write.key), org, owner.deploymentId);
    expect(byKey.statusCode).toBe(200);
    const secret = json<{ data: { secret: string } }>(byKey).data.secret;
    expect((await entitlements(owner.deploymentId, secret)).statusCode).toBe(200);
  });
});
