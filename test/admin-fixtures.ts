import type { InjectOptions } from 'fastify';
import { expect } from 'vitest';
import type { DeploymentView } from '../src/modules/admin/service.js';
import { adminHeaders, type Harness, json, serviceHeaders, unique } from './harness.js';

/**
 * Fixtures of the operator API suites (src/modules/admin/admin-*.test.ts, docs/operator.md): operator
 * and service calls, readers of the operator's audit rows and the ledger. `harness` is read at call
 * time, so each file creates its own harness in `beforeAll`.
 */

export type Method = NonNullable<InjectOptions['method']>;

export const deploymentUrl = (id: string, rest = '') => `/api/v1/admin/deployments/${id}${rest}`;

/** An action name no other test (nor another file sharing the database) uses. */
export const uniqueAction = (prefix: string) => unique(prefix).toLowerCase();

export function expectInvalid(res: { statusCode: number; body: string }, field: string): void {
  expect(res.statusCode, res.body).toBe(400);
  const body = JSON.parse(res.body) as { error: string; code: string; message: string; fields?: Array<{ field: string }> };
  expect(body).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
  expect(body.message.length).toBeGreaterThan(0);
  const named = (body.fields ?? []).map((f) => f.field);
  expect(named.some((f) => f === field || f.startsWith(`${field}.`)), `${field} in ${JSON.stringify(named)}`).toBe(true);
}

export function adminFixtures(harness: () => Harness) {
  const admin = (method: Method, url: string, payload?: object) =>
    harness().request({ method, url, headers: adminHeaders(harness()), ...(payload === undefined ? {} : { payload }) });

  const serviceUsage = (deploymentId: string, toolName = 'any-tool') =>
    harness().request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(harness()),
      payload: { deployment_id: deploymentId, tool_name: toolName },
    });

  return {
    admin,
    serviceUsage,
    async view(deploymentId: string): Promise<DeploymentView> {
      const res = await admin('GET', deploymentUrl(deploymentId));
      expect(res.statusCode, res.body).toBe(200);
      return json<DeploymentView>(res);
    },
    serviceCheck: (deploymentId: string, toolName = 'any-tool') =>
      harness().request({
        method: 'POST',
        url: '/api/v1/mcp/check-entitlement',
        headers: serviceHeaders(harness()),
        payload: { deployment_id: deploymentId, tool_name: toolName },
      }),
    resolve: (userId: string) =>
      harness().request({
        method: 'GET',
        url: `/api/v1/mcp/resolve-deployment?user_id=${encodeURIComponent(userId)}`,
        headers: serviceHeaders(harness()),
      }),
    entitlements: (deploymentId: string, secret: string) =>
      harness().request({ method: 'POST', url: '/api/v1/entitlements/check', payload: { deployment_id: deploymentId, deployment_secret: secret } }),
    /** Spend exactly `credits` in one metered call, through an action of that cost created for it. */
    async spend(deploymentId: string, credits: number): Promise<void> {
      const action = uniqueAction('spend');
      expect((await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits })).statusCode).toBe(200);
      expect((await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action })).statusCode).toBe(200);
      const res = await serviceUsage(deploymentId, action);
      expect(json(res), res.body).toMatchObject({ success: true, credits_used: credits });
    },
    /** Audit rows written by the operator about one resource (optionally one action). */
    operatorAudit: (resourceType: string, resourceId: string, action?: string) =>
      harness().deps.db.query<{ organization_id: string | null; action: string; metadata: Record<string, unknown> }>(
        `SELECT organization_id, action, metadata FROM audit_logs
         WHERE actor = 'operator' AND resource_type = $1 AND resource_id = $2 AND ($3::text IS NULL OR action = $3)`,
        [resourceType, resourceId, action ?? null],
      ),
    ledgerRows: (deploymentId: string) =>
      harness().deps.db.query<{
        kind: string;
        amount: number;
        monthly_delta: number;
        purchased_delta: number;
        purchased_after: number;
        actor: string;
        reason: string | null;
      }>(
        `SELECT kind, amount, monthly_delta, purchased_delta, purchased_after, actor, reason FROM credit_ledger
         WHERE deployment_id = $1 ORDER BY id`,
        [deploymentId],
      ),
  };
}
