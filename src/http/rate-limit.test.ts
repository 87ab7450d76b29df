import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MINUTE, SECOND } from '../clock.js';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  serviceHeaders,
  signUpWithOrganization,
  type Tenant,
} from '../../test/harness.js';

/**
 * Rate limits (docs/limits.md) at the HTTP edge, with a moved clock: the per-minute tier limit on /api/v1/* keyed by the
 * deployment a call acts for, the hourly plan limit on the application API, the headers on every
 * limited response, the two 429 bodies, and what is never limited. (The limiter's own arithmetic,
 * on both backends, is src/lib/rate-limiter.unit.test.ts.)
 */
let h: Harness;

beforeAll(async () => {
  // 12:00:00 sharp: a minute bucket starts with the test, so "61 s later" is in the next bucket.
  h = await createHarness({}, '2026-01-15T12:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

const quota = (t: Tenant, remoteAddress?: string) =>
  h.request({
    method: 'GET',
    url: '/api/v1/ai/quota',
    headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    ...(remoteAddress ? { remoteAddress } : {}),
  });

async function burst(n: number, send: () => Promise<LightMyRequestResponse>): Promise<LightMyRequestResponse[]> {
  const out: LightMyRequestResponse[] = [];
  for (let i = 0; i < n; i++) out.push(await send());
  return out;
}

/** Start each test at the beginning of a fresh minute, so bucket arithmetic is the same in every test. */
function nextMinute(): void {
  const now = h.clock.now().getTime();
  h.clock.set(Math.ceil((now + 1) / MINUTE) * MINUTE);
}

describe('per-minute tier limit on /api/v1 (docs/limits.md, Rate limits)', () => {
  it('admits 100 sandbox requests with counting headers; the 101st is 429 with Retry-After and the rate_limit_exceeded body', async () => {
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    const answers = await burst(100, () => quota(t));
    expect(answers.every((r) => r.statusCode === 200)).toBe(true);
    expect(answers[0]!.headers['x-ratelimit-limit']).toBe('100');
    expect(answers.map((r) => Number(r.headers['x-ratelimit-remaining']))).toEqual(Array.from({ length: 100 }, (_, i) => 99 - i));
    const epoch = Math.floor(h.clock.now().getTime() / 1000);
    expect(Number(answers[0]!.headers['x-ratelimit-reset'])).toBe(epoch + 60);
    expect(answers[0]!.headers['ratelimit-policy']).toBe('"minute";q=100;w=60');
    expect(answers[0]!.headers.ratelimit).toBe('"minute";r=99;t=60');

    const refused = await quota(t);
    expect(refused.statusCode).toBe(429);
    const retry = Number(refused.headers['retry-after']);
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(120);
    expect(refused.headers['x-ratelimit-remaining']).toBe('0');
    expect(refused.headers['x-ratelimit-limit']).toBe('100');
    expect(Number(refused.headers['x-ratelimit-reset'])).toBe(epoch + retry);
    expect(json(refused)).toEqual({
      error: 'rate_limit_exceeded',
      code: 'RATE_LIMITED',
      message: `Rate limit exceeded. Retry in ${retry} seconds.`,
    });
  });

  it('slides: a request 61 s after the first burst passes', async () => {
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    await burst(100, () => quota(t));
    expect((await quota(t)).statusCode).toBe(429);
    h.clock.advance(61 * SECOND);
    const later = await quota(t);
    expect(later.statusCode).toBe(200);
  });

  it('refused requests do not extend the lock-out: who waits Retry-After gets in, however often it knocked', async () => {
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    await burst(100, () => quota(t));
    h.clock.advance(20 * SECOND);
    const first = await quota(t);
    expect(first.statusCode).toBe(429);
    const wait = Number(first.headers['retry-after']);
    // Knocking every second while refused: each answer promises the same moment, never a later one.
    for (let s = 1; s < wait; s++) {
      h.clock.advance(SECOND);
      const again = await quota(t);
      expect(again.statusCode).toBe(429);
      expect(Number(again.headers['retry-after'])).toBe(wait - s);
    }
    h.clock.advance(SECOND);
    expect((await quota(t)).statusCode).toBe(200);
  });

  it('counts every /api/v1 call of a deployment in one window: API key, deployment headers, service calls naming it', async () => {
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    await burst(40, () => quota(t));
    await burst(30, () =>
      h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x' } }),
    );
    const service = await burst(30, () =>
      h.request({
        method: 'POST',
        url: '/api/v1/mcp/check-entitlement',
        headers: serviceHeaders(h),
        payload: { deployment_id: t.deploymentId, tool_name: 'x' },
      }),
    );
    expect(service.at(-1)!.headers['x-ratelimit-remaining']).toBe('0');
    const refused = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { tool_name: 'x' },
    });
    expect(refused.statusCode).toBe(429);
    // Another deployment is untouched.
    const other = await createTenant(h, { tier: 'sandbox' });
    expect((await quota(other)).headers['x-ratelimit-remaining']).toBe('99');
  });

  it('an override takes effect at once and the tier limit returns when it expires', async () => {
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    const expiresAt = new Date(h.clock.now().getTime() + 2 * MINUTE).toISOString();
    const set = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { api_rate_limit: 3, expires_at: expiresAt },
    });
    expect(set.statusCode).toBe(200);
    const answers = await burst(4, () => quota(t));
    expect(answers.map((r) => r.statusCode)).toEqual([200, 200, 200, 429]);
    expect(answers[0]!.headers['x-ratelimit-limit']).toBe('3');
    h.clock.set(new Date(expiresAt).getTime() + SECOND);
    const after = await quota(t);
    expect(after.statusCode).toBe(200);
    expect(after.headers['x-ratelimit-limit']).toBe('100');
    // Service calls read cached terms: the override reaches them at once too (the cache is dropped on change).
    await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { api_rate_limit: 7, expires_at: null },
    });
    const service = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: 'x' },
    });
    expect(service.headers['x-ratelimit-limit']).toBe('7');
  });

  it('the entitlement check counts only once its body credentials are proven', async () => {
    let wrongFrom = 0;
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    // From two addresses: one IP past 100 failed authentications a minute is throttled (http/auth-throttle.ts).
    const wrong = await burst(120, () =>
      h.request({
        method: 'POST',
        url: '/api/v1/entitlements/check',
        payload: { deployment_id: t.deploymentId, deployment_secret: 'nope' },
        remoteAddress: `198.51.100.${wrongFrom++ % 2}`,
      }),
    );
    expect(wrong.every((r) => r.statusCode === 401 && r.headers['x-ratelimit-limit'] === undefined)).toBe(true);
    const right = await h.request({
      method: 'POST',
      url: '/api/v1/entitlements/check',
      payload: { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret },
    });
    expect(right.statusCode).toBe(200);
    expect(right.headers['x-ratelimit-remaining']).toBe('99');
  });

  it('sends no rate-limit headers for an unlimited tier, the operator API, the service key alone, or health and docs', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    const responses = [
      await quota(t),
      await h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h) }),
      await h.request({ method: 'GET', url: `/api/v1/mcp/resolve-deployment?user_id=${t.userId}`, headers: serviceHeaders(h) }),
      await h.request({ method: 'GET', url: '/healthz' }),
      await h.request({ method: 'GET', url: '/readyz' }),
      await h.request({ method: 'GET', url: '/openapi.json' }),
    ];
    for (const r of responses) {
      expect(r.statusCode).toBe(200);
      for (const name of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'ratelimit', 'ratelimit-policy']) {
        expect(r.headers[name]).toBeUndefined();
      }
    }
  });

  it('headers stay on error answers after the limiter, and invalid requests count', async () => {
    nextMinute();
    const t = await createTenant(h, { tier: 'sandbox' });
    const bad = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { unknown: true },
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.headers['x-ratelimit-remaining']).toBe('99');
  });
});

describe('hourly plan limit on the application API (docs/limits.md, Rate limits)', () => {
  it('per IP when unauthenticated: 1,000 an hour on the free plan, then the envelope with RATE_LIMITED', async () => {
    nextMinute();
    const ip = '203.0.113.77';
    const refresh = () =>
      h.request({ method: 'POST', url: '/auth/refresh', payload: { refresh_token: 'not-a-token' }, remoteAddress: ip });
    const answers = await burst(1000, refresh);
    expect(answers.every((r) => r.statusCode === 401)).toBe(true);
    expect(answers[0]!.headers['x-ratelimit-limit']).toBe('1000');
    expect(answers[0]!.headers['ratelimit-policy']).toBe('"hour";q=1000;w=3600');
    const refused = await refresh();
    expect(refused.statusCode).toBe(429);
    const retry = Number(refused.headers['retry-after']);
    expect(retry).toBeGreaterThanOrEqual(1);
    const body = json<{ success: boolean; error: { code: string; message: string }; details: { timestamp: string } }>(refused);
    expect(body.success).toBe(false);
    expect(body.error).toEqual({ code: 'RATE_LIMITED', message: `Rate limit exceeded. Retry in ${retry} seconds.` });
    expect(body.details.timestamp).toBe(h.clock.now().toISOString());
    // Another address is not affected.
    const elsewhere = await h.request({ method: 'POST', url: '/auth/refresh', payload: { refresh_token: 'x' }, remoteAddress: '203.0.113.78' });
    expect(elsewhere.statusCode).toBe(401);
  });

  it('per organization for API keys and per user for access tokens, at the highest plan among the user’s organizations', async () => {
    const owner = await signUpWithOrganization(h);
    const t = await createTenant(h);
    await h.deps.db.query(`UPDATE organizations SET plan = 'enterprise' WHERE id = $1`, [t.organizationId]);
    const byKey = await h.request({ method: 'GET', url: `/organizations/${t.organizationId}`, headers: { 'x-api-key': t.apiKey } });
    expect(byKey.statusCode).toBe(200);
    expect(byKey.headers['x-ratelimit-limit']).toBe('100000');

    const me = () => h.request({ method: 'GET', url: '/auth/me', headers: bearer(owner.accessToken) });
    const before = await me();
    expect(before.headers['x-ratelimit-limit']).toBe('1000');
    const used = 1000 - Number(before.headers['x-ratelimit-remaining']);
    await h.deps.db.query(`UPDATE organizations SET plan = 'pro' WHERE id = $1`, [owner.organizationId]);
    h.deps.bus.publish('plan-cache');
    const after = await me();
    expect(after.headers['x-ratelimit-limit']).toBe('10000');
    // Same user, same window: the count went on.
    expect(Number(after.headers['x-ratelimit-remaining'])).toBe(10000 - used - 1);
  });
});

describe('client IP behind a proxy (TRUST_PROXY)', () => {
  it('keys by X-Forwarded-For only from trusted proxies', async () => {
    const behind = await createHarness({ trustProxy: ['127.0.0.1'] });
    try {
      const refresh = (app: Harness, forwardedFor: string) =>
        app.request({ method: 'POST', url: '/auth/refresh', payload: { refresh_token: 'x' }, headers: { 'x-forwarded-for': forwardedFor } });
      expect((await refresh(behind, '198.51.100.1')).headers['x-ratelimit-remaining']).toBe('999');
      expect((await refresh(behind, '198.51.100.2')).headers['x-ratelimit-remaining']).toBe('999');
      expect((await refresh(behind, '198.51.100.1')).headers['x-ratelimit-remaining']).toBe('998');
      // Not trusted: the header is ignored and every caller shares the socket's address.
      const first = Number((await refresh(h, '198.51.100.3')).headers['x-ratelimit-remaining']);
      expect(Number((await refresh(h, '198.51.100.4')).headers['x-ratelimit-remaining'])).toBe(first - 1);
    } finally {
      await behind.close();
    }
  });
});

describe('OpenAPI', () => {
  it('documents 429 on every limited route and not on health; the operator API only for the failed-authentication throttle', async () => {
    const doc = (await h.request({ method: 'GET', url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    expect(doc.paths['/api/v1/ai/quota']!.get!.responses['429']).toBeDefined();
    expect(doc.paths['/auth/login']!.post!.responses['429']).toBeDefined();
    // Not rate limited, but an IP throttled for failed authentication gets 429 there too (http/auth-throttle.ts).
    expect(doc.paths['/api/v1/admin/deployments/{id}']!.get!.responses['429']).toBeDefined();
    expect(doc.paths['/healthz']!.get!.responses['429']).toBeUndefined();
  });
});
