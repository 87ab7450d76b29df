import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StandIn, startOpenAiStandIn } from '../../../test/ai-stand-in/index.js';
import { bearer, createHarness, createTenant, type Harness, json, signUpWithOrganization, type Tenant } from '../../../test/harness.js';
import { delta, scrape } from '../../../test/metrics.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';

/**
 * The series of what creditgate calls: webhook deliveries (proxy sends and organization webhooks) by
 * outcome, and calls to the AI provider and to Stripe by outcome, each against a real stand-in.
 * Every assertion is on the difference between two scrapes of this file's app.
 */
let h: Harness;
let rx: Receiver;
let ai: StandIn;
let stripe: StripeStandIn;
const START = new Date().toISOString();

beforeAll(async () => {
  rx = await startReceiver();
  ai = await startOpenAiStandIn({ apiKey: 'sk-upstream' });
  stripe = await startStripeStandIn({ now: () => (h ? h.clock.now() : new Date(START)), deliver: async () => ({ status: 200 }) });
  const small = stripe.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  h = await createHarness(
    {
      webhookAllowPrivateNetworks: true,
      aiBaseUrl: ai.url,
      aiApiKey: 'sk-upstream',
      aiModels: ['gpt-4o-mini'],
      stripeSecretKey: stripe.secretKey,
      stripeApiBase: stripe.url,
      creditPacks: { small: { credits: 1000, priceId: small } },
    },
    START,
  );
});
afterAll(async () => {
  await h?.close();
  await Promise.all([rx?.close(), ai?.close(), stripe?.close()]);
});

const creds = (t: Tenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });

describe('webhook deliveries', () => {
  it('a proxy send: delivered or failed, and the credit it took', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const send = () => h.request({ method: 'POST', url: '/api/v1/proxy/webhooks/send', headers: creds(t), payload: { url: `${rx.url}/hook`, payload: { a: 1 } } });
    const before = await scrape(h);
    rx.script({ status: 200 });
    expect(json(await send())).toMatchObject({ success: true });
    // A 4xx is not retried: one attempt, failed.
    rx.script({ status: 400 });
    expect(json(await send())).toMatchObject({ success: false, statusCode: 400 });
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_webhook_deliveries_total', { kind: 'proxy', outcome: 'delivered' })).toBe(1);
    expect(delta(before, after, 'creditgate_webhook_deliveries_total', { kind: 'proxy', outcome: 'failed' })).toBe(1);
    expect(delta(before, after, 'creditgate_deductions_total', { source: 'webhook' })).toBe(2);
    expect(delta(before, after, 'creditgate_credits_deducted_total', { source: 'webhook' })).toBe(2);
  });

  it("an organization webhook's test send", async () => {
    const o = await signUpWithOrganization(h);
    const created = await h.request({
      method: 'POST',
      url: `/organizations/${o.organizationId}/webhooks`,
      headers: bearer(o.accessToken),
      payload: { url: `${rx.url}/org`, events: ['api_key.created'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const hook = json<{ data: { id: string } }>(created).data;
    const before = await scrape(h);
    rx.script({ status: 204 });
    const sent = await h.request({ method: 'POST', url: `/organizations/${o.organizationId}/webhooks/${hook.id}/test`, headers: bearer(o.accessToken) });
    expect(json<{ data: { status: string } }>(sent).data.status).toBe('delivered');
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_webhook_deliveries_total', { kind: 'organization', outcome: 'delivered' })).toBe(1);
  });
});

describe('upstream calls', () => {
  it('the AI provider: an answer, and a 5xx', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const chat = () =>
      h.request({
        method: 'POST',
        url: '/api/v1/ai/chat/completions',
        headers: bearer(t.apiKey),
        payload: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 },
      });
    const before = await scrape(h);
    expect((await chat()).statusCode).toBe(200);
    ai.failNext({ kind: 'status', status: 500 });
    expect((await chat()).statusCode).toBe(502);
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_upstream_requests_total', { upstream: 'ai', outcome: 'ok' })).toBe(1);
    expect(delta(before, after, 'creditgate_upstream_requests_total', { upstream: 'ai', outcome: 'server_error' })).toBe(1);
    expect(after.histogram('creditgate_upstream_request_duration_seconds', { upstream: 'ai' }).count).toBeGreaterThanOrEqual(2);
  });

  it('Stripe: every call of a credit-pack Checkout', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const before = await scrape(h);
    const res = await h.request({
      method: 'POST',
      url: '/api/v1/credits/purchase',
      headers: creds(t),
      payload: { pack: 'small', success_url: 'https://app.example.com/thanks' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const after = await scrape(h);
    // The customer, then the Checkout Session.
    expect(delta(before, after, 'creditgate_upstream_requests_total', { upstream: 'stripe', outcome: 'ok' })).toBe(2);
    expect(delta(before, after, 'creditgate_upstream_requests_total', { upstream: 'stripe', outcome: 'connection_error' })).toBe(0);
  });
});
