import type { LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import type { TemplateView } from '../src/modules/templates/catalog.js';
import type { TemplateDeploymentView } from '../src/modules/templates/deployments.js';
import { adminHeaders, bearer, type Harness, json, unique } from './harness.js';

/**
 * Fixtures of the template suites (docs/templates.md): an operator-made template, a template deployment made
 * over HTTP, the envelope error check, and the audit rows of a resource. `harness` is read at call
 * time, so a file may create its harness in `beforeAll`.
 */
export const slugOf = (prefix: string) => unique(prefix).toLowerCase().replace(/[^a-z0-9-]/g, '-');

export function expectEnvelopeError(res: LightMyRequestResponse, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body).toBe(status);
  const body = res.json() as { success: boolean; error: { code: string }; details: { fields?: Array<{ field: string }> } };
  expect(body.success).toBe(false);
  expect(body.error.code).toBe(code);
  if (field) expect(body.details.fields?.map((f) => f.field)).toContain(field);
}

export function templateFixtures(harness: () => Harness) {
  const createTemplate = async (body: Record<string, unknown> = {}): Promise<TemplateView> => {
    const res = await harness().request({
      method: 'POST',
      url: '/api/v1/admin/templates',
      headers: adminHeaders(harness()),
      payload: { name: 'Blog', slug: slugOf('tpl'), config: { image: 'blog:1' }, ...body },
    });
    expect(res.statusCode, res.body).toBe(201);
    return json<TemplateView>(res);
  };

  const deploymentsUrl = (orgId: string) => `/organizations/${orgId}/template-deployments`;

  const postDeployment = (token: string, orgId: string, body: Record<string, unknown>) =>
    harness().request({ method: 'POST', url: deploymentsUrl(orgId), headers: bearer(token), payload: body });

  const createDeployment = async (token: string, orgId: string, templateId: string, body: Record<string, unknown> = {}): Promise<TemplateDeploymentView> => {
    const res = await postDeployment(token, orgId, { template_id: templateId, name: 'My blog', subdomain: slugOf('sub'), ...body });
    expect(res.statusCode, res.body).toBe(201);
    return json<{ data: TemplateDeploymentView }>(res).data;
  };

  const countDeployments = async (orgId: string): Promise<number> => {
    const rows = await harness().deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM template_deployments WHERE organization_id = $1', [orgId]);
    return rows[0]!.n;
  };

  const auditRows = (resourceId: string) =>
    harness().deps.db.query<{ actor: string; action: string; organization_id: string | null; metadata: Record<string, unknown>; created_at: Date }>(
      'SELECT actor, action, organization_id, metadata, created_at FROM audit_logs WHERE resource_id = $1 ORDER BY created_at, id',
      [resourceId],
    );

  /** The operator turns on the custom_domain flag of an organization's primary deployment. */
  const enableCustomDomain = async (deploymentId: string): Promise<void> => {
    const res = await harness().request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${deploymentId}/flags`,
      headers: adminHeaders(harness()),
      payload: { custom_domain: true },
    });
    expect(res.statusCode, res.body).toBe(200);
  };

  const verifyDomain = (headers: Record<string, string>, orgId: string, id: string) =>
    harness().request({ method: 'POST', url: `${deploymentsUrl(orgId)}/${id}/verify-domain`, headers });

  return { createTemplate, deploymentsUrl, postDeployment, createDeployment, countDeployments, auditRows, enableCustomDomain, verifyDomain };
}
