import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  setTierOverHttp,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';

/** GET /organizations/{id}/deployments/{depId}/entitlements: the deployment's snapshot, read by its organization's members. */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type ErrorBody = { error: { code: string }; details: { fields?: Array<{ field: string }> } };
type Snapshot = { status: string; tier: string; features: Record<string, unknown>; quotas: { ai_tokens: Record<string, unknown> }; message: string | null };

const read = (headers: Record<string, string>, orgId: string, depId: string) =>
  h.request({ method: 'GET', url: `/organizations/${orgId}/deployments/${depId}/entitlements`, headers });
const check = (deploymentId: string, secret: string) =>
  h.request({ method: 'POST', url: '/api/v1/entitlements/check?force=true', payload: { deployment_id: deploymentId, deployment_secret: secret } });

function expectError(res: { statusCode: number; json(): unknown }, status: number, code: string) {
  expect(res.statusCode, JSON.stringify(res.json())).toBe(status);
  expect((res.json() as ErrorBody).error.code).toBe(code);
}

describe('GET /organizations/{id}/deployments/{depId}/entitlements', () => {
  it('answers, enveloped, the snapshot the deployment itself gets from the entitlement check', async () => {
    const owner = await signUpWithOrganization(h);
    await setTierOverHttp(h, owner.deploymentId, 'launch');
    const res = await read(bearer(owner.accessToken), owner.organizationId, owner.deploymentId);
    expect(res.statusCode, res.body).toBe(200);
    const body = json<{ success: boolean; data: Snapshot }>(res);
    expect(body.success).toBe(true);
    expect(body.data).toEqual(json(await check(owner.deploymentId, owner.deploymentSecret)));
    expect(body.data).toMatchObject({
      status: 'active',
      tier: 'launch',
      features: {
        ai_enabled: true,
        billing_enabled: true,
        custom_domain: true,
        white_label: false,
        mcp_enabled: true,
        ai_monthly_limit: 10_000,
        api_rate_limit: 2_000,
        support_level: 'email',
      },
      quotas: { ai_tokens: { used: 0, limit: 10_000, remaining: 10_000 } },
      message: null,
    });
    expect(res.body).not.toContain(owner.deploymentSecret);
  });

  it("shows the operator's flag overrides and a suspension as the deployment sees them", async () => {
    const owner = await signUpWithOrganization(h);
    await setTierOverHttp(h, owner.deploymentId, 'trial');
    const flags = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${owner.deploymentId}/flags`,
      headers: adminHeaders(h),
      payload: { white_label: true, ai_enabled: false },
    });
    expect(flags.statusCode, flags.body).toBe(200);
    const overridden = json<{ data: Snapshot }>(await read(bearer(owner.accessToken), owner.organizationId, owner.deploymentId)).data;
    expect(overridden.features).toMatchObject({ white_label: true, ai_enabled: false, mcp_enabled: true });

    const suspend = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${owner.deploymentId}`,
      headers: adminHeaders(h),
      payload: { status: 'suspended' },
    });
    expect(suspend.statusCode, suspend.body).toBe(200);
    const suspended = json<{ data: Snapshot }>(await read(bearer(owner.accessToken), owner.organizationId, owner.deploymentId)).data;
    expect(suspended).toMatchObject({ status: 'suspended', message: expect.stringContaining('suspended') });
    expect(suspended.features).toMatchObject({ ai_enabled: false, billing_enabled: false, white_label: false, mcp_enabled: false });
  });

  it('every role and a read key may read it; another organization is 404', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    for (const role of ['admin', 'member', 'viewer'] as const) {
      const u = await signUpAsMember(h, org, role);
      const res = await read(bearer(u.accessToken), org, owner.deploymentId);
      expect(res.statusCode, role).toBe(200);
      expect(json<{ data: Snapshot }>(res).data.tier).toBe('sandbox');
    }
    const key = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read'] });
    expect((await read({ 'x-api-key': key.key }, org, owner.deploymentId)).statusCode).toBe(200);

    const stranger = await signUpWithOrganization(h);
    expectError(await read(bearer(stranger.accessToken), org, owner.deploymentId), 404, 'NOT_FOUND');
    // The stranger's own organization with this organization's deployment: not found either.
    expectError(await read(bearer(stranger.accessToken), stranger.organizationId, owner.deploymentId), 404, 'NOT_FOUND');
    expectError(await read({ 'x-api-key': key.key }, stranger.organizationId, stranger.deploymentId), 404, 'NOT_FOUND');
    expectError(await read({ 'x-api-key': key.key }, org, stranger.deploymentId), 404, 'NOT_FOUND');
  });

  it('an unknown deployment and a malformed id are 404 (docs/input.md: a path id); a NUL in the path is 400; no token is 401', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    expectError(await read(bearer(owner.accessToken), org, '6f1c3d2e-0000-4000-8000-000000000000'), 404, 'NOT_FOUND');
    expectError(await read(bearer(owner.accessToken), org, 'not-a-uuid'), 404, 'NOT_FOUND');
    expectError(await read(bearer(owner.accessToken), 'nope', owner.deploymentId), 404, 'NOT_FOUND');
    const nul = await read(bearer(owner.accessToken), org, 'a%00b');
    expectError(nul, 400, 'VALIDATION_ERROR');
    expect(json<ErrorBody>(nul).details.fields?.map((f) => f.field)).toEqual(['params.depId']);
    expectError(await read({}, org, owner.deploymentId), 401, 'UNAUTHORIZED');
  });
});
