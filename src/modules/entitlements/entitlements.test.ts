import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, json, mistyped, serviceHeaders } from '../../../test/harness.js';
import { addMonths } from '../../clock.js';
import { rotateDeploymentSecret } from '../deployments/service.js';
import type { Tier } from '../../lib/tiers.js';
import { deleteOrganization } from '../organizations/service.js';

/**
 * docs/entitlements.md: the entitlement snapshot (credentials in the body) and the AI quota
 * (deployment headers). Expected values are written out from the documented tier table, not read from the code.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const check = (deploymentId: unknown, secret: unknown, options: { query?: string; headers?: Record<string, string> } = {}) =>
  h.request({
    method: 'POST',
    url: `/api/v1/entitlements/check${options.query ?? ''}`,
    headers: options.headers ?? {},
    payload: { deployment_id: deploymentId, deployment_secret: secret },
  });

const quota = (headers: Record<string, string>) => h.request({ method: 'GET', url: '/api/v1/ai/quota', headers });

const deploymentHeaders = (id: string, secret: string) => ({ 'x-deployment-id': id, 'x-deployment-secret': secret });

const admin = (method: 'PUT' | 'DELETE' | 'POST', url: string, payload?: object) =>
  h.request({ method, url, headers: adminHeaders(h), ...(payload ? { payload } : {}) });

interface Snapshot {
  status: string;
  tier: string;
  features: Record<string, boolean | number | string | null>;
  quotas: { ai_tokens: { used: number; limit: number | null; remaining: number | null; resets_at: string } };
  message: string | null;
  next_check_seconds: number;
}

/** The tier table of docs/entitlements.md: flags, limits, support levels. */
const EXPECTED: Record<
  Tier,
  { flags: [boolean, boolean, boolean, boolean, boolean]; ai: number | null; rate: number | null; support: string; credits: number | null }
> = {
  //            ai     billing custom white  mcp
  sandbox: { flags: [false, false, false, false, false], ai: 0, rate: 100, support: 'community', credits: 0 },
  trial: { flags: [true, true, false, false, true], ai: 1_000, rate: 500, support: 'email', credits: 100 },
  launch: { flags: [true, true, true, false, true], ai: 10_000, rate: 2_000, support: 'email', credits: 2_000 },
  growth: { flags: [true, true, true, true, true], ai: 50_000, rate: 10_000, support: 'priority', credits: 20_000 },
  enterprise: { flags: [true, true, true, true, true], ai: null, rate: null, support: 'dedicated', credits: null },
};

function expectedFeatures(tier: Tier) {
  const e = EXPECTED[tier];
  return {
    ai_enabled: e.flags[0],
    billing_enabled: e.flags[1],
    custom_domain: e.flags[2],
    white_label: e.flags[3],
    mcp_enabled: e.flags[4],
    ai_monthly_limit: e.ai,
    api_rate_limit: e.rate,
    support_level: e.support,
  };
}

const INVALID_CREDENTIALS = { error: 'unauthorized', code: 'INVALID_DEPLOYMENT_CREDENTIALS', message: expect.any(String) };

describe('POST /api/v1/entitlements/check', () => {
  for (const tier of Object.keys(EXPECTED) as Tier[]) {
    it(`answers the exact snapshot of a ${tier} deployment`, async () => {
      const anchor = h.clock.now();
      const t = await createTenant(h, { tier });
      const res = await check(t.deploymentId, t.deploymentSecret);
      expect(res.statusCode, res.body).toBe(200);
      const limit = EXPECTED[tier].ai;
      expect(json(res)).toEqual({
        status: 'active',
        tier,
        features: expectedFeatures(tier),
        quotas: { ai_tokens: { used: 0, limit, remaining: limit, resets_at: addMonths(anchor, 1).toISOString() } },
        budgets: [],
        message: null,
        next_check_seconds: 300,
      });
    });
  }

  it('counts the period usage in quotas.ai_tokens, remaining never below zero', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    // Stands in for AI usage until the AI proxy exists.
    const setUsed = (n: number) => h.deps.db.query('UPDATE credit_balances SET ai_tokens_used = $2 WHERE deployment_id = $1', [t.deploymentId, n]);
    await setUsed(250);
    expect(json<Snapshot>(await check(t.deploymentId, t.deploymentSecret)).quotas.ai_tokens).toMatchObject({ used: 250, limit: 1000, remaining: 750 });
    await setUsed(1500);
    expect(json<Snapshot>(await check(t.deploymentId, t.deploymentSecret)).quotas.ai_tokens).toMatchObject({ used: 1500, limit: 1000, remaining: 0 });
  });

  it('refuses a wrong secret, an unknown id and a non-UUID id with one and the same 401', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'launch' });
    const wrongLastChar = mistyped(t.deploymentSecret);
    const cases: Array<[unknown, unknown, string]> = [
      [t.deploymentId, other.deploymentSecret, "another deployment's secret"],
      [t.deploymentId, wrongLastChar, 'a mistyped secret'],
      [t.deploymentId, 'cgds_not-a-secret', 'a malformed secret'],
      [t.deploymentId, t.apiKey, 'an API key'],
      [randomUUID(), t.deploymentSecret, 'an unknown id'],
      ['not-a-uuid', t.deploymentSecret, 'a non-UUID id'],
      [t.deploymentId.toUpperCase().replace(/-/g, ''), 'x', 'a mangled id'],
    ];
    const bodies = new Set<string>();
    for (const [id, secret, label] of cases) {
      const res = await check(id, secret);
      expect(res.statusCode, label).toBe(401);
      expect(json(res), label).toEqual(INVALID_CREDENTIALS);
      bodies.add(res.body);
    }
    // One answer for all, so ids cannot be probed.
    expect(bodies.size).toBe(1);
  });

  it('rejects a body without the credentials or with unknown fields as 400 INVALID_REQUEST', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const payload of [
      { deployment_id: t.deploymentId },
      { deployment_secret: t.deploymentSecret },
      { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret, tier: 'enterprise' },
      { deployment_id: 5, deployment_secret: t.deploymentSecret },
    ]) {
      const res = await h.request({ method: 'POST', url: '/api/v1/entitlements/check', payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(json(res)).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
    }
  });

  it('accepts ?force=true and Cache-Control: no-cache, answering with cache-control no-store', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const plain = await check(t.deploymentId, t.deploymentSecret);
    expect(plain.statusCode).toBe(200);
    expect(plain.headers['cache-control']).toBe('private, max-age=300');

    const forced = await check(t.deploymentId, t.deploymentSecret, { query: '?force=true' });
    expect(forced.statusCode, forced.body).toBe(200);
    expect(forced.headers['cache-control']).toBe('no-store');
    expect(json(forced)).toEqual(json(plain));

    const noCache = await check(t.deploymentId, t.deploymentSecret, { headers: { 'cache-control': 'no-cache' } });
    expect(noCache.statusCode).toBe(200);
    expect(noCache.headers['cache-control']).toBe('no-store');
    expect(json<Snapshot>(noCache).tier).toBe('growth');

    const forcedWrong = await check(t.deploymentId, 'cgds_wrong', { query: '?force=true' });
    expect(forcedWrong.statusCode).toBe(401);
    expect(json(forcedWrong)).toEqual(INVALID_CREDENTIALS);
  });

  it('shows a tier change on the server at once, without waiting for next_check_seconds', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'launch' });
    expect(json<Snapshot>(await check(t.deploymentId, t.deploymentSecret)).tier).toBe('launch');
    const res = await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}`, { tier: 'growth' });
    expect(res.statusCode).toBe(200);
    const after = json<Snapshot>(await check(t.deploymentId, t.deploymentSecret));
    expect(after).toEqual({
      status: 'active',
      tier: 'growth',
      features: expectedFeatures('growth'),
      quotas: { ai_tokens: { used: 0, limit: 50_000, remaining: 50_000, resets_at: addMonths(anchor, 1).toISOString() } },
      budgets: [],
      message: null,
      next_check_seconds: 300,
    });
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}`, { tier: 'sandbox' });
    expect(json<Snapshot>(await check(t.deploymentId, t.deploymentSecret)).features).toEqual(expectedFeatures('sandbox'));
  });

  it('shows per-flag overrides and limit overrides; the tier stays', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { white_label: true, ai_enabled: false });
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/overrides`, { ai_tokens_limit: 1234, api_rate_limit: 77 });
    const s = json<Snapshot>(await check(t.deploymentId, t.deploymentSecret));
    expect(s.tier).toBe('trial');
    expect(s.features).toEqual({ ...expectedFeatures('trial'), white_label: true, ai_enabled: false, ai_monthly_limit: 1234, api_rate_limit: 77 });
    expect(s.quotas.ai_tokens).toMatchObject({ used: 0, limit: 1234, remaining: 1234 });

    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { white_label: null, ai_enabled: null });
    await admin('DELETE', `/api/v1/admin/deployments/${t.deploymentId}/overrides`);
    expect(json<Snapshot>(await check(t.deploymentId, t.deploymentSecret)).features).toEqual(expectedFeatures('trial'));
  });

  it('an enterprise deployment can have a finite override, and an unlimited tier reports null limit and remaining', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    await h.deps.db.query('UPDATE credit_balances SET ai_tokens_used = 123456 WHERE deployment_id = $1', [t.deploymentId]);
    expect(json<Snapshot>(await check(t.deploymentId, t.deploymentSecret)).quotas.ai_tokens).toMatchObject({
      used: 123456,
      limit: null,
      remaining: null,
    });
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/overrides`, { ai_tokens_limit: 200_000 });
    const s = json<Snapshot>(await check(t.deploymentId, t.deploymentSecret));
    expect(s.quotas.ai_tokens).toMatchObject({ used: 123456, limit: 200_000, remaining: 76_544 });
    expect(s.features.ai_monthly_limit).toBe(200_000);
  });

  it('a suspended deployment does not report active and has every feature off', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}`, { status: 'suspended' });
    const res = await check(t.deploymentId, t.deploymentSecret);
    const s = json<Snapshot>(res);
    expect(s.status).not.toBe('active');
    expect(s.features).toMatchObject({ ai_enabled: false, billing_enabled: false, custom_domain: false, white_label: false, mcp_enabled: false });
  });

  it('a rotated secret stops working at once; the new one works', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect((await check(t.deploymentId, t.deploymentSecret)).statusCode).toBe(200);
    const { secret } = await rotateDeploymentSecret(h.ctx, t.deploymentId);
    expect(secret).not.toBe(t.deploymentSecret);

    const old = await check(t.deploymentId, t.deploymentSecret);
    expect(old.statusCode).toBe(401);
    expect(json(old)).toEqual(INVALID_CREDENTIALS);
    const oldQuota = await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret));
    expect(oldQuota.statusCode).toBe(401);

    expect(json<Snapshot>(await check(t.deploymentId, secret)).tier).toBe('launch');
    expect((await quota(deploymentHeaders(t.deploymentId, secret))).statusCode).toBe(200);
  });

  it("an organization's deletion stops its deployment secret at once", async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect((await check(t.deploymentId, t.deploymentSecret)).statusCode).toBe(200);
    // Through the owner's deletion, which also drops every instance's cached credentials.
    await deleteOrganization({ ...h.ctx, actor: { type: 'user', userId: t.userId } }, t.organizationId);
    const res = await check(t.deploymentId, t.deploymentSecret);
    expect(res.statusCode).toBe(401);
    expect(json(res)).toEqual(INVALID_CREDENTIALS);
    const q = await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret));
    expect(q.statusCode).toBe(401);
    expect(json(q)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  });
});

describe('GET /api/v1/ai/quota', () => {
  it('answers the documented fields for a launch deployment, credits_available being monthly plus purchased', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'launch', purchased: 25 });
    const res = await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret));
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toEqual({
      used: 0,
      limit: 10_000,
      remaining: 10_000,
      resets_at: addMonths(anchor, 1).toISOString(),
      tier: 'launch',
      credits_available: 2025,
      credits_owed: 0,
      credits_per_standard: 1,
      credits_per_advanced: 3,
      credits_per_premium: 10,
      budgets: [],
    });

    const used = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: 'quota-tool' },
    });
    expect(json(used)).toMatchObject({ success: true });
    await h.deps.db.query('UPDATE credit_balances SET ai_tokens_used = 2500 WHERE deployment_id = $1', [t.deploymentId]);
    expect(json(await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret)))).toMatchObject({
      used: 2500,
      remaining: 7500,
      credits_available: 2024,
    });
  });

  it('answers for sandbox too (information, not gated by ai_enabled)', async () => {
    const t = await createTenant(h, { tier: 'sandbox', purchased: 5 });
    const res = await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret));
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res)).toMatchObject({
      used: 0,
      limit: 0,
      remaining: 0,
      tier: 'sandbox',
      credits_available: 5,
      credits_per_standard: 1,
      credits_per_advanced: 3,
      credits_per_premium: 10,
    });
  });

  it('answers with ai_enabled switched off by an operator', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { ai_enabled: false });
    const res = await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret));
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ limit: 1000, tier: 'trial', credits_available: 100 });
  });

  it('reports null limit, remaining and credits_available for enterprise', async () => {
    const t = await createTenant(h, { tier: 'enterprise', purchased: 10 });
    expect(json(await quota(deploymentHeaders(t.deploymentId, t.deploymentSecret)))).toMatchObject({
      limit: null,
      remaining: null,
      credits_available: null,
      tier: 'enterprise',
    });
  });

  it('refuses missing or bad deployment credentials with 401 UNAUTHORIZED', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const other = await createTenant(h, { tier: 'launch' });
    const cases: Array<Record<string, string>> = [
      {},
      { 'x-deployment-id': t.deploymentId },
      { 'x-deployment-secret': t.deploymentSecret },
      deploymentHeaders(t.deploymentId, other.deploymentSecret),
      deploymentHeaders(randomUUID(), t.deploymentSecret),
      deploymentHeaders('not-a-uuid', t.deploymentSecret),
      deploymentHeaders(t.deploymentId, 'cgds_short'),
      { authorization: `Bearer ${t.deploymentSecret}` },
    ];
    for (const headers of cases) {
      const res = await quota(headers);
      expect(res.statusCode, JSON.stringify(headers)).toBe(401);
      expect(json(res)).toEqual({ error: 'unauthorized', code: 'UNAUTHORIZED', message: expect.any(String) });
    }
  });
});
