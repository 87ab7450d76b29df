import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';

/**
 * Selling to owners and admins with a user's token or an API key (docs/billing.md "Selling"):
 * GET /billing/catalog, POST /billing/credit-packs/checkout, POST /billing/portal, against the Stripe
 * stand-in; and the same routes on an installation without Stripe.
 */
let h: Harness;
let bare: Harness;
let standIn: StripeStandIn;
const price: Record<string, string> = {};

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  standIn = await startStripeStandIn({
    now: () => (h ? h.clock.now() : start),
    deliver: async (payload, headers) => ({ status: (await h.request({ method: 'POST', url: '/webhooks/stripe', headers, payload })).statusCode }),
  });
  price.launch = standIn.createPrice({ productName: 'Launch', unitAmount: 4900, interval: 'month' }).id;
  price.small = standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  h = await createHarness(
    {
      stripeSecretKey: standIn.secretKey,
      stripeApiBase: standIn.url,
      stripeWebhookSecret: standIn.webhookSecret,
      stripePriceTiers: { [price.launch]: 'launch' },
      creditPacks: { small: { credits: 1000, priceId: price.small } },
    },
    start.toISOString(),
  );
  bare = await createHarness({}, start.toISOString());
});
afterAll(async () => {
  await bare?.close();
  await h?.close();
  await standIn?.close();
});

type ErrorBody = { error: { code: string }; details: { fields?: Array<{ field: string }> } };

function expectError(res: { statusCode: number; body: string }, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body).toBe(status);
  const body = JSON.parse(res.body) as ErrorBody;
  expect(body.error.code).toBe(code);
  if (field) expect(body.details.fields?.map((f) => f.field)).toContain(field);
}

const post = (harness: Harness, url: string, headers: Record<string, string>, payload: Record<string, unknown>) =>
  harness.request({ method: 'POST', url, headers, payload });
const purchased = async (deploymentId: string) =>
  (await h.deps.db.query<{ purchased_balance: number }>('SELECT purchased_balance FROM credit_balances WHERE deployment_id = $1', [deploymentId]))[0]!
    .purchased_balance;

async function flushAll(): Promise<void> {
  for (const r of await standIn.flush()) expect(r.ok, `${r.type}: ${r.status} ${r.error ?? ''}`).toBe(true);
}

describe('GET /billing/catalog', () => {
  it('lists the packs and prices for billing.read (owner, member), not for a viewer; another organization 404', async () => {
    const owner = await signUpWithOrganization(h);
    const res = await h.request({ method: 'GET', url: '/billing/catalog', headers: bearer(owner.accessToken) });
    expect(res.statusCode, res.body).toBe(200);
    expect(json<{ data: unknown }>(res).data).toEqual({
      configured: true,
      prices_read: true,
      packs: [{ pack: 'small', credits: 1000, price_id: price.small, unit_amount: 500, currency: 'usd' }],
      subscription_prices: [
        { price_id: price.launch, tier: 'launch', monthly_credits: 2000, unit_amount: 4900, currency: 'usd', interval: 'month', interval_count: 1 },
      ],
    });
    const member = await signUpAsMember(h, owner.organizationId, 'member');
    const query = `?organization_id=${owner.organizationId}`;
    expect((await h.request({ method: 'GET', url: `/billing/catalog${query}`, headers: bearer(member.accessToken) })).statusCode).toBe(200);
    const viewer = await signUpAsMember(h, owner.organizationId, 'viewer');
    expectError(await h.request({ method: 'GET', url: `/billing/catalog${query}`, headers: bearer(viewer.accessToken) }), 403, 'FORBIDDEN');
    const stranger = await signUpWithOrganization(h);
    expectError(await h.request({ method: 'GET', url: `/billing/catalog${query}`, headers: bearer(stranger.accessToken) }), 404, 'NOT_FOUND');
  });
});

describe('POST /billing/credit-packs/checkout', () => {
  it('an owner buys a pack for the primary deployment (any tier); once paid, it is granted once', async () => {
    const owner = await signUpWithOrganization(h);
    const res = await post(h, '/billing/credit-packs/checkout', bearer(owner.accessToken), { pack: 'small', success_url: 'http://127.0.0.1:9/console/done' });
    expect(res.statusCode, res.body).toBe(200);
    const checkout = json<{ data: { url: string; checkout_session_id: string } }>(res).data;
    expect(checkout.url).toBe(`${standIn.url}/checkout/${checkout.checkout_session_id}`);
    const session = standIn.state.checkoutSessions.get(checkout.checkout_session_id)!;
    // A sandbox organization (no billing_enabled): the owner still buys for its primary deployment.
    expect(session.metadata).toMatchObject({ organization_id: owner.organizationId, deployment_id: owner.deploymentId, creditgate_pack: 'small' });
    expect(session.success_url).toBe('http://127.0.0.1:9/console/done');
    expect(await purchased(owner.deploymentId)).toBe(0);
    standIn.completeCheckout(checkout.checkout_session_id);
    await flushAll();
    expect(await purchased(owner.deploymentId)).toBe(1000);
  });

  it('the same Idempotency-Key returns the same session; an admin key buys; a named deployment of another organization is 404', async () => {
    const owner = await signUpWithOrganization(h);
    const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write', 'admin'] });
    const headers = { 'x-api-key': key.key, 'idempotency-key': 'console-buy-1' };
    const first = await post(h, '/billing/credit-packs/checkout', headers, { pack: 'small', deployment_id: owner.deploymentId });
    const again = await post(h, '/billing/credit-packs/checkout', headers, { pack: 'small', deployment_id: owner.deploymentId });
    expect(first.statusCode, first.body).toBe(200);
    expect(json<{ data: { checkout_session_id: string } }>(again).data.checkout_session_id).toBe(
      json<{ data: { checkout_session_id: string } }>(first).data.checkout_session_id,
    );
    const other = await signUpWithOrganization(h);
    expectError(await post(h, '/billing/credit-packs/checkout', { 'x-api-key': key.key }, { pack: 'small', deployment_id: other.deploymentId }), 404, 'NOT_FOUND');
  });

  it('refuses bad input (400 naming the field), members and read/write keys (403), strangers (404), a suspended deployment (403)', async () => {
    const owner = await signUpWithOrganization(h);
    const auth = bearer(owner.accessToken);
    const url = '/billing/credit-packs/checkout';
    expectError(await post(h, url, auth, { pack: 'huge' }), 400, 'VALIDATION_ERROR', 'pack');
    expectError(await post(h, url, auth, {}), 400, 'VALIDATION_ERROR');
    expectError(await post(h, url, auth, { pack: 'small', extra: 1 }), 400, 'VALIDATION_ERROR');
    expectError(await post(h, url, auth, { pack: 'small', deployment_id: 'primary' }), 400, 'VALIDATION_ERROR', 'deployment_id');
    expectError(await post(h, url, auth, { pack: 'small', success_url: 'ftp://example.com/x' }), 400, 'VALIDATION_ERROR', 'success_url');

    const member = await signUpAsMember(h, owner.organizationId, 'member');
    expectError(await post(h, `${url}?organization_id=${owner.organizationId}`, bearer(member.accessToken), { pack: 'small' }), 403, 'FORBIDDEN');
    const rw = await createKeyOverHttp(h, auth, owner.organizationId, { scopes: ['read', 'write'] });
    expectError(await post(h, url, { 'x-api-key': rw.key }, { pack: 'small' }), 403, 'FORBIDDEN');
    const stranger = await signUpWithOrganization(h);
    expectError(await post(h, `${url}?organization_id=${owner.organizationId}`, bearer(stranger.accessToken), { pack: 'small' }), 404, 'NOT_FOUND');

    const suspended = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${owner.deploymentId}`, headers: adminHeaders(h), payload: { status: 'suspended' } });
    expect(suspended.statusCode, suspended.body).toBe(200);
    expectError(await post(h, url, auth, { pack: 'small' }), 403, 'DEPLOYMENT_SUSPENDED');
    // Nothing was sold by any of these.
    expect(await h.deps.db.query('SELECT 1 FROM credit_purchases WHERE organization_id = $1', [owner.organizationId])).toEqual([]);
  });
});

describe('POST /billing/portal', () => {
  it('gives an owner a portal session for the organization; members 403; a bad return URL 400', async () => {
    const owner = await signUpWithOrganization(h);
    const res = await post(h, '/billing/portal', bearer(owner.accessToken), { return_url: 'http://127.0.0.1:9/console/billing' });
    expect(res.statusCode, res.body).toBe(200);
    const { url } = json<{ data: { url: string } }>(res).data;
    expect(url).toMatch(new RegExp(`^${standIn.url}/portal/`));
    const customer = (await h.deps.db.query<{ stripe_customer_id: string }>('SELECT stripe_customer_id FROM organizations WHERE id = $1', [owner.organizationId]))[0]!;
    expect(standIn.state.customers.get(customer.stripe_customer_id)?.metadata).toMatchObject({ organization_id: owner.organizationId });

    const member = await signUpAsMember(h, owner.organizationId, 'member');
    expectError(await post(h, `/billing/portal?organization_id=${owner.organizationId}`, bearer(member.accessToken), {}), 403, 'FORBIDDEN');
    expectError(await post(h, '/billing/portal', bearer(owner.accessToken), { return_url: 'not a url' }), 400, 'VALIDATION_ERROR', 'return_url');
  });
});

describe('without Stripe', () => {
  it('the catalog says so; buying and the portal are 503 BILLING_NOT_CONFIGURED', async () => {
    const owner = await signUpWithOrganization(bare);
    const auth = bearer(owner.accessToken);
    const catalog = await bare.request({ method: 'GET', url: '/billing/catalog', headers: auth });
    expect(json<{ data: unknown }>(catalog).data).toEqual({ configured: false, prices_read: false, packs: [], subscription_prices: [] });
    expectError(await post(bare, '/billing/credit-packs/checkout', auth, { pack: 'small' }), 503, 'BILLING_NOT_CONFIGURED');
    expectError(await post(bare, '/billing/portal', auth, {}), 503, 'BILLING_NOT_CONFIGURED');
  });
});
