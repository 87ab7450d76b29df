import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueAction } from '../../../test/admin-fixtures.js';
import { adminHeaders, bearer, createHarness, createKeyOverHttp, type Harness, json, serviceHeaders, signUpAsMember, signUpWithOrganization } from '../../../test/harness.js';

/**
 * GET /organizations/{id}/credit-costs (docs/metering.md, Prices up front): the price list of
 * GET /api/v1/mcp/credit-costs for every role of the organization and its API keys with `read`;
 * another organization is 404 and no credentials 401.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type PriceList = { costs: Array<{ action: string; credits: number; description: string | null }>; tools: Array<{ tool_name: string; action: string }> };

const pricesOf = (organizationId: string, headers: Record<string, string>) => h.request({ method: 'GET', url: `/organizations/${organizationId}/credit-costs`, headers });

describe('GET /organizations/{id}/credit-costs', () => {
  it('answers every role and a read key the list the deployments read, with the operator’s costs and mappings', async () => {
    const action = uniqueAction('orgprice');
    const tool = `${action}_tool`;
    expect((await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 1234, description: 'A dear one' } })).statusCode).toBe(200);
    expect((await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${tool}`, headers: adminHeaders(h), payload: { action } })).statusCode).toBe(200);

    const owner = await signUpWithOrganization(h, 'prices');
    const viewer = await signUpAsMember(h, owner.organizationId, 'viewer');
    const member = await signUpAsMember(h, owner.organizationId, 'member');
    const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read'] });

    const deployments = await h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers: serviceHeaders(h) });
    const expected = json<PriceList>(deployments);
    for (const headers of [bearer(owner.accessToken), bearer(viewer.accessToken), bearer(member.accessToken), { 'x-api-key': key.key }]) {
      const res = await pricesOf(owner.organizationId, headers);
      expect(res.statusCode, res.body).toBe(200);
      const body = json<{ success: boolean; data: PriceList }>(res);
      expect(body.success).toBe(true);
      expect(body.data).toEqual(expected);
      expect(body.data.costs).toContainEqual({ action, credits: 1234, description: 'A dear one' });
      expect(body.data.costs.map((c) => c.action)).toContain('platform_basic');
      expect(body.data.tools).toContainEqual({ tool_name: tool, action });
    }
  });

  it('is 404 for a user of another organization and for an id that is not one; 401 without credentials', async () => {
    const owner = await signUpWithOrganization(h, 'prices');
    const stranger = await signUpWithOrganization(h, 'prices');
    const other = await pricesOf(owner.organizationId, bearer(stranger.accessToken));
    expect(other.statusCode, other.body).toBe(404);
    expect(json(other)).toMatchObject({ success: false, error: { code: 'NOT_FOUND' } });
    const missing = await pricesOf('6f1c3d2e-0000-4000-8000-000000000000', bearer(owner.accessToken));
    expect(missing.statusCode).toBe(404);
    expect(json(missing)).toEqual(json(other));

    const anonymous = await h.request({ method: 'GET', url: `/organizations/${owner.organizationId}/credit-costs` });
    expect(anonymous.statusCode).toBe(401);
    expect(json(anonymous)).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
  });
});
