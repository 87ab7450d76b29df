import type { LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { createApiKey, type Scope } from '../src/modules/api-keys/service.js';
import type { BudgetView } from '../src/modules/budgets/view.js';
import { adminHeaders, bearer, createTenant, grant, type Harness, json, serviceHeaders, type SignedInUser, signUpAsMember, type Tenant } from './harness.js';

/**
 * Fixtures of the budgets API suites (test/budgets-api*.test.ts, docs/budgets.md, API): a tenant with
 * credits to spend and members of every role, the routes, and counts that prove nothing was written.
 */
export type Headers = Record<string, string>;
export type { BudgetView };

export interface BudgetTenant extends Tenant {
  owner: SignedInUser;
  admin: SignedInUser;
  member: SignedInUser;
  viewer: SignedInUser;
}

export interface EnvelopeErrorBody {
  success: false;
  error: { code: string; message: string };
  details: { fields?: Array<{ field: string; message: string }> };
}

export function budgetsApi(harness: () => Harness) {
  const url = (organizationId: string, budgetId?: string) => `/organizations/${organizationId}/budgets${budgetId ? `/${budgetId}` : ''}`;
  const adminUrl = (organizationId: string, budgetId?: string) => `/api/v1/admin${url(organizationId, budgetId)}`;

  return {
    url,
    adminUrl,

    /** A tenant on launch with 10,000 purchased credits, and a signed-in member of each role. */
    async tenant(): Promise<BudgetTenant> {
      const h = harness();
      const t = await createTenant(h, { tier: 'launch' });
      await grant(h, t.deploymentId, 10_000);
      const [owner, admin, member, viewer] = await Promise.all(
        (['owner', 'admin', 'member', 'viewer'] as const).map((role) => signUpAsMember(h, t.organizationId, role)),
      );
      return { ...t, owner: owner!, admin: admin!, member: member!, viewer: viewer! };
    },

    /** An API key of the organization with `scopes`: its id, and the headers that send it. */
    async key(organizationId: string, scopes: Scope[]): Promise<{ id: string; headers: Headers }> {
      const { apiKey, key } = await createApiKey(harness().ctx, { organizationId, name: 'budgets test', scopes });
      return { id: apiKey.id, headers: { 'x-api-key': key } };
    },

    send(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, headers: Headers, payload?: unknown): Promise<LightMyRequestResponse> {
      return harness().request({ method, url: path, headers, ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }) });
    },

    /** Create through the API as `headers`; throws unless 201. */
    async create(headers: Headers, organizationId: string, body: Record<string, unknown>): Promise<BudgetView> {
      const res = await harness().request({ method: 'POST', url: url(organizationId), headers, payload: body });
      if (res.statusCode !== 201) throw new Error(`create budget failed: ${res.statusCode} ${res.body}`);
      return json<{ data: BudgetView }>(res).data;
    },

    async read(headers: Headers, organizationId: string, budgetId: string): Promise<BudgetView> {
      const res = await harness().request({ method: 'GET', url: url(organizationId, budgetId), headers });
      expect(res.statusCode, res.body).toBe(200);
      return json<{ data: BudgetView }>(res).data;
    },

    /** Spend `times` credits through service usage (one credit a call), as `mcpUserId` and `tool`. */
    async spend(t: Tenant, times: number, extra: { mcp_user_id?: string; tool_name?: string; deployment_id?: string } = {}): Promise<void> {
      const h = harness();
      for (let i = 0; i < times; i++) {
        const res = await h.request({
          method: 'POST',
          url: '/api/v1/mcp/usage',
          headers: serviceHeaders(h),
          payload: { deployment_id: t.deploymentId, tool_name: 'x', ...extra },
        });
        expect(json(res).success, res.body).toBe(true);
      }
    },

    /** The budgets, window rows and audit rows of budgets of an organization: unchanged by a refused request. */
    async counts(organizationId: string): Promise<{ budgets: number; windows: number; audit: number }> {
      const rows = await harness().deps.db.query<{ budgets: number; windows: number; audit: number }>(
        `SELECT (SELECT count(*)::int FROM budgets WHERE organization_id = $1) AS budgets,
                (SELECT count(*)::int FROM budget_windows w JOIN budgets b ON b.id = w.budget_id WHERE b.organization_id = $1) AS windows,
                (SELECT count(*)::int FROM audit_logs WHERE organization_id = $1 AND resource_type = 'budget') AS audit`,
        [organizationId],
      );
      return rows[0]!;
    },

    /** The audit rows of one budget, oldest first. */
    auditOf(budgetId: string) {
      return harness().deps.db.query<{ action: string; actor: string; user_id: string | null; organization_id: string; metadata: Record<string, unknown> }>(
        `SELECT action, actor, user_id, organization_id, metadata FROM audit_logs WHERE resource_type = 'budget' AND resource_id = $1 ORDER BY created_at, id`,
        [budgetId],
      );
    },

    asUser: (u: SignedInUser) => bearer(u.accessToken),
    operator: () => adminHeaders(harness()),
  };
}

/** An envelope error with `status` and `code`; for a 400, the field it names first (an array's item: `field.0`). */
export function expectEnvelopeError(res: LightMyRequestResponse, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body).toBe(status);
  const body = json<EnvelopeErrorBody>(res);
  expect(body.success).toBe(false);
  expect(body.error.code).toBe(code);
  if (field !== undefined) expect(body.details.fields?.[0]?.field.replace(/\.\d+$/, ''), res.body).toBe(field);
}
