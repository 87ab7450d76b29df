import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, type Harness, json, signUp, signUpAsMember, signUpWithOrganization } from './harness.js';

/**
 * docs/accounts.md, Roles and permissions: one table of authorization cases over every organization-scoped route of the application
 * API: expired token, revoked key, short scope, viewer writing, member managing keys, a user of another
 * organization. Each route appears once with a body that passes validation, so what is tested is the
 * authorization, not the schema. A new route must be added here (the first test fails otherwise).
 */
type Case = { method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'; url: string; body?: Record<string, unknown>; write: boolean; keys?: boolean };
const SOME = '6f1c3d2e-0000-4000-8000-000000000000';
const TABLE: Case[] = [
  { method: 'GET', url: '/organizations/:id', write: false },
  { method: 'PUT', url: '/organizations/:id', body: { name: 'Renamed' }, write: true },
  { method: 'DELETE', url: '/organizations/:id', write: true },
  { method: 'GET', url: '/organizations/:id/users', write: false },
  { method: 'POST', url: '/organizations/:id/users', body: { email: 'someone@example.com', role: 'member' }, write: true },
  { method: 'PUT', url: '/organizations/:id/users/:userId', body: { role: 'member' }, write: true },
  { method: 'DELETE', url: '/organizations/:id/users/:userId', write: true },
  { method: 'GET', url: '/organizations/:id/invitations', write: false },
  { method: 'DELETE', url: '/organizations/:id/invitations/:invitationId', write: true },
  { method: 'GET', url: '/organizations/:id/api-keys', write: false, keys: true },
  { method: 'POST', url: '/organizations/:id/api-keys', body: { name: 'k' }, write: true, keys: true },
  { method: 'DELETE', url: '/organizations/:id/api-keys/:keyId', write: true, keys: true },
  { method: 'GET', url: '/organizations/:id/deployments', write: false },
  { method: 'POST', url: '/organizations/:id/deployments/:depId/secret', write: true },
  { method: 'GET', url: '/organizations/:id/deployments/:depId/entitlements', write: false },
  { method: 'GET', url: '/organizations/:id/audit-logs', write: false },
  { method: 'GET', url: '/organizations/:id/usage/summary', write: false },
  { method: 'GET', url: '/organizations/:id/balance/history', write: false },
  { method: 'GET', url: '/organizations/:id/credit-costs', write: false },
  { method: 'GET', url: '/organizations/:id/usage/records', write: false },
  { method: 'POST', url: '/api/organizations/:org_id/invitations', body: { email: 'someone@example.com', role: 'member' }, write: true },
  // Auto top-up is read and changed only by those who manage billing (docs/billing.md, Auto top-up): its GET is a write here.
  { method: 'GET', url: '/organizations/:id/auto-top-up', write: true },
  { method: 'PUT', url: '/organizations/:id/auto-top-up', body: { enabled: false, below_credits: 50, pack: 'small', max_per_month: 1 }, write: true },
  { method: 'GET', url: '/organizations/:id/webhooks', write: false },
  { method: 'POST', url: '/organizations/:id/webhooks', body: { url: 'https://example.com/hooks', events: ['api_key.created'] }, write: true },
  { method: 'GET', url: '/organizations/:id/webhooks/:webhookId', write: false },
  { method: 'PATCH', url: '/organizations/:id/webhooks/:webhookId', body: { is_active: true }, write: true },
  { method: 'DELETE', url: '/organizations/:id/webhooks/:webhookId', write: true },
  { method: 'GET', url: '/organizations/:id/webhooks/:webhookId/deliveries', write: false },
  { method: 'POST', url: '/organizations/:id/webhooks/:webhookId/deliveries/:deliveryId/retry', write: true },
  { method: 'POST', url: '/organizations/:id/webhooks/:webhookId/test', write: true },
  { method: 'GET', url: '/organizations/:id/template-deployments', write: false },
  { method: 'POST', url: '/organizations/:id/template-deployments', body: { template_id: SOME, name: 'Matrix', subdomain: 'matrix-site' }, write: true },
  { method: 'GET', url: '/organizations/:id/template-deployments/:tdId', write: false },
  { method: 'PUT', url: '/organizations/:id/template-deployments/:tdId', body: { name: 'Renamed' }, write: true },
  { method: 'DELETE', url: '/organizations/:id/template-deployments/:tdId', write: true },
  { method: 'POST', url: '/organizations/:id/template-deployments/:tdId/retry', write: true },
  { method: 'POST', url: '/organizations/:id/template-deployments/:tdId/verify-domain', write: true },
  { method: 'GET', url: '/organizations/:id/budgets', write: false },
  { method: 'POST', url: '/organizations/:id/budgets', body: { scope: 'organization', limit_credits: 10, window: 'day' }, write: true },
  { method: 'GET', url: '/organizations/:id/budgets/:budgetId', write: false },
  { method: 'PUT', url: '/organizations/:id/budgets/:budgetId', body: { limit_credits: 20 }, write: true },
  { method: 'DELETE', url: '/organizations/:id/budgets/:budgetId', write: true },
];

let h: Harness;
let owner: Awaited<ReturnType<typeof signUpWithOrganization>>;
let readKey: string;
let revokedKey: string;
/** A webhook of the owner's organization, so read routes with a webhook id find one. */
let webhookId = SOME;
/** A template deployment of the owner's organization, for the same reason. */
let tdId = SOME;
/** A budget of the owner's organization, for the same reason. */
let budgetId = SOME;

const fill = (url: string, orgId: string, userId = SOME) =>
  url
    .replace(':id', orgId)
    .replace(':org_id', orgId)
    .replace(':userId', userId)
    .replace(':webhookId', webhookId)
    .replace(':tdId', tdId)
    .replace(':budgetId', budgetId)
    .replace(':depId', owner.deploymentId) // a real deployment, so the entitlements read finds one
    .replace(/:[A-Za-z]+/g, SOME);

const send = (c: Case, headers: Record<string, string>, orgId = owner.organizationId, userId?: string) =>
  h.request({ method: c.method, url: fill(c.url, orgId, userId), headers, payload: c.body });

async function createKey(scopes: string[]): Promise<{ id: string; key: string }> {
  const res = await h.request({
    method: 'POST',
    url: `/organizations/${owner.organizationId}/api-keys`,
    headers: bearer(owner.accessToken),
    payload: { name: 'matrix', scopes },
  });
  return json<{ data: { id: string; key: string } }>(res).data;
}

beforeAll(async () => {
  h = await createHarness();
  owner = await signUpWithOrganization(h);
  readKey = (await createKey(['read'])).key;
  const revoked = await createKey(['read', 'write', 'admin']);
  await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}/api-keys/${revoked.id}`, headers: bearer(owner.accessToken) });
  revokedKey = revoked.key;
  const hook = await h.request({
    method: 'POST',
    url: `/organizations/${owner.organizationId}/webhooks`,
    headers: bearer(owner.accessToken),
    payload: { url: 'https://example.com/hooks', events: ['api_key.created'] },
  });
  webhookId = json<{ data: { id: string } }>(hook).data.id;
  const slug = `matrix-${owner.organizationId.slice(0, 8)}`;
  const template = await h.request({ method: 'POST', url: '/api/v1/admin/templates', headers: adminHeaders(h), payload: { name: 'Matrix', slug } });
  const td = await h.request({
    method: 'POST',
    url: `/organizations/${owner.organizationId}/template-deployments`,
    headers: bearer(owner.accessToken),
    payload: { template_id: json<{ id: string }>(template).id, name: 'Matrix', subdomain: slug },
  });
  expect(td.statusCode, td.body).toBe(201);
  tdId = json<{ data: { id: string } }>(td).data.id;
  const budget = await h.request({
    method: 'POST',
    url: `/organizations/${owner.organizationId}/budgets`,
    headers: bearer(owner.accessToken),
    payload: { scope: 'organization', limit_credits: 10, window: 'day' },
  });
  expect(budget.statusCode, budget.body).toBe(201);
  budgetId = json<{ data: { id: string } }>(budget).data.id;
});
afterAll(async () => {
  await h.close();
});

const code = (res: { json(): unknown }) => (res.json() as { error?: { code?: string } }).error?.code;

describe('application API authorization table', () => {
  it('covers every organization-scoped account route', () => {
    const routes = h.app.routeList
      .filter((r) => r.auth === 'account' && /^\/(api\/)?organizations\/:/.test(r.url))
      .map((r) => `${r.method} ${r.url}`)
      .sort();
    expect(routes).toEqual(TABLE.map((c) => `${c.method} ${c.url}`).sort());
  });

  it('an expired access token → 401 on every route', async () => {
    const u = await signUp(h);
    h.clock.advance(16 * 60_000);
    try {
      for (const c of TABLE) expect((await send(c, bearer(u.accessToken))).statusCode, `${c.method} ${c.url}`).toBe(401);
    } finally {
      h.clock.advance(-16 * 60_000);
    }
  });

  it('a revoked key → 401 on every route', async () => {
    for (const c of TABLE) expect((await send(c, { 'x-api-key': revokedKey })).statusCode, `${c.method} ${c.url}`).toBe(401);
  });

  it('a read-only key: reads pass authorization, every write is 403 FORBIDDEN', async () => {
    for (const c of TABLE) {
      const res = await send(c, { 'x-api-key': readKey });
      if (c.write) {
        expect(res.statusCode, `${c.method} ${c.url}`).toBe(403);
        expect(code(res)).toBe('FORBIDDEN');
      } else if (c.url.endsWith('/audit-logs')) {
        expect(res.statusCode).toBe(403); // the audit log needs the admin scope
      } else {
        expect(res.statusCode, `${c.method} ${c.url}`).toBe(200);
      }
    }
  });

  it('a viewer writing → 403 FORBIDDEN on every write', async () => {
    const viewer = await signUpAsMember(h, owner.organizationId, 'viewer');
    for (const c of TABLE.filter((x) => x.write)) {
      const res = await send(c, bearer(viewer.accessToken), owner.organizationId, owner.userId);
      expect(res.statusCode, `${c.method} ${c.url}`).toBe(403);
      expect(code(res)).toBe('FORBIDDEN');
    }
  });

  it('a member managing keys → 403; listing them is allowed', async () => {
    const member = await signUpAsMember(h, owner.organizationId, 'member');
    for (const c of TABLE.filter((x) => x.keys)) {
      const res = await send(c, bearer(member.accessToken));
      expect(res.statusCode, `${c.method} ${c.url}`).toBe(c.write ? 403 : 200);
    }
  });

  it('a user of another organization → 404 on every route, indistinguishable from a missing organization', async () => {
    const stranger = await signUpWithOrganization(h, 'stranger');
    for (const c of TABLE) {
      const res = await send(c, bearer(stranger.accessToken));
      expect(res.statusCode, `${c.method} ${c.url}`).toBe(404);
      expect(code(res)).toBe('NOT_FOUND');
    }
    // …and a key of the other organization too.
    const otherKey = await h.request({
      method: 'POST',
      url: `/organizations/${stranger.organizationId}/api-keys`,
      headers: bearer(stranger.accessToken),
      payload: { name: 'other', scopes: ['read', 'write', 'admin'] },
    });
    const key = json<{ data: { key: string } }>(otherKey).data.key;
    for (const c of TABLE) expect((await send(c, { 'x-api-key': key })).statusCode, `${c.method} ${c.url}`).toBe(404);
  });
});
