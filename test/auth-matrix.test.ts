import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FAILED_AUTH_WINDOW_MS } from '../src/http/auth-throttle.js';
import { bearer, createHarness, createTenant, type Harness, json } from './harness.js';

/**
 * One table of authorization cases run against every authenticated route (STYLE rule 9): whatever
 * the body, a caller without valid credentials gets 401 with the flat body, before any validation.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
// Each case sends a 401 per /api/v1 route from one address: a fresh failed-authentication window per case keeps them under its limit.
// Two windows on: the sliding-window counter still weighs the window just past (src/lib/rate-windows.ts).
beforeEach(() => {
  h.clock.advance(2 * FAILED_AUTH_WINDOW_MS + 1);
});

const fill = (url: string) =>
  url.replace(/:id\b/g, '6f1c3d2e-0000-4000-8000-000000000000').replace(/:[a-z_]+/g, 'x');

function routes(auth?: string) {
  return h.app.routeList.filter((r) => !r.hidden && r.auth !== 'public' && (!auth || r.auth === auth));
}

/** The 401 body: flat on /api/v1, the envelope elsewhere (docs/openapi.md, Shapes). */
function expectUnauthorized(res: { statusCode: number; json(): unknown }, url: string) {
  expect(res.statusCode, url).toBe(401);
  if (url.startsWith('/api/v1/')) expect(res.json(), url).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
  else expect(res.json(), url).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
}

const WRONG: Record<string, Record<string, string>> = {
  apiKey: bearer('cg_000000000000000000000000000000000000'),
  service: { 'x-mcp-service-key': 'wrong-service-key-0123456789' },
  apiKeyOrService: { 'x-mcp-service-key': 'wrong-service-key-0123456789' },
  admin: { 'x-admin-key': 'wrong-admin-key-0123456789' },
  metrics: bearer('wrong-metrics-token-0123456789'),
  deployment: { 'x-deployment-id': '6f1c3d2e-0000-4000-8000-000000000000', 'x-deployment-secret': 'cgds_nope' },
  deploymentOrApiKey: bearer('cg_000000000000000000000000000000000000'),
  user: bearer('eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl'),
  account: { 'x-api-key': 'cg_000000000000000000000000000000000000' },
};

describe('authorization table', () => {
  it('every authenticated route declares a known mode', () => {
    expect(routes().length).toBeGreaterThan(20);
    for (const r of routes()) expect(Object.keys(WRONG)).toContain(r.auth);
  });

  it('no credentials → 401 UNAUTHORIZED, flat body, even with an invalid body', async () => {
    for (const r of routes()) {
      const res = await h.request({ method: r.method as 'GET', url: fill(r.url), payload: r.method === 'GET' || r.method === 'DELETE' ? undefined : { nonsense: true } });
      expectUnauthorized(res, r.url);
    }
  });

  it('wrong or malformed credentials → 401', async () => {
    for (const r of routes()) {
      const res = await h.request({ method: r.method as 'GET', url: fill(r.url), headers: WRONG[r.auth], payload: r.method === 'GET' || r.method === 'DELETE' ? undefined : {} });
      expectUnauthorized(res, r.url);
    }
  });

  it('a read-only key is refused on every route that changes state (403 INSUFFICIENT_SCOPE)', async () => {
    const t = await createTenant(h, { scopes: ['read'] });
    const writes = h.app.routeList.filter(
      (r) =>
        (r.auth === 'apiKey' || r.auth === 'apiKeyOrService' || r.auth === 'deploymentOrApiKey') &&
        r.method !== 'GET' &&
        !r.url.includes('check-entitlement'),
    );
    expect(writes.length).toBeGreaterThanOrEqual(3);
    for (const r of writes) {
      const res = await h.request({ method: r.method as 'POST', url: fill(r.url), headers: bearer(t.apiKey), payload: {} });
      expect(res.statusCode, `${r.method} ${r.url}`).toBe(403);
      if (r.url.startsWith('/api/v1/')) expect(json(res)).toMatchObject({ error: 'forbidden', code: 'INSUFFICIENT_SCOPE' });
      else expect(json(res)).toMatchObject({ success: false, error: { code: 'INSUFFICIENT_SCOPE' } });
    }
  });

  it('an API key is not an admin, metrics or service credential', async () => {
    const t = await createTenant(h);
    for (const r of [...routes('admin'), ...routes('metrics'), ...routes('service')]) {
      const res = await h.request({ method: r.method as 'GET', url: fill(r.url), headers: bearer(t.apiKey), payload: r.method === 'GET' || r.method === 'DELETE' ? undefined : {} });
      expect(res.statusCode, `${r.method} ${r.url}`).toBe(401);
    }
  });
});
