import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  mistyped,
  serviceHeaders,
  watchStatements,
} from '../../test/harness.js';
import { MINUTE, SECOND } from '../clock.js';
import { FAILED_AUTH_LIMIT } from './auth-throttle.js';

/**
 * docs/limits.md, "Failed authentication": every 401 on /api/v1 counts for the client IP; past
 * FAILED_AUTH_LIMIT in a sliding minute a request from that IP whose credentials fail gets 429 instead
 * of 401, while valid credentials from the same (shared) address are answered normally.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

/** Start at the beginning of a fresh minute, so the counter's estimate is the plain count. */
function nextMinute(): void {
  h.clock.set(Math.ceil((h.clock.now().getTime() + 1) / MINUTE) * MINUTE);
}

const UNKNOWN_DEPLOYMENT = '6f1c3d2e-0000-4000-8000-000000000000';
const credits = (headers: Record<string, string>, remoteAddress: string) =>
  h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers, remoteAddress });
const quota = (headers: Record<string, string>, remoteAddress: string) => h.request({ method: 'GET', url: '/api/v1/ai/quota', headers, remoteAddress });
const stdioCheck = (key: string, remoteAddress: string) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(key), payload: { tool_name: 'search' }, remoteAddress });

function expectThrottled(res: { statusCode: number; headers: Record<string, unknown>; json(): unknown }): number {
  expect(res.statusCode).toBe(429);
  expect(res.json()).toMatchObject({ error: 'rate_limit_exceeded', code: 'RATE_LIMITED', message: expect.stringMatching(/Retry in \d+ seconds/) });
  const seconds = Number(res.headers['retry-after']);
  expect(seconds).toBeGreaterThanOrEqual(1);
  expect(seconds).toBeLessThanOrEqual(2 * 60);
  return seconds;
}

describe('failed authentication on /api/v1 is throttled per client IP', () => {
  it(`${FAILED_AUTH_LIMIT} failures of any kind are 401; then failing credentials from the IP get 429 everywhere under /api/v1 until the window slides`, async () => {
    nextMinute();
    const t = await createTenant(h);
    const ip = '203.0.113.10';
    const wrong: Array<() => ReturnType<typeof credits>> = [
      () => stdioCheck(mistyped(t.apiKey), ip),
      () => credits({ 'x-mcp-service-key': 'wrong-service-key-0123456789' }, ip),
      () => quota({ 'x-deployment-id': UNKNOWN_DEPLOYMENT, 'x-deployment-secret': 'cgds_nope' }, ip),
      () => h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: { 'x-admin-key': 'guess' }, remoteAddress: ip }),
      () => credits({}, ip),
    ];
    for (let i = 0; i < FAILED_AUTH_LIMIT; i++) {
      expect((await wrong[i % wrong.length]!()).statusCode, `failure ${i + 1}`).toBe(401);
    }
    const guess = await stdioCheck(mistyped(t.apiKey), ip);
    const seconds = expectThrottled(guess);
    expect(guess.headers['x-ratelimit-remaining']).toBe('0');
    // Every kind of failing credential is refused alike.
    for (const attempt of wrong) expectThrottled(await attempt());

    // Refusals did not count: waiting as told is enough.
    h.clock.advance(seconds * SECOND);
    expect((await stdioCheck(mistyped(t.apiKey), ip)).statusCode).toBe(401);
  });

  it('while an IP is throttled, its valid API key, deployment secret, service key and operator key are answered normally', async () => {
    // The attack the review replayed: one guesser behind a shared egress address locked every honest
    // client of that address out for the rest of the minute.
    nextMinute();
    const t = await createTenant(h);
    const ip = '203.0.113.15';
    for (let i = 0; i < FAILED_AUTH_LIMIT; i++) expect((await stdioCheck(mistyped(t.apiKey), ip)).statusCode, `failure ${i + 1}`).toBe(401);
    expectThrottled(await stdioCheck(mistyped(t.apiKey), ip));

    expect(json<{ allowed: boolean }>(await stdioCheck(t.apiKey, ip)).allowed).toBe(true);
    const deploymentQuota = await quota({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret }, ip);
    expect(deploymentQuota.statusCode, deploymentQuota.body).toBe(200);
    const service = await credits(serviceHeaders(h), ip);
    expect(service.statusCode, service.body).toBe(200);
    const operator = await h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h), remoteAddress: ip });
    expect(operator.statusCode, operator.body).toBe(200);
    const entitlement = await h.request({
      method: 'POST',
      url: '/api/v1/entitlements/check',
      payload: { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret },
      remoteAddress: ip,
    });
    expect(entitlement.statusCode, entitlement.body).toBe(200);

    // …and a bad key from the same address is still refused, and the valid ones did not lift the throttle.
    expectThrottled(await stdioCheck(mistyped(t.apiKey), ip));
    expectThrottled(await quota({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': mistyped(t.deploymentSecret) }, ip));
    // Another IP is unaffected, and the application API is not /api/v1.
    expect((await stdioCheck(mistyped(t.apiKey), '203.0.113.16')).statusCode).toBe(401);
    expect((await h.request({ method: 'GET', url: '/organizations', headers: { 'x-api-key': t.apiKey }, remoteAddress: ip })).statusCode).toBe(200);
  });

  it('a throttled guess costs no database read a 401 would not: a mistyped key none, an unknown well-formed key its one lookup', async () => {
    nextMinute();
    const t = await createTenant(h);
    const ip = '203.0.113.17';
    for (let i = 0; i < FAILED_AUTH_LIMIT; i++) expect((await stdioCheck(mistyped(t.apiKey), ip)).statusCode).toBe(401);
    const reads = watchStatements(h.deps.db, /\bFROM\s+(api_keys|deployments|organizations)\b/i);
    expectThrottled(await stdioCheck(mistyped(t.apiKey), ip));
    expectThrottled(await quota({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': mistyped(t.deploymentSecret) }, ip));
    expect(reads.stop()).toEqual([]);
  });

  it('successful requests never count: an IP that mostly succeeds reaches the limit on its failures only', async () => {
    nextMinute();
    const t = await createTenant(h);
    const ip = '203.0.113.20';
    for (let i = 0; i < FAILED_AUTH_LIMIT - 1; i++) {
      expect((await stdioCheck(t.apiKey, ip)).statusCode).toBe(200);
      expect((await stdioCheck(mistyped(t.apiKey), ip)).statusCode).toBe(401);
    }
    expect((await stdioCheck(t.apiKey, ip)).statusCode).toBe(200);
    expect((await stdioCheck(mistyped(t.apiKey), ip)).statusCode).toBe(401);
    expectThrottled(await stdioCheck(mistyped(t.apiKey), ip));
  });

  it('failed admin-key guesses throttle further guesses on the operator API; the operator key still works', async () => {
    nextMinute();
    const ip = '203.0.113.30';
    const admin = (key: string) =>
      h.request({ method: 'GET', url: `/api/v1/admin/deployments/${UNKNOWN_DEPLOYMENT}`, headers: { 'x-admin-key': key }, remoteAddress: ip });
    for (let i = 0; i < FAILED_AUTH_LIMIT; i++) expect((await admin(`guess-${i}`)).statusCode).toBe(401);
    expectThrottled(await admin('guess-again'));
    expect((await admin(h.config.adminApiKey)).statusCode).toBe(404);
  });

  it('the entitlement check counts its wrong body credentials', async () => {
    nextMinute();
    const ip = '203.0.113.40';
    const check = () =>
      h.request({
        method: 'POST',
        url: '/api/v1/entitlements/check',
        payload: { deployment_id: UNKNOWN_DEPLOYMENT, deployment_secret: 'cgds_nope' },
        remoteAddress: ip,
      });
    for (let i = 0; i < FAILED_AUTH_LIMIT; i++) expect((await check()).statusCode, `failure ${i + 1}`).toBe(401);
    expectThrottled(await check());
  });
});

describe('a percent-encoded path is the path the router takes', () => {
  it('failures under /%61pi/v1 count and are throttled like those under /api/v1, in the flat shape', async () => {
    nextMinute();
    const ip = '203.0.113.50';
    const guess = (path: string) => h.request({ method: 'GET', url: path, headers: { 'x-admin-key': 'guess-guess-guess-guess-guess' }, remoteAddress: ip });
    const first = await guess('/%61pi/v1/admin/deployments');
    expect(first.statusCode).toBe(401);
    expect(first.json()).toMatchObject({ code: 'UNAUTHORIZED' });
    for (let i = 1; i < FAILED_AUTH_LIMIT; i++) expect((await guess(i % 2 ? '/%61pi/v1/admin/deployments' : '/api/%76%31/admin/deployments')).statusCode).toBe(401);
    expectThrottled(await guess('/%61pi/v1/admin/deployments'));
    expectThrottled(await guess('/api/v1/admin/deployments'));
  });
});

describe('the OpenAPI document', () => {
  it('lists 429 on every /api/v1 route, the operator API included', async () => {
    const doc = json<{ paths: Record<string, Record<string, { responses: Record<string, unknown> }>> }>(
      await h.request({ method: 'GET', url: '/openapi.json' }),
    );
    const v1 = Object.entries(doc.paths).filter(([path]) => path.startsWith('/api/v1/'));
    expect(v1.some(([path]) => path.startsWith('/api/v1/admin/'))).toBe(true);
    for (const [path, ops] of v1) {
      for (const [method, op] of Object.entries(ops)) expect(Object.keys(op.responses), `${method} ${path}`).toContain('429');
    }
  });
});
