import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures } from '../../../test/admin-fixtures.js';
import { createHarness, createTenant, type Harness, json, unique } from '../../../test/harness.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * external user ids and namespaced tool names.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { admin, serviceCheck, resolve, operatorAudit } = adminFixtures(() => h);

describe('PUT users/{id}/external-id', () => {
  it('sets an external id that resolve-deployment accepts; a duplicate is 409; an unknown user 404', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'trial' });
    const external = unique('idp-user');

    // Resolved (and cached) as unknown first: setting the id must drop that answer.
    expect(json(await resolve(external))).toMatchObject({ deployment_id: null, error: 'no_deployment_found' });

    const res = await admin('PUT', `/api/v1/admin/users/${t.userId}/external-id`, { external_id: external });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toEqual({ id: t.userId, email: expect.any(String), external_id: external });
    expect(json(await resolve(external))).toEqual({
      deployment_id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'launch',
      mcp_enabled: true,
      error: null,
    });

    const duplicate = await admin('PUT', `/api/v1/admin/users/${other.userId}/external-id`, { external_id: external });
    expect(duplicate.statusCode).toBe(409);
    expect(json(duplicate)).toEqual({ error: 'conflict', code: 'CONFLICT', message: expect.any(String) });
    expect(json(await resolve(external))).toMatchObject({ deployment_id: t.deploymentId });

    const missing = await admin('PUT', `/api/v1/admin/users/${randomUUID()}/external-id`, { external_id: unique('nobody') });
    expect(missing.statusCode).toBe(404);
    expect(json(missing).code).toBe('NOT_FOUND');

    const audit = await operatorAudit('user', t.userId, 'update');
    expect(audit).toHaveLength(1);
    expect(audit[0]!.metadata).toEqual({ external_id: external });
    expect(await operatorAudit('user', other.userId, 'update')).toEqual([]);
  });
});

describe('external id removal and namespaced tool names', () => {
  it('external_id null removes it: the old external id no longer resolves', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const external = unique('idp-gone');
    await admin('PUT', `/api/v1/admin/users/${t.userId}/external-id`, { external_id: external });
    expect(json(await resolve(external))).toMatchObject({ deployment_id: t.deploymentId });
    const res = await admin('PUT', `/api/v1/admin/users/${t.userId}/external-id`, { external_id: null });
    expect(json(res)).toMatchObject({ id: t.userId, external_id: null });
    expect(json(await resolve(external))).toMatchObject({ deployment_id: null, error: 'no_deployment_found' });
    // The user's own id still resolves.
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId });
  });

  it('maps tool names with dots and slashes (URL-encoded in the path)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const tool = `${unique('ns')}.tools/search issues`;
    const res = await admin('PUT', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`, { action: 'crew_execute' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toEqual({ tool_name: tool, action: 'crew_execute' });
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 5 });
    expect((await admin('DELETE', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`)).statusCode).toBe(204);
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ credit_cost: 1 });
  });
});
