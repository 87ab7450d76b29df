import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  setTierOverHttp,
  signUp,
  signUpAsMember,
  signUpWithOrganization,
  unique,
} from '../../../test/harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type ErrorBody = { error: { code: string }; details: { fields?: Array<{ field: string }> } };
type Usage = {
  organization_id: string;
  deployment_id: string;
  period_start: string;
  period_end: string;
  metrics: Array<{ metric: string; count: number; quantity: number; refunded: number }>;
  credits: Record<string, number | null>;
  ai_tokens: Record<string, unknown>;
};

const get = (path: string, headers: Record<string, string>, query = '') => h.request({ method: 'GET', url: `/billing/${path}${query}`, headers });
const orgOf = async (res: { statusCode: number; body: string; json(): unknown }) => {
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { data: Usage }).data.organization_id;
};

function expectError(res: { statusCode: number; json(): unknown }, status: number, code: string, field?: string) {
  expect(res.statusCode, JSON.stringify(res.json())).toBe(status);
  const body = res.json() as ErrorBody;
  expect(body.error.code).toBe(code);
  if (field) expect(body.details.fields?.map((f) => f.field)).toContain(field);
}

async function insertSubscription(organizationId: string, status: string, createdAt: Date) {
  await h.deps.db.query(
    `INSERT INTO subscriptions (organization_id, stripe_subscription_id, stripe_customer_id, stripe_price_id, status,
       current_period_start, current_period_end, created_at, updated_at)
     VALUES ($1, $2, $3, 'price_launch', $4, $5, $6, $5, $5)`,
    [organizationId, unique('sub'), unique('cus'), status, createdAt, new Date(createdAt.getTime() + 30 * 86_400_000)],
  );
}

describe('which organization a /billing call acts for (docs/decisions-keys-billing.md, Billing reads)', () => {
  it('the query, the header, the default organization, the only organization; else 400', async () => {
    const u = await signUpWithOrganization(h);
    const auth = bearer(u.accessToken);
    // One organization: it is the one.
    expect(await orgOf(await get('usage', auth))).toBe(u.organizationId);
    // A second organization and no default: the caller must name one.
    const second = await h.request({ method: 'POST', url: '/organizations', headers: auth, payload: { name: 'Two', slug: unique('two').toLowerCase() } });
    const secondId = json<{ data: { id: string } }>(second).data.id;
    expectError(await get('usage', auth), 400, 'VALIDATION_ERROR', 'organization_id');
    expectError(await get('subscription', auth), 400, 'VALIDATION_ERROR', 'organization_id');
    expectError(await get('invoices', auth), 400, 'VALIDATION_ERROR', 'organization_id');
    expect(await orgOf(await get('usage', auth, `?organization_id=${secondId}`))).toBe(secondId);
    expect(await orgOf(await get('usage', { ...auth, 'x-organization-id': secondId }))).toBe(secondId);
    expect(await orgOf(await get('usage', { ...auth, 'x-organization-id': u.organizationId }, `?organization_id=${u.organizationId}`))).toBe(
      u.organizationId,
    );
    expectError(await get('usage', { ...auth, 'x-organization-id': secondId }, `?organization_id=${u.organizationId}`), 400, 'VALIDATION_ERROR', 'organization_id');
    // A default organization decides when none is named.
    const put = await h.request({ method: 'PUT', url: '/auth/me', headers: auth, payload: { default_organization_id: secondId } });
    expect(put.statusCode).toBe(200);
    expect(await orgOf(await get('usage', auth))).toBe(secondId);
    expect(await orgOf(await get('usage', auth, `?organization_id=${u.organizationId}`))).toBe(u.organizationId);
  });

  it('a user without organizations gets 400; a malformed id 400 naming it; a foreign organization 404', async () => {
    const lonely = await signUp(h);
    expectError(await get('subscription', bearer(lonely.accessToken)), 400, 'VALIDATION_ERROR', 'organization_id');
    const u = await signUpWithOrganization(h);
    const other = await signUpWithOrganization(h);
    expectError(await get('usage', bearer(u.accessToken), '?organization_id=acme'), 400, 'VALIDATION_ERROR', 'organization_id');
    expectError(await get('usage', { ...bearer(u.accessToken), 'x-organization-id': 'acme' }), 400, 'VALIDATION_ERROR', 'x-organization-id');
    expectError(await get('usage', bearer(u.accessToken), '?organization_id=&x=1'), 400, 'VALIDATION_ERROR');
    expectError(await get('usage', bearer(u.accessToken), `?organization_id=${other.organizationId}`), 404, 'NOT_FOUND');
    expectError(await get('invoices', { ...bearer(u.accessToken), 'x-organization-id': other.organizationId }), 404, 'NOT_FOUND');
  });

  it('an API key acts for its own organization; naming another is 404', async () => {
    const u = await signUpWithOrganization(h);
    const other = await signUpWithOrganization(h);
    const key = await createKeyOverHttp(h, bearer(u.accessToken), u.organizationId, { scopes: ['read'] });
    expect(await orgOf(await get('usage', { 'x-api-key': key.key }))).toBe(u.organizationId);
    expect((await get('subscription', bearer(key.key))).statusCode).toBe(200);
    expectError(await get('usage', { 'x-api-key': key.key }, `?organization_id=${other.organizationId}`), 404, 'NOT_FOUND');
  });

  it('needs billing.read: owner, admin and member read; a viewer gets 403', async () => {
    const owner = await signUpWithOrganization(h);
    for (const role of ['admin', 'member'] as const) {
      const m = await signUpAsMember(h, owner.organizationId, role);
      expect((await get('subscription', bearer(m.accessToken), `?organization_id=${owner.organizationId}`)).statusCode, role).toBe(200);
    }
    const viewer = await signUpAsMember(h, owner.organizationId, 'viewer');
    for (const path of ['subscription', 'usage', 'invoices']) {
      expectError(await get(path, bearer(viewer.accessToken), `?organization_id=${owner.organizationId}`), 403, 'FORBIDDEN');
    }
  });
});

describe('GET /billing/subscription', () => {
  it('is data: null without a subscription, else the one in force (preferred over a newer canceled one)', async () => {
    const u = await signUpWithOrganization(h);
    const none = await get('subscription', bearer(u.accessToken));
    expect(none.statusCode).toBe(200);
    expect(json(none)).toMatchObject({ success: true, data: null });

    const start = new Date('2026-01-01T00:00:00.000Z');
    await insertSubscription(u.organizationId, 'active', start);
    await insertSubscription(u.organizationId, 'canceled', new Date('2026-01-10T00:00:00.000Z'));
    const res = await get('subscription', bearer(u.accessToken));
    expect(json<{ data: Record<string, unknown> }>(res).data).toMatchObject({
      organization_id: u.organizationId,
      status: 'active',
      stripe_price_id: 'price_launch',
      current_period_start: start.toISOString(),
      current_period_end: '2026-01-31T00:00:00.000Z',
      cancel_at_period_end: false,
    });
  });
});

describe('GET /billing/usage', () => {
  it('aggregates the period’s successful usage records per metric, with credits and AI tokens', async () => {
    const u = await signUpWithOrganization(h);
    await setTierOverHttp(h, u.deploymentId, 'launch');
    const ragTool = unique('rag-tool');
    const mapped = await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${ragTool}`, headers: adminHeaders(h), payload: { action: 'rag_query' } });
    expect(mapped.statusCode).toBe(200);
    const key = await createKeyOverHttp(h, bearer(u.accessToken), u.organizationId, { scopes: ['read', 'write'] });
    const record = async (tool: string) => {
      const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: tool } });
      expect(res.statusCode, res.body).toBe(200);
      expect(json(res)).toMatchObject({ success: true });
    };
    for (let i = 0; i < 3; i++) await record(unique('plain-tool'));
    for (let i = 0; i < 2; i++) await record(ragTool);

    const res = await get('usage', bearer(u.accessToken));
    expect(res.statusCode).toBe(200);
    const usage = json<{ data: Usage }>(res).data;
    expect(usage).toMatchObject({ organization_id: u.organizationId, deployment_id: u.deploymentId, tier: 'launch' });
    expect(Date.parse(usage.period_start)).toBeLessThanOrEqual(h.clock.now().getTime());
    expect(Date.parse(usage.period_end)).toBeGreaterThan(h.clock.now().getTime());
    expect(usage.metrics).toEqual([
      { metric: 'platform_basic', count: 3, quantity: 3, refunded: 0 },
      { metric: 'rag_query', count: 2, quantity: 4, refunded: 0 },
    ]);
    expect(usage.credits).toEqual({ monthly_allocation: 2000, monthly_used: 7, monthly_remaining: 1993, purchased: 0, reserved: 0, available: 1993 });
    expect(usage.ai_tokens).toEqual({ used: 0, limit: 10000, remaining: 10000, by_model: [] });

    // A failed call is not usage; the next period starts from nothing.
    await setTierOverHttp(h, u.deploymentId, 'sandbox');
    const denied = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: ragTool } });
    expect(json(denied)).toMatchObject({ success: false });
    await setTierOverHttp(h, u.deploymentId, 'launch');
    expect(json<{ data: Usage }>(await get('usage', bearer(u.accessToken))).data.metrics).toHaveLength(2);
    h.clock.set(new Date(Date.parse(usage.period_end) + 1000));
    // A month on, the user's access token has long expired; the key (scope read) reads billing too.
    const next = json<{ data: Usage }>(await get('usage', { 'x-api-key': key.key })).data;
    expect(next.period_start).toBe(usage.period_end);
    expect(next.metrics).toEqual([]);
    expect(next.credits).toMatchObject({ monthly_used: 0, available: 2000 });
  });

  it('sandbox: zero allocation, AI limit 0', async () => {
    const u = await signUpWithOrganization(h);
    const usage = json<{ data: Usage }>(await get('usage', bearer(u.accessToken))).data;
    expect(usage.metrics).toEqual([]);
    expect(usage.credits).toMatchObject({ monthly_allocation: 0, available: 0 });
    expect(usage.ai_tokens).toEqual({ used: 0, limit: 0, remaining: 0, by_model: [] });
  });
});

describe('GET /billing/invoices', () => {
  it('lists the organization’s invoices newest first, by cursor, and no one else’s', async () => {
    const u = await signUpWithOrganization(h);
    const other = await signUpWithOrganization(h);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const rows = await h.deps.db.query<{ id: string }>(
        `INSERT INTO invoices (organization_id, stripe_invoice_id, status, amount_due, amount_paid, currency, created_at)
         VALUES ($1, $2, 'paid', $3, $3, 'usd', $4) RETURNING id`,
        [u.organizationId, unique('in'), 1000 + i, new Date(Date.UTC(2025, i, 1))],
      );
      ids.unshift(rows[0]!.id);
    }
    await h.deps.db.query(`INSERT INTO invoices (organization_id, stripe_invoice_id, created_at) VALUES ($1, $2, $3)`, [
      other.organizationId,
      unique('in'),
      new Date(Date.UTC(2025, 2, 1)),
    ]);
    const seen: Array<Record<string, unknown> & { id: string }> = [];
    let cursor: string | null = null;
    do {
      const res = await get('invoices', bearer(u.accessToken), `?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(res.statusCode, res.body).toBe(200);
      const body = json<{ data: Array<Record<string, unknown> & { id: string }>; meta: { next_cursor: string | null } }>(res);
      seen.push(...body.data);
      cursor = body.meta.next_cursor;
    } while (cursor);
    expect(seen.map((i) => i.id)).toEqual(ids);
    expect(seen[0]).toMatchObject({ organization_id: u.organizationId, status: 'paid', amount_due: 1004, amount_paid: 1004, currency: 'usd', period_start: null });
    expect(seen[0]).not.toHaveProperty('raw');
    const empty = await get('invoices', bearer(other.accessToken));
    expect(json<{ data: unknown[] }>(empty).data).toHaveLength(1);
    expectError(await get('invoices', bearer(u.accessToken), '?cursor=bogus'), 400, 'VALIDATION_ERROR', 'cursor');
  });
});
