import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BudgetTenant, budgetsApi, expectEnvelopeError } from '../../../test/budgets-api-fixtures.js';
import { bearer, createHarness, type Harness, json } from '../../../test/harness.js';

/**
 * End users' ids are not a viewer's to read (docs/usage-analytics.md, Who may read): the usage reads
 * mask them as the budgets API does, and refuse to filter or group by them, also for an API key whose
 * creator is a viewer now. Every other role, and a key of one, reads them.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const api = budgetsApi(() => h);
const ALICE = 'alice@customer.example';
const BOB = 'bob@customer.example';
const leaks = (text: string) => text.includes(ALICE) || text.includes(BOB);

async function tenantWithEndUsers(): Promise<BudgetTenant> {
  const t = await api.tenant();
  await api.create(api.asUser(t.owner), t.organizationId, { scope: 'end_user', end_user_id: ALICE, limit_credits: 10, window: 'day' });
  await api.spend(t, 2, { mcp_user_id: ALICE });
  await api.spend(t, 1, { mcp_user_id: BOB });
  await api.spend(t, 1);
  return t;
}

const get = (path: string, headers: Record<string, string>) => h.request({ method: 'GET', url: path, headers });

async function expectMasked(t: BudgetTenant, headers: Record<string, string>) {
  const base = `/organizations/${t.organizationId}`;
  const budgets = await get(`${base}/budgets`, headers);
  expect(budgets.statusCode, budgets.body).toBe(200);
  expect(leaks(budgets.body)).toBe(false);

  const records = await get(`${base}/usage/records`, headers);
  expect(records.statusCode, records.body).toBe(200);
  expect(leaks(records.body)).toBe(false);
  const ids = json<{ data: Array<{ mcp_user_id: string | null }> }>(records).data.map((r) => r.mcp_user_id);
  expect(ids.sort()).toEqual(['***', '***', '***', null].sort());

  const csv = await get(`${base}/usage/records`, { ...headers, accept: 'text/csv' });
  expect(csv.statusCode).toBe(200);
  expect(leaks(csv.body)).toBe(false);
  expect(csv.body).toContain('***');

  // Filtering or grouping by an id the caller cannot see would tell a guessed one apart.
  expectEnvelopeError(await get(`${base}/usage/records?mcp_user_id=${encodeURIComponent(ALICE)}`, headers), 403, 'FORBIDDEN');
  expectEnvelopeError(await get(`${base}/usage/summary?group_by=mcp_user`, headers), 403, 'FORBIDDEN');
  expectEnvelopeError(await get(`${base}/usage/summary?group_by=day&split_by=mcp_user`, headers), 403, 'FORBIDDEN');
  // What does not name end users still answers.
  expect((await get(`${base}/usage/summary?group_by=tool`, headers)).statusCode).toBe(200);
}

describe('end users’ ids in usage reads', () => {
  it('a viewer sees them masked in records (JSON and CSV) and budgets, and may not filter or group by them', async () => {
    const t = await tenantWithEndUsers();
    await expectMasked(t, api.asUser(t.viewer));
  });

  it('an API key of a viewer (one granted api_keys.manage) reads them as that viewer does', async () => {
    const t = await tenantWithEndUsers();
    const granted = await h.request({
      method: 'PUT',
      url: `/organizations/${t.organizationId}/users/${t.viewer.userId}`,
      headers: api.asUser(t.owner),
      payload: { permissions: { 'api_keys.manage': true } },
    });
    expect(granted.statusCode, granted.body).toBe(200);
    const made = await h.request({
      method: 'POST',
      url: `/organizations/${t.organizationId}/api-keys`,
      headers: api.asUser(t.viewer),
      payload: { name: 'viewer key', scopes: ['read'] },
    });
    expect(made.statusCode, made.body).toBe(201);
    await expectMasked(t, bearer(json<{ data: { key: string } }>(made).data.key));
  });

  it('every other role reads them, filters and groups by them', async () => {
    const t = await tenantWithEndUsers();
    for (const user of [t.owner, t.admin, t.member]) {
      const headers = api.asUser(user);
      const records = await get(`/organizations/${t.organizationId}/usage/records?mcp_user_id=${encodeURIComponent(ALICE)}`, headers);
      expect(records.statusCode, records.body).toBe(200);
      expect(json<{ data: Array<{ mcp_user_id: string }> }>(records).data.map((r) => r.mcp_user_id)).toEqual([ALICE, ALICE]);
      const summary = await get(`/organizations/${t.organizationId}/usage/summary?group_by=mcp_user`, headers);
      expect(summary.statusCode, summary.body).toBe(200);
      expect(summary.body).toContain(BOB);
    }
  });
});
