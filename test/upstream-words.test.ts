import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { testConfig } from '../src/config.js';
import { signTopUpToken } from '../src/modules/billing/top-up-link.js';
import { defaultAiConfig } from './ai-stand-in/proxy-app.js';
import { startPackStandIn } from './billing-fixtures.js';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, signUpWithOrganization } from './harness.js';
import type { StripeStandIn } from './stripe-stand-in/server.js';

/**
 * An upstream's own words about a refusal are the operator's (docs/billing.md, Selling): Stripe's
 * answer to a stale key names its mode and last characters, a provider's 401 names part of the
 * installation's AI key. Callers, anonymous holders of a top-up link included, get a fixed sentence;
 * the log keeps the words.
 */
let h: Harness;
let standIn: StripeStandIn;
let app: Awaited<ReturnType<typeof buildApp>>;
let upstream: Server;
let logs = '';
const STALE_STRIPE_KEY = 'sk_test_OPERATORsecretKEY0123456789abcdWXYZ';
const AI_KEY = 'sk-proj-OperatorAiKey0123456789ABCDEFghij';

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  const kit = await startPackStandIn(() => h, start);
  standIn = kit.standIn;
  // An OpenAI-like provider that refuses the installation's key with OpenAI's own wording.
  upstream = createServer((req, res) => {
    const key = String(req.headers.authorization ?? '').replace(/^Bearer /, '');
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: `Incorrect API key provided: ${key.slice(0, 8)}****${key.slice(-4)}.`, type: 'invalid_request_error', code: 'invalid_api_key' } }));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', () => resolve()));
  h = await createHarness({ ...kit.config, stripeSecretKey: STALE_STRIPE_KEY }, start.toISOString());
  const port = (upstream.address() as AddressInfo).port;
  app = await buildApp({
    // The same installation (database, clock, stale Stripe key), with its log captured.
    config: testConfig({ ...kit.config, stripeSecretKey: STALE_STRIPE_KEY, ...defaultAiConfig(), aiBaseUrl: `http://127.0.0.1:${port}/v1`, aiApiKey: AI_KEY, logLevel: 'info' }),
    db: h.deps.db,
    clock: h.clock,
    logStream: new Writable({
      write(chunk, _encoding, done) {
        logs += chunk.toString();
        done();
      },
    }),
  });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await h?.close();
  await standIn?.close();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

const tail = (key: string) => key.slice(-4);

describe('Stripe refusing the installation’s key', () => {
  it('an anonymous holder of a top-up link gets a fixed sentence, not Stripe’s', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const token = signTopUpToken(h.deps.config, t.deploymentId, h.clock.now());
    logs = '';
    const res = await app.inject({ method: 'POST', url: `/console/top-up/${token}`, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'pack=small' });
    expect(res.statusCode).toBe(503);
    expect(res.body).not.toContain(tail(STALE_STRIPE_KEY));
    expect(res.body).not.toMatch(/Invalid API Key|sk_test_/);
    expect(res.body).toContain('Billing is not available');
    // The operator reads Stripe's words in the log.
    expect(logs).toContain('Invalid API Key');
  });

  it('a member buying a pack gets 503 BILLING_NOT_CONFIGURED without Stripe’s words', async () => {
    const owner = await signUpWithOrganization(h);
    logs = '';
    const res = await app.inject({ method: 'POST', url: `/billing/credit-packs/checkout?organization_id=${owner.organizationId}`, headers: bearer(owner.accessToken), payload: { pack: 'small' } });
    expect(res.statusCode, res.body).toBe(503);
    expect(res.body).toContain('"BILLING_NOT_CONFIGURED"');
    expect(res.body).not.toContain(tail(STALE_STRIPE_KEY));
    expect(res.body).not.toMatch(/Invalid API Key|sk_test_/);
    expect(logs).toContain('Invalid API Key');
  });
});

describe('an AI provider refusing the installation’s key', () => {
  it('is a 502 with a fixed sentence on the proxy and on /api/ai/generate; the log keeps the provider’s words', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await app.inject({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload: { ai_tokens_limit: 100_000 } });
    logs = '';
    const res = await app.inject({
      method: 'POST',
      url: '/api/v1/ai/chat/completions',
      headers: bearer(t.apiKey),
      payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 },
    });
    // Not a 401: the caller's own key is fine, and an SDK would take a 401 as its own failing.
    expect(res.statusCode, res.body).toBe(502);
    expect(res.body).toContain('AI_UPSTREAM_ERROR');
    expect(res.body).not.toContain(tail(AI_KEY));
    const generate = await app.inject({ method: 'POST', url: '/api/ai/generate', headers: bearer(t.apiKey), payload: { prompt: 'hi', max_tokens: 5 } });
    expect(generate.statusCode, generate.body).toBe(502);
    expect(generate.body).not.toContain(tail(AI_KEY));
    expect(logs).toContain('Incorrect API key provided');
    expect(logs).not.toContain(AI_KEY);
  });
});
