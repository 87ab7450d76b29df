import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../app.js';
import { MINUTE } from '../../clock.js';
import { type Config, testConfig } from '../../config.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { adminHeaders, bearer, createHarness, type Harness, json, serviceHeaders, type Tenant } from '../../../test/harness.js';
import { startOpenAiStandIn, type StandIn as AiStandIn } from '../../../test/ai-stand-in/index.js';
import { startPackStandIn } from '../../../test/billing-fixtures.js';
import type { StripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { signTopUpToken } from './top-up-link.js';

/**
 * The top-up link (docs/billing.md, "Top-up link"): a refusal for credits links to a page of the service
 * that sells a credit pack for that deployment through the Stripe stand-in, to whoever holds the link.
 */
let h: Harness;
let standIn: StripeStandIn;
let ai: AiStandIn;
let stripeConfig: Partial<Config>;
const f = creditFixtures(() => h);

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  ({ standIn, config: stripeConfig } = await startPackStandIn(() => h, start));

  ai = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  h = await createHarness({ ...stripeConfig, aiBaseUrl: ai.url, aiApiKey: 'sk-upstream', aiModels: ['gpt-4o-mini'] }, start.toISOString());
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
  await ai?.close();
});

const pathOf = (url: string) => new URL(url).pathname;
const tokenOf = (url: string) => pathOf(url).split('/').pop()!;
const admin = (method: 'PUT', url: string, payload: Record<string, unknown>) => h.request({ method, url, headers: adminHeaders(h), payload });
const form = (pack: string) => ({ 'content-type': 'application/x-www-form-urlencoded', payload: `pack=${encodeURIComponent(pack)}` });
const buy = (url: string, pack = 'small') => {
  const { payload, ...headers } = form(pack);
  return h.request({ method: 'POST', url: pathOf(url), headers, payload });
};

/** A trial tenant with no credits left: every metered call is refused for credits. */
async function brokeTenant(): Promise<Tenant> {
  return f.tenantWith(0);
}

async function refusedRecord(t: Tenant) {
  const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'top-up-tool' } });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ success: boolean; error: string; payment_required?: { reason: string; credits_required: number; top_up_url?: string } }>(res);
}

async function refusedCheck(t: Tenant, reserve = false) {
  const res = await h.request({
    method: 'POST',
    url: '/api/v1/mcp/check-entitlement',
    headers: serviceHeaders(h),
    payload: { deployment_id: t.deploymentId, tool_name: 'top-up-tool', ...(reserve ? { reserve: true } : {}) },
  });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ allowed: boolean; reason: string; payment_required?: { reason: string; top_up_url?: string } }>(res);
}

async function topUpUrlOf(t: Tenant): Promise<string> {
  const refused = await refusedRecord(t);
  expect(refused).toMatchObject({ success: false, error: 'insufficient_credits', payment_required: { reason: 'insufficient_credits' } });
  return refused.payment_required!.top_up_url!;
}

describe('the link in refusals for credits', () => {
  it('check (with and without reserve), record and service usage carry payment_required.top_up_url when billing is available', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    expect(url).toMatch(new RegExp(`^${h.config.publicBaseUrl}/console/top-up/[A-Za-z0-9_-]{40,}$`));
    expect(await refusedCheck(t)).toMatchObject({ allowed: false, reason: 'insufficient_credits', payment_required: { reason: 'insufficient_credits', top_up_url: expect.stringContaining('/console/top-up/') } });
    expect(await refusedCheck(t, true)).toMatchObject({ allowed: false, reason: 'insufficient_credits', payment_required: { top_up_url: expect.stringContaining('/console/top-up/') } });
    const usage = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'top-up-tool' } });
    expect(json(usage)).toMatchObject({ success: false, error: 'insufficient_credits', payment_required: { top_up_url: expect.stringContaining('/console/top-up/') } });
  });

  it('has no link when billing is off for the deployment, or the installation sells no packs', async () => {
    const t = await brokeTenant();
    expect((await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { billing_enabled: false })).statusCode).toBe(200);
    const refused = await refusedRecord(t);
    expect(refused.error).toBe('insufficient_credits');
    expect(refused.payment_required?.top_up_url).toBeUndefined();
    expect((await refusedCheck(t)).payment_required?.top_up_url).toBeUndefined();

    const bare = await createHarness({ stripeSecretKey: standIn.secretKey, stripeApiBase: standIn.url, creditPacks: {} });
    try {
      const other = await creditFixtures(() => bare).tenantWith(0);
      const res = await bare.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(other.apiKey), payload: { tool_name: 'x' } });
      expect(json(res)).toMatchObject({ success: false, error: 'insufficient_credits' });
      // The refusal still says what the call costs and what is spendable; only the link is missing.
      expect(json<{ payment_required?: unknown }>(res).payment_required).toEqual({ reason: 'insufficient_credits', credits_required: 1, credits_available: 0 });
    } finally {
      await bare.close();
    }
  });
});

describe('the link in the AI proxy\'s refusals for credits', () => {
  const complete = (t: Tenant) =>
    h.request({
      method: 'POST',
      url: '/api/v1/ai/chat/completions',
      headers: bearer(t.apiKey),
      payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
    });

  it('429 AI_QUOTA_EXCEEDED carries payment_required.top_up_url when billing is available, not otherwise', async () => {
    const t = await brokeTenant();
    expect((await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/overrides`, { ai_tokens_limit: 0 })).statusCode).toBe(200);
    const refused = await complete(t);
    expect(refused.statusCode, refused.body).toBe(429);
    const body = json<{ code: string; payment_required?: { reason: string; top_up_url?: string } }>(refused);
    expect(body).toMatchObject({ code: 'AI_QUOTA_EXCEEDED', payment_required: { reason: 'insufficient_credits' } });
    expect(body.payment_required!.top_up_url).toMatch(new RegExp(`^${h.config.publicBaseUrl}/console/top-up/`));
    expect((await h.request({ method: 'GET', url: pathOf(body.payment_required!.top_up_url!) })).statusCode).toBe(200);

    expect((await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { billing_enabled: false })).statusCode).toBe(200);
    const off = await complete(t);
    expect(off.statusCode).toBe(429);
    expect(json<{ payment_required?: unknown }>(off).payment_required).toBeUndefined();
  });
});

describe('the top-up page', () => {
  it('loading the page again and again reads no price from Stripe while the catalog holds it; a failed read is 503 and not retried at once', async () => {
    const t = await brokeTenant();
    const path = pathOf(await topUpUrlOf(t));
    expect((await h.request({ method: 'GET', url: path })).statusCode).toBe(200);
    // Both packs' next reads from Stripe would fail: fifty loads make none.
    standIn.failNext(2, { status: 500, path: /^\/v1\/prices\// });
    const loads = await Promise.all(Array.from({ length: 50 }, () => h.request({ method: 'GET', url: path })));
    expect(loads.map((r) => r.statusCode)).toEqual(loads.map(() => 200));
    // Past the catalog's five minutes the prices are read again, and those reads fail.
    h.clock.advance(6 * MINUTE);
    const fresh = pathOf(await topUpUrlOf(t));
    const failed = await h.request({ method: 'GET', url: fresh });
    expect(failed.statusCode, failed.body).toBe(503);
    expect(failed.headers['retry-after']).toBe('5');
    // The failure is remembered for a while: Stripe (which would answer now) is not asked again at once.
    expect((await h.request({ method: 'GET', url: fresh })).statusCode).toBe(503);
    h.clock.advance(31_000);
    expect((await h.request({ method: 'GET', url: fresh })).statusCode).toBe(200);
  });

  it('shows the packs and their prices, nothing of the organization, with no-referrer and no-store', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    const res = await h.request({ method: 'GET', url: pathOf(url) });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.headers['referrer-policy']).toBe('no-referrer');
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toContain('small');
    expect(res.body).toContain('large');
    expect(res.body).toContain('$5.00');
    expect(res.body).toContain('$40.00');
    expect(res.body).toContain('<form method="post"');
    const org = (await h.deps.db.query<{ name: string; slug: string }>('SELECT name, slug FROM organizations WHERE id = $1', [t.organizationId]))[0]!;
    const member = (await h.deps.db.query<{ email: string }>('SELECT email FROM users WHERE id = $1', [t.userId]))[0]!;
    for (const secret of [org.name, org.slug, t.organizationId, t.deploymentId, member.email, 'Balance', 'balance', 'Trial', 'trial']) {
      expect(res.body).not.toContain(secret);
    }
  });

  it('POST makes a guest Checkout Session for that deployment (no customer, no email) and answers 303 to it', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    const res = await buy(url, 'large');
    expect(res.statusCode, res.body).toBe(303);
    expect(res.headers['referrer-policy']).toBe('no-referrer');
    expect(res.headers['cache-control']).toBe('no-store');
    const location = String(res.headers.location);
    expect(location.startsWith(`${standIn.url}/checkout/cs_test_`)).toBe(true);
    const session = standIn.state.checkoutSessions.get(location.split('/').pop()!)!;
    expect(session.metadata).toMatchObject({ deployment_id: t.deploymentId, organization_id: t.organizationId, creditgate_pack: 'large' });
    expect(session.client_reference_id).toBe(t.deploymentId);
    // No customer: Checkout has no saved payment method to redisplay and no email to prefill.
    expect(session.customer).toBeNull();
    expect(session.customer_email).toBeNull();
    expect(standIn.state.checkoutOrders.get(session.id)!.customerEmail).toBeNull();
    const customer = (await h.deps.db.query<{ stripe_customer_id: string | null }>('SELECT stripe_customer_id FROM organizations WHERE id = $1', [t.organizationId]))[0]!;
    expect(customer.stripe_customer_id).toBeNull();

    // Paid, the pack is granted to that deployment.
    standIn.completeCheckout(session.id);
    for (const r of await standIn.flush()) expect(r.ok, `${r.type}: ${r.status} ${r.error ?? ''}`).toBe(true);
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(10_000);
  });

  it('an unknown pack is 400 and makes no session', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    const before = standIn.state.checkoutSessions.size;
    expect((await buy(url, 'huge')).statusCode).toBe(400);
    expect(standIn.state.checkoutSessions.size).toBe(before);
  });

  it('the 11th POST of one token within the hour is 429; another token of the deployment still works', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    for (let i = 0; i < 10; i++) expect((await buy(url)).statusCode).toBe(303);
    const refused = await buy(url);
    expect(refused.statusCode).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect(refused.headers['cache-control']).toBe('no-store');
    h.clock.advance(MINUTE);
    const other = await topUpUrlOf(t);
    expect(other).not.toBe(url);
    expect((await buy(other)).statusCode).toBe(303);
  });
});

describe('the deployment\'s hourly limit', () => {
  it('30 sessions per deployment per hour through all its links: the 31st is 429', async () => {
    const t = await brokeTenant();
    for (let link = 0; link < 3; link++) {
      h.clock.advance(1000);
      const url = await topUpUrlOf(t);
      for (let i = 0; i < 10; i++) expect((await buy(url)).statusCode).toBe(303);
    }
    h.clock.advance(1000);
    const fourth = await topUpUrlOf(t);
    expect((await buy(fourth)).statusCode).toBe(429);
    // Another deployment is not held by it.
    expect((await buy(await topUpUrlOf(await brokeTenant()))).statusCode).toBe(303);
  });
});

describe('a link that no longer sells: 410 with a plain message', () => {
  const expectGone = async (url: string) => {
    for (const res of [await h.request({ method: 'GET', url: pathOf(url) }), await buy(url)]) {
      expect(res.statusCode, res.body).toBe(410);
      expect(res.headers['content-type']).toMatch(/^text\/plain/);
      expect(res.headers['referrer-policy']).toBe('no-referrer');
      expect(res.headers['cache-control']).toBe('no-store');
    }
  };

  it('expired after 30 minutes', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    h.clock.advance(30 * MINUTE - 1000);
    expect((await h.request({ method: 'GET', url: pathOf(url) })).statusCode).toBe(200);
    h.clock.advance(1000);
    await expectGone(url);
  });

  it('tampered, signed for another deployment, or under another key', async () => {
    const t = await brokeTenant();
    const other = await brokeTenant();
    const url = await topUpUrlOf(t);
    const token = tokenOf(url);
    const raw = Buffer.from(token, 'base64url');
    // One bit of the signature, one of the expiry.
    for (const at of [raw.length - 1, 20]) {
      const altered = Buffer.from(raw);
      altered[at]! ^= 1;
      await expectGone(`${h.config.publicBaseUrl}/console/top-up/${altered.toString('base64url')}`);
    }
    // t's signature over other's deployment id.
    const swapped = Buffer.from(raw);
    Buffer.from(other.deploymentId.replaceAll('-', ''), 'hex').copy(swapped, 1);
    await expectGone(`${h.config.publicBaseUrl}/console/top-up/${swapped.toString('base64url')}`);
    // A token for t signed under another JWT_SECRET.
    const foreign = signTopUpToken({ jwtSecret: 'another-jwt-secret-that-is-long-enough-987654' }, t.deploymentId, h.clock.now());
    await expectGone(`${h.config.publicBaseUrl}/console/top-up/${foreign}`);
    await expectGone(`${h.config.publicBaseUrl}/console/top-up/not-a-token`);
    // The untouched link still works.
    expect((await h.request({ method: 'GET', url: pathOf(url) })).statusCode).toBe(200);
  });

  it('the deployment suspended, or billing turned off', async () => {
    const t = await brokeTenant();
    const url = await topUpUrlOf(t);
    expect((await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}`, { status: 'suspended' })).statusCode).toBe(200);
    await expectGone(url);
    expect((await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}`, { status: 'active' })).statusCode).toBe(200);
    expect((await h.request({ method: 'GET', url: pathOf(url) })).statusCode).toBe(200);
    expect((await admin('PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { billing_enabled: false })).statusCode).toBe(200);
    await expectGone(url);
  });
});

describe('logs', () => {
  it('never contain the token of a top-up link', async () => {
    let output = '';
    const stream = new Writable({
      write(chunk, _encoding, done) {
        output += chunk.toString();
        done();
      },
    });
    const app = await buildApp({ config: testConfig({ ...stripeConfig, logLevel: 'trace' }), db: h.deps.db, clock: h.clock, logStream: stream });
    try {
      const t = await brokeTenant();
      const refused = await app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
      const url = json<{ payment_required: { top_up_url: string } }>(refused).payment_required.top_up_url;
      const token = tokenOf(url);
      expect((await app.inject({ method: 'GET', url: pathOf(url) })).statusCode).toBe(200);
      const { payload, ...headers } = form('small');
      expect((await app.inject({ method: 'POST', url: pathOf(url), headers, payload })).statusCode).toBe(303);
      expect((await app.inject({ method: 'GET', url: `/console/top-up/${token.slice(0, 30)}` })).statusCode).toBe(410);
      expect(output).toContain('/console/top-up/[redacted]');
      expect(output).not.toContain(token);
      expect(output).not.toContain(token.slice(0, 30));
    } finally {
      await app.close();
    }
  });
});
