import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness } from './harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

describe('a refused field is named once, in words (docs/openapi.md, Shapes)', () => {
  it('an invalid tier: one line, not one "must be equal to constant" per value', async () => {
    const t = await createTenant(h);
    const res = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}`,
      headers: adminHeaders(h),
      payload: { tier: 'gold' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({
      code: 'INVALID_REQUEST',
      message: 'tier must be one of sandbox, trial, launch, growth, enterprise',
      fields: [{ field: 'tier', message: 'must be one of sandbox, trial, launch, growth, enterprise' }],
    });
    expect(res.json().fields).toHaveLength(1);
  });

  it('the envelope API says it the same way', async () => {
    const t = await createTenant(h);
    const res = await h.request({
      method: 'POST',
      url: `/organizations/${t.organizationId}/api-keys`,
      headers: bearer(t.apiKey),
      payload: { name: 'k', scopes: ['root'] },
    });
    expect(res.statusCode).toBe(400);
    const body = res.json();
    expect(body.error.message).toBe('scopes.0 must be one of read, write, admin');
  });

  it('a wrong type and a missing field', async () => {
    const t = await createTenant(h);
    const wrongType = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/record-usage',
      headers: bearer(t.apiKey),
      payload: { tool_name: 5 },
    });
    expect(wrongType.json()).toMatchObject({ message: 'tool_name must be a string' });
    const missing = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: {} });
    expect(missing.json()).toMatchObject({ message: 'tool_name is required', fields: [{ field: 'tool_name', message: 'is required' }] });
  });
});
