import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BudgetTenant, budgetsApi, type Headers } from '../../../test/budgets-api-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json, unique, watchStatements } from '../../../test/harness.js';
import { createDeployment } from '../deployments/service.js';

/**
 * docs/budgets.md, "In the entitlement snapshot and the AI quota": the snapshot (the deployment's own
 * check and its members' read) and GET /api/v1/ai/quota list the organization and deployment budgets
 * that hold the deployment's charges, and the api_key budgets of the key that authenticated. Budgets are
 * made through the budgets API and spent through the metering routes, as callers do.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const api = budgetsApi(() => h);

interface Listed {
  id: string;
  scope: string;
  window: string;
  limit_credits: number | null;
  limit_ai_tokens: number | null;
  spent_credits: number | null;
  spent_ai_tokens: number | null;
  resets_at: string;
}

const deploymentHeaders = (id: string, secret: string) => ({ 'x-deployment-id': id, 'x-deployment-secret': secret });

async function checked(deploymentId: string, secret: string): Promise<Listed[]> {
  const res = await h.request({ method: 'POST', url: '/api/v1/entitlements/check', payload: { deployment_id: deploymentId, deployment_secret: secret } });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ budgets: Listed[] }>(res).budgets;
}

async function quota(deploymentId: string, secret: string): Promise<Listed[]> {
  const res = await h.request({ method: 'GET', url: '/api/v1/ai/quota', headers: deploymentHeaders(deploymentId, secret) });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ budgets: Listed[] }>(res).budgets;
}

/** The members' read of a deployment's snapshot, as `headers` (a person or an API key). */
async function membersRead(headers: Headers, organizationId: string, deploymentId: string): Promise<Listed[]> {
  const res = await h.request({ method: 'GET', url: `/organizations/${organizationId}/deployments/${deploymentId}/entitlements`, headers });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: { budgets: Listed[] } }>(res).data.budgets;
}

async function addDeployment(organizationId: string): Promise<{ id: string; secret: string }> {
  const { deployment, secret } = await h.deps.db.transaction((tx) =>
    createDeployment(tx, h.ctx, { organizationId, name: unique('second'), tier: 'launch', isPrimary: false }),
  );
  return { id: deployment.id, secret };
}

/** Credits spent through stdio record-usage (a bearer key) with the key `headers` send, one a call. */
async function recordAs(headers: Headers, times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(headers['x-api-key']!), payload: { tool_name: 'x' } });
    expect(json(res).success, res.body).toBe(true);
  }
}

const ids = (list: Listed[]) => list.map((b) => b.id);

describe('the budgets that apply to the caller', () => {
  let t: BudgetTenant;
  let owner: Headers;
  let keyA: { id: string; headers: Headers };
  let keyB: { id: string; headers: Headers };
  let other: { id: string; secret: string };
  const b: Record<string, string> = {};

  beforeAll(async () => {
    // The harness's clock: Thursday 2026-01-15 12:00 UTC, moved by seconds only.
    t = await api.tenant();
    owner = (await api.key(t.organizationId, ['read', 'write', 'admin'])).headers;
    keyA = await api.key(t.organizationId, ['read', 'write']);
    keyB = await api.key(t.organizationId, ['read', 'write']);
    other = await addDeployment(t.organizationId);
    // A second apart: the lists are oldest first.
    const create = async (name: string, body: Record<string, unknown>) => {
      h.clock.advance(1000);
      b[name] = (await api.create(owner, t.organizationId, body)).id;
    };
    await create('org', { scope: 'organization', limit_credits: 100, window: 'day' });
    await create('dep', { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 50, limit_ai_tokens: 1000, window: 'month', mode: 'alert' });
    await create('otherDep', { scope: 'deployment', deployment_id: other.id, limit_credits: 40, window: 'day' });
    await create('orgHere', { scope: 'organization', deployment_id: t.deploymentId, limit_ai_tokens: 500, window: 'week' });
    await create('orgThere', { scope: 'organization', deployment_id: other.id, limit_credits: 30, window: 'day' });
    await create('keyA', { scope: 'api_key', api_key_id: keyA.id, limit_credits: 20, window: 'hour' });
    await create('keyAThere', { scope: 'api_key', api_key_id: keyA.id, deployment_id: other.id, limit_credits: 10, window: 'hour' });
    await create('keyB', { scope: 'api_key', api_key_id: keyB.id, limit_credits: 25, window: 'hour' });
    await create('tool', { scope: 'tool', tool_name: 'x', limit_credits: 60, window: 'day' });
    await create('endUsers', { scope: 'end_user', end_user_id: '*', limit_credits: 60, window: 'day' });
    // 3 credits spent with key A on the primary deployment, 2 more by the service on it.
    await recordAs(keyA.headers, 3);
    await api.spend(t, 2);
  });

  /** The primary deployment's organization and deployment budgets, with what the 5 credits counted. */
  const primaryBudgets = (): Listed[] => [
    {
      id: b.org!,
      scope: 'organization',
      window: 'day',
      limit_credits: 100,
      limit_ai_tokens: null,
      spent_credits: 5,
      spent_ai_tokens: null,
      resets_at: '2026-01-16T00:00:00.000Z',
    },
    {
      id: b.dep!,
      scope: 'deployment',
      window: 'month',
      limit_credits: 50,
      limit_ai_tokens: 1000,
      spent_credits: 5,
      spent_ai_tokens: 0,
      resets_at: '2026-02-01T00:00:00.000Z',
    },
    {
      id: b.orgHere!,
      scope: 'organization',
      window: 'week',
      limit_credits: null,
      limit_ai_tokens: 500,
      spent_credits: null,
      spent_ai_tokens: 0,
      resets_at: '2026-01-19T00:00:00.000Z',
    },
  ];

  it("the deployment's own check and its AI quota list its organization and deployment budgets, no other deployment's, no key's", async () => {
    expect(await checked(t.deploymentId, t.deploymentSecret)).toEqual(primaryBudgets());
    expect(await quota(t.deploymentId, t.deploymentSecret)).toEqual(primaryBudgets());
  });

  it("the other deployment's snapshot lists the organization budget and its own, not the primary's", async () => {
    const listed = await checked(other.id, other.secret);
    expect(ids(listed)).toEqual([b.org, b.otherDep, b.orgThere]);
    // The organization budget counts the whole organization's charges; the other two saw none.
    expect(listed.map((x) => x.spent_credits)).toEqual([5, 0, 0]);
    expect(ids(await quota(other.id, other.secret))).toEqual([b.org, b.otherDep, b.orgThere]);
  });

  it('an api_key budget is listed only when the key it names authenticates, and only where it holds', async () => {
    const withA = await membersRead(keyA.headers, t.organizationId, t.deploymentId);
    expect(withA).toEqual([
      ...primaryBudgets(),
      {
        id: b.keyA!,
        scope: 'api_key',
        window: 'hour',
        limit_credits: 20,
        limit_ai_tokens: null,
        spent_credits: 3,
        spent_ai_tokens: null,
        resets_at: '2026-01-15T13:00:00.000Z',
      },
    ]);
    const withB = await membersRead(keyB.headers, t.organizationId, t.deploymentId);
    expect(withB).toEqual([...primaryBudgets(), expect.objectContaining({ id: b.keyB, spent_credits: 0 })]);
    // A person and the deployment itself are no key: no api_key budget.
    expect(await membersRead(api.asUser(t.owner), t.organizationId, t.deploymentId)).toEqual(primaryBudgets());
    // Key A's budget narrowed to the other deployment holds there (with its other one), not on the primary.
    expect(ids(await membersRead(keyA.headers, t.organizationId, other.id))).toEqual([b.org, b.otherDep, b.orgThere, b.keyA, b.keyAThere]);
  });

  it('spent is what the budgets API reads for the same window', async () => {
    const listed = await membersRead(keyA.headers, t.organizationId, t.deploymentId);
    for (const entry of listed) {
      const read = await api.read(owner, t.organizationId, entry.id);
      expect({ spent_credits: entry.spent_credits, spent_ai_tokens: entry.spent_ai_tokens, resets_at: entry.resets_at }).toEqual({
        spent_credits: read.spent_credits,
        spent_ai_tokens: read.spent_ai_tokens,
        resets_at: read.resets_at,
      });
    }
  });

  it('a charge shows at once in the next answer (nothing is cached)', async () => {
    await recordAs(keyA.headers, 1);
    const listed = await membersRead(keyA.headers, t.organizationId, t.deploymentId);
    expect(listed.map((x) => [x.id, x.spent_credits])).toEqual([
      [b.org, 6],
      [b.dep, 6],
      [b.orgHere, null],
      [b.keyA, 4],
    ]);
    expect((await quota(t.deploymentId, t.deploymentSecret)).map((x) => x.spent_credits)).toEqual([6, 6, null]);
  });

  it('a deployment created after the budgets has them too', async () => {
    const late = await addDeployment(t.organizationId);
    expect(ids(await checked(late.id, late.secret))).toEqual([b.org]);
  });
});

describe('an organization without budgets', () => {
  it('answers budgets: [] with one read of the budgets and none of budget windows', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const watch = watchStatements(h.deps.db, /\bbudgets\b|budget_windows/);
    let seen: string[];
    try {
      expect(await checked(t.deploymentId, t.deploymentSecret)).toEqual([]);
      expect(await quota(t.deploymentId, t.deploymentSecret)).toEqual([]);
    } finally {
      seen = watch.stop();
    }
    expect(seen).toEqual(['budgets_that_apply', 'budgets_that_apply']);
  });
});
