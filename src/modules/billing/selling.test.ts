import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMonths, DAY } from '../../clock.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import {
  bearer,
  createPassesHarness,
  createKeyOverHttp,
  createTenant,
  type Harness,
  json,
  signUpWithOrganization,
  type Tenant,
} from '../../../test/harness.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { Stripe } from './stripe-client.js';
import { applyFromApi } from './subscribe.js';
import { applySubscription, SubscriptionMovedError, subscriptionState, subscriptionVersion } from './subscriptions.js';
import { WORKERS } from '../../workers/catalog.js';

/**
 * Selling end to end (docs/billing.md, Selling): the product reaches a stateful Stripe stand-in through
 * STRIPE_API_BASE with the official SDK, and the stand-in's signed events reach POST /webhooks/stripe.
 */
let h: Harness;
let standIn: StripeStandIn;
let stripe: Stripe;
const f = creditFixtures(() => h);
const price: Record<string, string> = {};
const unreachable = new Set<string>();

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  standIn = await startStripeStandIn({
    now: () => (h ? h.clock.now() : start),
    // An event type in `unreachable` finds the endpoint down (503): Stripe keeps it and delivers it again later.
    deliver: async (payload, headers) =>
      [...unreachable].some((type) => payload.includes(`"type": "${type}"`))
        ? { status: 503 }
        : { status: (await h.request({ method: 'POST', url: '/webhooks/stripe', headers, payload })).statusCode },
  });
  price.launch = standIn.createPrice({ productName: 'Launch', unitAmount: 4900, interval: 'month' }).id;
  price.growth = standIn.createPrice({ productName: 'Growth', unitAmount: 19_900, interval: 'month' }).id;
  price.small = standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  price.large = standIn.createPrice({ productName: '10,000 credits', unitAmount: 4000 }).id;
  h = await createPassesHarness(
    {
      stripeSecretKey: standIn.secretKey,
      stripeApiBase: standIn.url,
      stripeWebhookSecret: standIn.webhookSecret,
      stripePriceTiers: { [price.launch]: 'launch', [price.growth]: 'growth' },
      creditPacks: { small: { credits: 1000, priceId: price.small }, large: { credits: 10_000, priceId: price.large } },
    },
    start.toISOString(),
  );
  stripe = new Stripe(standIn.secretKey, { host: '127.0.0.1', port: standIn.port, protocol: 'http', maxNetworkRetries: 0 });
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const deploymentHeaders = (t: { deploymentId: string; deploymentSecret: string }) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });
const post = (url: string, headers: Record<string, string>, payload: unknown) => h.request({ method: 'POST', url, headers, payload: payload as Record<string, unknown> });
const purchased = async (t: { deploymentId: string }) =>
  (await q<{ purchased_balance: number }>('SELECT purchased_balance FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]))[0]!.purchased_balance;
const tierOf = async (deploymentId: string) => (await q<{ tier: string }>('SELECT tier FROM deployments WHERE id = $1', [deploymentId]))[0]!.tier;
const customerOf = async (organizationId: string) =>
  (await q<{ stripe_customer_id: string | null }>('SELECT stripe_customer_id FROM organizations WHERE id = $1', [organizationId]))[0]!.stripe_customer_id;
const runWorker = (name: string) => WORKERS.find((w) => w.name === name)!.run(h.deps);

async function flushAll(): Promise<void> {
  const results = await standIn.flush();
  for (const r of results) expect(r.ok, `${r.type}: ${r.status} ${r.error ?? ''}`).toBe(true);
}

/** An owner with an organization, and the headers of an API key of theirs that may manage billing. */
async function ownerWithKey() {
  const owner = await signUpWithOrganization(h);
  const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write', 'admin'] });
  return { owner, auth: { 'x-api-key': key.key } };
}

/** ...subscribed to `tier` through Checkout, its events delivered. */
async function subscribedOwner(tier: string) {
  const { owner, auth } = await ownerWithKey();
  const first = await post('/billing/subscription', auth, { tier });
  expect(first.statusCode, first.body).toBe(200);
  const subscription = standIn.completeCheckout(json<{ data: { checkout_session_id: string } }>(first).data.checkout_session_id).subscription as string;
  await flushAll();
  return { owner, auth, subscription };
}

describe('credit packs through Checkout', () => {
  it('purchase → pay → the pack is granted once; a refund takes back the refunded share', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const res = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small', success_url: 'https://app.example.com/thanks' });
    expect(res.statusCode, res.body).toBe(200);
    const { url, checkout_session_id: session } = json<{ url: string; checkout_session_id: string }>(res);
    expect(url).toContain(`/checkout/${session}`);
    // One customer per organization, made on first need, carrying the organization id.
    const customer = await customerOf(t.organizationId);
    expect(standIn.state.customers.get(customer!)?.metadata).toMatchObject({ organization_id: t.organizationId });
    expect(await purchased(t)).toBe(0);

    standIn.completeCheckout(session);
    await flushAll();
    expect(await purchased(t)).toBe(1000);
    // Stripe delivers the completion again, three times at once: nothing more.
    const [completed] = standIn.events('checkout.session.completed').filter((e) => (e.data.object as { id: string }).id === session);
    await standIn.deliverEvent(completed!.id, { times: 3, concurrently: true });
    expect(await purchased(t)).toBe(1000);
    expect(await f.ledgerKinds(t.deploymentId, 'grant')).toHaveLength(1);

    // A second purchase reuses the customer.
    const again = json<{ checkout_session_id: string }>(await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'large' }));
    expect(await customerOf(t.organizationId)).toBe(customer);
    expect(standIn.state.checkoutSessions.get(again.checkout_session_id)?.customer).toBe(customer);

    // Half the small pack's payment is refunded: 500 credits come back out.
    const paymentIntent = standIn.state.checkoutSessions.get(session)!.payment_intent as string;
    await stripe.refunds.create({ payment_intent: paymentIntent, amount: 250 });
    await flushAll();
    expect(await purchased(t)).toBe(500);
    await f.expectLedgerConsistent(t);
  });

  it('a chargeback takes back the disputed share; a dispute won gives it back, once; one lost after a refund takes the rest', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const buy = async () => {
      const res = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small' });
      expect(res.statusCode, res.body).toBe(200);
      const session = json<{ checkout_session_id: string }>(res).checkout_session_id;
      standIn.completeCheckout(session);
      await flushAll();
      return standIn.state.checkoutSessions.get(session)!.payment_intent as string;
    };
    const first = await buy();
    expect(await purchased(t)).toBe(1000);
    // The cardholder disputes the whole payment: the funds leave, and the pack's credits with them.
    const dispute = standIn.disputePayment(first);
    await flushAll();
    expect(await purchased(t)).toBe(0);
    const withdrawn = standIn.events('charge.dispute.funds_withdrawn').find((e) => (e.data.object as { id: string }).id === dispute.id)!;
    expect((await q<{ status: string }>('SELECT status FROM stripe_events WHERE id = $1', [withdrawn.id]))[0]).toEqual({ status: 'processed' });
    // Delivered again, three times at once: nothing more.
    await standIn.deliverEvent(withdrawn.id, { times: 3, concurrently: true });
    expect(await purchased(t)).toBe(0);
    // The dispute is won: the funds come back, and so do the credits; a repeat gives nothing more.
    standIn.closeDispute(dispute.id, 'won');
    await flushAll();
    expect(await purchased(t)).toBe(1000);
    const reinstated = standIn.events('charge.dispute.funds_reinstated').find((e) => (e.data.object as { id: string }).id === dispute.id)!;
    await standIn.deliverEvent(reinstated.id, { times: 2 });
    expect(await purchased(t)).toBe(1000);

    // A second pack, half refunded, then the rest disputed and lost: nothing of it stays.
    const second = await buy();
    expect(await purchased(t)).toBe(2000);
    await stripe.refunds.create({ payment_intent: second, amount: 250 });
    await flushAll();
    expect(await purchased(t)).toBe(1500);
    const lost = standIn.disputePayment(second);
    expect(lost.amount).toBe(250);
    await flushAll();
    standIn.closeDispute(lost.id, 'lost');
    await flushAll();
    expect(await purchased(t)).toBe(1000);

    // A third, disputed and won, its events delivered newest first: the late withdrawal takes nothing.
    const third = await buy();
    expect(await purchased(t)).toBe(2000);
    const won = standIn.disputePayment(third);
    standIn.closeDispute(won.id, 'won');
    const results = await standIn.flush({ order: 'reverse' });
    expect(results.every((r) => r.ok)).toBe(true);
    expect(await purchased(t)).toBe(2000);
    await f.expectLedgerConsistent(t);
  });

  it('a dispute that comes before its pack is granted is settled when the grant lands', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const res = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small' });
    expect(res.statusCode, res.body).toBe(200);
    const session = json<{ checkout_session_id: string }>(res).checkout_session_id;
    // The endpoint is down for the completion (Stripe keeps trying for days); the chargeback's event gets through.
    unreachable.add('checkout.session.completed');
    standIn.completeCheckout(session);
    await standIn.flush();
    const paymentIntent = standIn.state.checkoutSessions.get(session)!.payment_intent as string;
    const dispute = standIn.disputePayment(paymentIntent);
    const early = await standIn.flush();
    expect(early.filter((r) => r.type.startsWith('charge.dispute.')).every((r) => r.ok)).toBe(true);
    const withdrawn = standIn.events('charge.dispute.funds_withdrawn').find((e) => (e.data.object as { id: string }).id === dispute.id)!;
    const eventStatus = async () => (await q<{ status: string }>('SELECT status FROM stripe_events WHERE id = $1', [withdrawn.id]))[0]?.status;
    expect(await eventStatus()).toBe('ignored');
    expect(await purchased(t)).toBe(0);
    // The completion gets through at last: the pack is granted, and the dispute takes it back.
    unreachable.clear();
    h.clock.advance(3 * 3_600_000);
    await flushAll();
    await runWorker('stripe-events');
    expect(await eventStatus()).toBe('processed');
    expect(await purchased(t)).toBe(0);
    // Won: the credits come back, once.
    standIn.closeDispute(dispute.id, 'won');
    await flushAll();
    await runWorker('stripe-events');
    expect(await purchased(t)).toBe(1000);
    await f.expectLedgerConsistent(t);
  });

  it('credits held while a refund or a chargeback is handled are taken back too: released, they are gone; a record of the hold is refused', async () => {
    await f.admin('PUT', '/api/v1/admin/credit-costs/selling_hold_1000', { credits: 1000 });
    const tool = await f.toolFor('selling_hold_1000');
    const buyAndHold = async () => {
      const t = await f.tenantWith(0);
      const res = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small' });
      expect(res.statusCode, res.body).toBe(200);
      const session = json<{ checkout_session_id: string }>(res).checkout_session_id;
      standIn.completeCheckout(session);
      await flushAll();
      expect(await purchased(t)).toBe(1000);
      // The whole pack held by a reservation, which costs nothing until recorded.
      const invocation = `hold-${session}`;
      const held = await post('/api/v1/mcp/stdio/check-entitlement', bearer(t.apiKey), { tool_name: tool, reserve: true, invocation_id: invocation });
      expect(json<{ allowed: boolean }>(held).allowed, held.body).toBe(true);
      return { t, invocation, paymentIntent: standIn.state.checkoutSessions.get(session)!.payment_intent as string };
    };
    const release = (t: Tenant, invocation: string) =>
      post(`/api/v1/mcp/reservations/${invocation}/release`, bearer(t.apiKey), {});

    // Refunded in full while held: the credits leave now, and releasing the hold brings none back.
    const refunded = await buyAndHold();
    await stripe.refunds.create({ payment_intent: refunded.paymentIntent });
    await flushAll();
    expect(await purchased(refunded.t)).toBe(0);
    expect((await release(refunded.t, refunded.invocation)).statusCode).toBe(200);
    expect(await f.balanceOf(refunded.t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    await f.expectLedgerConsistent(refunded.t);

    // Charged back and lost while held: the same; the record that would spend the hold is refused.
    const disputed = await buyAndHold();
    const dispute = standIn.disputePayment(disputed.paymentIntent);
    await flushAll();
    standIn.closeDispute(dispute.id, 'lost');
    await flushAll();
    expect(await purchased(disputed.t)).toBe(0);
    const spent = await post('/api/v1/mcp/stdio/record-usage', bearer(disputed.t.apiKey), { tool_name: tool, invocation_id: disputed.invocation });
    expect(json<{ success: boolean; error: string }>(spent)).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect((await release(disputed.t, disputed.invocation)).statusCode).toBe(200);
    expect(await f.balanceOf(disputed.t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    await f.expectLedgerConsistent(disputed.t);
  });

  it('an async payment grants when it settles, and not when it fails', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const ok = json<{ checkout_session_id: string }>(await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small' }));
    standIn.completeCheckout(ok.checkout_session_id, { asyncPayment: true });
    await flushAll();
    expect(await purchased(t)).toBe(0);
    standIn.settleAsyncPayment(ok.checkout_session_id);
    await flushAll();
    expect(await purchased(t)).toBe(1000);
    const failed = json<{ checkout_session_id: string }>(await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'large' }));
    standIn.completeCheckout(failed.checkout_session_id, { asyncPayment: true, fail: true });
    standIn.settleAsyncPayment(failed.checkout_session_id);
    await flushAll();
    expect(await purchased(t)).toBe(1000);
  });
});

describe('retries of a purchase', () => {
  it('the same Idempotency-Key returns the same Checkout Session; with another pack it is 422; the return URL reaches Stripe as given', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const headers = { ...deploymentHeaders(t), 'idempotency-key': 'buy-1' };
    const body = { pack: 'small', success_url: 'https://app.example.com/done?session={CHECKOUT_SESSION_ID}' };
    const first = json<{ checkout_session_id: string }>(await post('/api/v1/credits/purchase', headers, body));
    const again = json<{ checkout_session_id: string }>(await post('/api/v1/credits/purchase', headers, body));
    expect(again.checkout_session_id).toBe(first.checkout_session_id);
    expect(standIn.state.checkoutSessions.get(first.checkout_session_id)?.success_url).toBe(body.success_url);
    expect(await q('SELECT 1 FROM credit_purchases WHERE deployment_id = $1', [t.deploymentId])).toHaveLength(1);
    const other = await post('/api/v1/credits/purchase', headers, { ...body, pack: 'large' });
    expect(other.statusCode, other.body).toBe(422);
    expect(json(other)).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
  });
});

describe('subscriptions through Checkout and the API', () => {
  it('first subscription by Checkout, a plan change through the API, renewals, a failed renewal, cancellation', async () => {
    const owner = await signUpWithOrganization(h);
    const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write', 'admin'] });
    const auth = { 'x-api-key': key.key };
    const start = h.clock.now();

    const first = await post('/billing/subscription', auth, { tier: 'launch' });
    expect(first.statusCode, first.body).toBe(200);
    const checkout = json<{ data: { url: string; checkout_session_id: string } }>(first).data;
    const completed = standIn.completeCheckout(checkout.checkout_session_id);
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe('launch');
    const subscriptionId = completed.subscription as string;
    expect(json<{ data: { stripe_subscription_id: string; status: string } }>(await h.request({ method: 'GET', url: '/billing/subscription', headers: auth })).data).toMatchObject({
      stripe_subscription_id: subscriptionId,
      status: 'active',
    });
    // A deployment secret cannot start a second subscription (that is the owners' call).
    const proxy = await post('/api/v1/proxy/billing/checkout', deploymentHeaders(owner), { tier: 'growth' });
    expect(proxy.statusCode).toBe(409);

    // The owner upgrades: the price changes through the API and applies at once.
    h.clock.advance(DAY);
    const upgraded = await post('/billing/subscription', auth, { tier: 'growth' });
    expect(upgraded.statusCode, upgraded.body).toBe(200);
    expect(json<{ data: { stripe_price_id: string } }>(upgraded).data.stripe_price_id).toBe(price.growth);
    expect(await tierOf(owner.deploymentId)).toBe('growth');
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe('growth');

    // Two renewals: each resets the period once; invoices are listed.
    for (let i = 1; i <= 2; i++) {
      h.clock.set(addMonths(start, i).getTime() + 60_000);
      standIn.advanceSubscription(subscriptionId);
      await flushAll();
    }
    const resets = await q<{ reason: string }>(`SELECT reason FROM credit_ledger WHERE deployment_id = $1 AND kind = 'period_reset' ORDER BY id`, [owner.deploymentId]);
    expect(resets.map((r) => r.reason)).toEqual([
      'first period',
      `period ${addMonths(start, 1).toISOString()}`,
      `period ${addMonths(start, 2).toISOString()}`,
    ]);
    const invoices = json<{ data: Array<{ status: string }> }>(await h.request({ method: 'GET', url: '/billing/invoices', headers: auth })).data;
    expect(invoices.length).toBeGreaterThanOrEqual(3);
    expect(invoices.every((i) => i.status === 'paid')).toBe(true);

    // A declined renewal: past due, the tier is kept while Stripe retries.
    h.clock.set(addMonths(start, 3).getTime() + 60_000);
    standIn.failRenewal(subscriptionId);
    await flushAll();
    expect((await q<{ subscription_status: string }>('SELECT subscription_status FROM organizations WHERE id = $1', [owner.organizationId]))[0]).toEqual({
      subscription_status: 'past_due',
    });
    expect(await tierOf(owner.deploymentId)).toBe('growth');
    // While the card fails, no plan change (it would add credits nobody pays for).
    const blocked = await post('/billing/subscription', auth, { tier: 'launch' });
    expect(blocked.statusCode, blocked.body).toBe(409);

    // Canceled in the portal: back to the tier of a new organization, plan free.
    standIn.cancelSubscription(subscriptionId);
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe(h.config.newOrgTier);
    expect((await q<{ plan: string; subscription_status: string }>('SELECT plan, subscription_status FROM organizations WHERE id = $1', [owner.organizationId]))[0]).toEqual({
      plan: 'free',
      subscription_status: 'canceled',
    });
  });

  it('with a secret key, events delivered in reverse order still end in Stripe’s current state', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const res = await post('/api/v1/proxy/billing/checkout', deploymentHeaders(t), { price_id: price.launch });
    expect(res.statusCode, res.body).toBe(200);
    const session = standIn.completeCheckout(json<{ checkout_session_id: string }>(res).checkout_session_id);
    const subscription = await stripe.subscriptions.retrieve(session.subscription as string);
    await stripe.subscriptions.update(subscription.id, { items: [{ id: subscription.items.data[0]!.id, price: price.growth }] });
    const results = await standIn.flush({ order: 'reverse' });
    expect(results.every((r) => r.ok)).toBe(true);
    expect(await tierOf(t.deploymentId)).toBe('growth');
  });

  it('two subscriptions in force (the second made outside creditgate): ending the dearer one brings back the tier of the one still paid for', async () => {
    const { owner, auth } = await ownerWithKey();
    const opened = await post('/billing/subscription', auth, { tier: 'launch' });
    expect(opened.statusCode, opened.body).toBe(200);
    const launch = json<{ data: { checkout_session_id: string } }>(opened).data.checkout_session_id;
    // Someone with the Stripe account's key opens a second Checkout for the same customer, as a
    // Dashboard user or another integration could: creditgate's own refuses that (the test below).
    const growth = (
      await stripe.checkout.sessions.create({
        mode: 'subscription',
        customer: (await customerOf(owner.organizationId))!,
        line_items: [{ price: price.growth!, quantity: 1 }],
        success_url: 'https://app.example.com/ok',
        subscription_data: { metadata: { organization_id: owner.organizationId } },
      })
    ).id;
    standIn.completeCheckout(launch);
    await flushAll();
    h.clock.advance(1000);
    const dear = standIn.completeCheckout(growth).subscription as string;
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe('growth');
    // Growth ends (cancelled in the portal, say): launch is still paid for, and only launch.
    h.clock.advance(1000);
    standIn.cancelSubscription(dear);
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe('launch');
    const [org] = await q<{ stripe_subscription_id: string; subscription_status: string; plan: string }>(
      'SELECT stripe_subscription_id, subscription_status, plan FROM organizations WHERE id = $1',
      [owner.organizationId],
    );
    expect(org).toMatchObject({ subscription_status: 'active', plan: 'pro' });
    expect(org!.stripe_subscription_id).not.toBe(dear);
  });

  it('a second subscription Checkout expires the first: only the newest can be paid; two at once leave one open', async () => {
    const { owner, auth } = await ownerWithKey();
    const open = async (tier: string) => {
      const res = await post('/billing/subscription', auth, { tier });
      expect(res.statusCode, res.body).toBe(200);
      return json<{ data: { checkout_session_id: string } }>(res).data.checkout_session_id;
    };
    const openSessions = async () => {
      const customer = await customerOf(owner.organizationId);
      return [...standIn.state.checkoutSessions.values()].filter((s) => s.customer === customer && s.mode === 'subscription' && s.status === 'open');
    };
    const launch = await open('launch');
    h.clock.advance(1000);
    const growth = await open('growth');
    expect(standIn.state.checkoutSessions.get(launch)!.status).toBe('expired');
    expect(() => standIn.completeCheckout(launch)).toThrow(/expired/);
    expect((await openSessions()).map((s) => s.id)).toEqual([growth]);
    // The same plan asked again within the same second (Stripe's `created` is in seconds): the answer
    // is the one session left open, whichever of the two it is.
    h.clock.advance(1000);
    const twice = [await open('launch'), await open('launch')];
    expect((await openSessions()).map((s) => s.id)).toEqual([twice[1]]);
    // Two plans at once (two clicks): one stays open, whichever; each answer is a session or 409 (an
    // answer given before the other request made its session may name one expired since).
    const both = await Promise.all(['launch', 'growth'].map((tier) => post('/billing/subscription', auth, { tier })));
    for (const res of both) {
      if (res.statusCode !== 200) expect(json(res)).toMatchObject({ success: false, error: { code: 'CONFLICT' } });
    }
    expect(both.some((res) => res.statusCode === 200)).toBe(true);
    const left = await openSessions();
    expect(left).toHaveLength(1);
    standIn.completeCheckout(left[0]!.id);
    await flushAll();
    const subscriptions = await q<{ status: string }>('SELECT status FROM subscriptions WHERE organization_id = $1', [owner.organizationId]);
    expect(subscriptions).toEqual([{ status: 'active' }]);
  });

  it('a Checkout paid whose events have not arrived yet: another is 409 and leaves nothing open to pay', async () => {
    const { owner, auth } = await ownerWithKey();
    const first = await post('/billing/subscription', auth, { tier: 'launch' });
    expect(first.statusCode, first.body).toBe(200);
    standIn.completeCheckout(json<{ data: { checkout_session_id: string } }>(first).data.checkout_session_id);
    // The customer comes back before Stripe's events did, and asks again.
    h.clock.advance(1000);
    const again = await post('/billing/subscription', auth, { tier: 'growth' });
    expect(again.statusCode, again.body).toBe(409);
    expect(json(again)).toMatchObject({ success: false, error: { code: 'CONFLICT' } });
    const customer = await customerOf(owner.organizationId);
    expect([...standIn.state.checkoutSessions.values()].filter((s) => s.customer === customer && s.status === 'open')).toEqual([]);
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe('launch');
  });

  it("a failed renewal's event delivered only after the invoice was paid leaves the subscription active", async () => {
    const { auth, subscription } = await subscribedOwner('launch');
    h.clock.advance(31 * DAY);
    standIn.failRenewal(subscription);
    const failed = standIn.events('invoice.payment_failed').at(-1)!;
    // Its first delivery does not get through; the card is then updated and the invoice paid.
    unreachable.add('invoice.payment_failed');
    h.clock.advance(60_000);
    await standIn.flush();
    standIn.payInvoice((failed.data.object as { id: string }).id);
    await standIn.flush();
    unreachable.clear();
    const status = async () =>
      (await q<{ status: string; subscription_status: string }>(
        'SELECT s.status, o.subscription_status FROM subscriptions s JOIN organizations o ON o.id = s.organization_id WHERE s.stripe_subscription_id = $1',
        [subscription],
      ))[0];
    expect(await status()).toEqual({ status: 'active', subscription_status: 'active' });
    // Stripe's retry of the failed payment's event, an hour later.
    h.clock.advance(3_600_000);
    const [retry] = await standIn.deliverEvent(failed.id);
    expect(retry!.ok, retry!.error).toBe(true);
    expect(await status()).toEqual({ status: 'active', subscription_status: 'active' });
    const change = await post('/billing/subscription', auth, { tier: 'growth' });
    expect(change.statusCode, change.body).toBe(200);
    // The stand-in's own retry of that event, still queued: delivered once more, applied no more.
    await flushAll();
    expect(standIn.queue()).toEqual([]);
    expect(await status()).toEqual({ status: 'active', subscription_status: 'active' });
  });

  it('a state read back before a newer one was applied is refused, not applied over it', async () => {
    const { owner, auth, subscription } = await subscribedOwner('growth');
    // An event's handling reads the row's version, then the subscription from Stripe (growth)...
    const seenVersion = await subscriptionVersion(h.deps.db, subscription);
    const readObject = await stripe.subscriptions.retrieve(subscription);
    const read = subscriptionState(readObject);
    expect(read.priceId).toBe(price.growth);
    // ...while the owner moves to launch, applied at once.
    h.clock.advance(1000);
    const change = await post('/billing/subscription', auth, { tier: 'launch' });
    expect(change.statusCode, change.body).toBe(200);
    await flushAll();
    expect(await tierOf(owner.deploymentId)).toBe('launch');
    // The state read first comes to its transaction last: refused (its event is tried again, read again).
    await expect(
      h.deps.db.transaction((tx) => applySubscription(tx, h.ctx, { state: read, eventAt: h.clock.now(), readBack: true, seenVersion })),
    ).rejects.toThrow(SubscriptionMovedError);
    expect(await tierOf(owner.deploymentId)).toBe('launch');
    // The API's path (a plan change applies Stripe's answer) meets the same: it reads the subscription again.
    await applyFromApi(h.ctx, readObject, seenVersion);
    expect(await tierOf(owner.deploymentId)).toBe('launch');
    expect((await q<{ stripe_price_id: string }>('SELECT stripe_price_id FROM subscriptions WHERE stripe_subscription_id = $1', [subscription]))[0]).toEqual({
      stripe_price_id: price.launch,
    });
  });

  it('the portal answers a Stripe Billing Portal URL', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const res = await post('/api/v1/proxy/billing/portal', deploymentHeaders(t), { return_url: 'https://app.example.com/account' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json<{ url: string }>(res).url).toMatch(/\/portal\/bps_/);
  });
});

describe('refusals write nothing', () => {
  it('a sandbox deployment gets the feature_disabled 403 on purchase, checkout and portal', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    for (const [url, body] of [
      ['/api/v1/credits/purchase', { pack: 'small' }],
      ['/api/v1/proxy/billing/checkout', { tier: 'launch' }],
      ['/api/v1/proxy/billing/portal', {}],
    ] as const) {
      const res = await post(url, deploymentHeaders(t), body);
      expect(res.statusCode, url).toBe(403);
      expect(json(res)).toEqual({ error: 'feature_disabled', code: 'FEATURE_NOT_AVAILABLE', message: expect.any(String), upgrade_url: expect.stringContaining('/billing/upgrade') });
    }
    expect(await customerOf(t.organizationId)).toBeNull();
  });

  it('an unknown pack, an unknown price, a return URL that is not https: 400 naming the field; no customer, no sale', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const customers = standIn.state.customers.size;
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['/api/v1/credits/purchase', { pack: 'huge' }, 'pack'],
      ['/api/v1/credits/purchase', { pack: 'small', success_url: 'http://app.example.com/x' }, 'success_url'],
      ['/api/v1/credits/purchase', { pack: 'small', cancel_url: 'javascript:alert(1)' }, 'cancel_url'],
      ['/api/v1/proxy/billing/checkout', { price_id: 'price_unknown' }, 'price_id'],
      ['/api/v1/proxy/billing/checkout', { tier: 'enterprise' }, 'tier'],
      ['/api/v1/proxy/billing/checkout', { pack: 'small', tier: 'launch' }, 'pack'],
      ['/api/v1/proxy/billing/portal', { return_url: 'ftp://example.com' }, 'return_url'],
    ];
    for (const [url, body, field] of cases) {
      const res = await post(url, deploymentHeaders(t), body);
      expect(res.statusCode, `${url} ${JSON.stringify(body)}: ${res.body}`).toBe(400);
      expect(json<{ fields: Array<{ field: string; message: string }> }>(res).fields.map((x) => x.field)).toContain(field);
    }
    const unknownPack = json<{ fields: Array<{ message: string }> }>(await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'huge' }));
    expect(unknownPack.fields[0]!.message).toContain('small, large');
    expect(standIn.state.customers.size).toBe(customers);
    expect(await q('SELECT 1 FROM credit_purchases WHERE deployment_id = $1', [t.deploymentId])).toHaveLength(0);
    // http on loopback is fine outside production.
    const local = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small', success_url: 'http://127.0.0.1:3000/done' });
    expect(local.statusCode, local.body).toBe(200);
  });
});

describe('a Stripe that answers 500 for a while loses nothing', () => {
  it('selling answers 503 with Retry-After and writes nothing; a retry works', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    // The SDK tries twice (maxNetworkRetries 1): both fail.
    standIn.failNext(2, { path: /\/v1\/customers/ });
    const res = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small' });
    expect(res.statusCode, res.body).toBe(503);
    expect(res.headers['retry-after']).toBeDefined();
    expect(json(res)).toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
    expect(await q('SELECT 1 FROM credit_purchases WHERE deployment_id = $1', [t.deploymentId])).toHaveLength(0);
    expect(await customerOf(t.organizationId)).toBeNull();
    const retried = await post('/api/v1/credits/purchase', deploymentHeaders(t), { pack: 'small' });
    expect(retried.statusCode, retried.body).toBe(200);
  });

  it('events whose read-back fails are acknowledged, kept and applied by the worker later', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const res = await post('/api/v1/proxy/billing/checkout', deploymentHeaders(t), { tier: 'launch' });
    const session = standIn.completeCheckout(json<{ checkout_session_id: string }>(res).checkout_session_id);
    // Every read-back of the subscription fails (two tries each) while its events arrive and at the worker's first retry.
    const reads = 2 * standIn.queue().filter((e) => e.type.startsWith('customer.subscription.')).length;
    expect(reads).toBeGreaterThan(0);
    standIn.failNext(2 * reads, { path: /\/v1\/subscriptions\// });
    await flushAll();
    expect(await tierOf(t.deploymentId)).toBe('trial');
    const pending = await q<{ attempts: number; next_attempt_at: Date }>(
      "SELECT attempts, next_attempt_at FROM stripe_events WHERE status = 'pending' AND payload->'data'->'object'->>'id' = $1",
      [session.subscription],
    );
    expect(pending.length).toBe(reads / 2);
    expect(pending.every((p) => p.attempts === 1 && p.next_attempt_at.getTime() > h.clock.now().getTime())).toBe(true);
    h.clock.advance(61_000);
    await runWorker('stripe-events');
    expect(await tierOf(t.deploymentId)).toBe('trial');
    // The stand-in answers again; after the longer wait the worker applies them.
    h.clock.advance(10 * 60_000);
    await runWorker('stripe-events');
    expect(await tierOf(t.deploymentId)).toBe('launch');
    expect(await q("SELECT 1 FROM stripe_events WHERE status = 'pending' AND payload->'data'->'object'->>'id' = $1", [session.subscription])).toHaveLength(0);
  });
});

describe('what is sold', () => {
  it('GET /api/v1/credits/packs lists the packs and the subscription prices', async () => {
    const t: Tenant = await createTenant(h, { tier: 'sandbox' });
    const res = await h.request({ method: 'GET', url: '/api/v1/credits/packs', headers: deploymentHeaders(t) });
    expect(json(res)).toEqual({
      configured: true,
      packs: [
        { pack: 'small', credits: 1000, price_id: price.small },
        { pack: 'large', credits: 10_000, price_id: price.large },
      ],
      subscription_prices: [
        { price_id: price.launch, tier: 'launch' },
        { price_id: price.growth, tier: 'growth' },
      ],
    });
  });
});
