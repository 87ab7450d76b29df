import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMonths, DAY } from '../../clock.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createHarness, createPassesHarness, createTenant, type Harness, json, type Tenant, unique } from '../../../test/harness.js';
import { checkoutSessionObject, deliver, stripeConfig, stripeEvent, subscriptionObject } from '../../../test/stripe-events-fixtures.js';
import { WORKERS } from '../../workers/catalog.js';
import { recordPackCheckout } from '../credits/purchases.js';
import { handleStoredEvent } from './stripe-events.js';

/**
 * POST /webhooks/stripe without a Stripe API (docs/billing.md, Inbound events: it works with only STRIPE_WEBHOOK_SECRET set):
 * events are signed here the way Stripe signs them. Order is then judged by the events' `created`.
 */
let h: Harness;
const f = creditFixtures(() => h);
beforeAll(async () => {
  h = await createPassesHarness(stripeConfig, '2026-03-01T10:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const tierOf = async (t: Tenant) => (await q<{ tier: string }>('SELECT tier FROM deployments WHERE id = $1', [t.deploymentId]))[0]!.tier;
const orgOf = async (t: Tenant) =>
  (
    await q<{ plan: string; subscription_status: string | null; stripe_customer_id: string | null; stripe_subscription_id: string | null }>(
      'SELECT plan, subscription_status, stripe_customer_id, stripe_subscription_id FROM organizations WHERE id = $1',
      [t.organizationId],
    )
  )[0]!;
const outbox = (t: Tenant, type: string) =>
  q<{ data: Record<string, unknown> }>('SELECT data FROM outbox_events WHERE organization_id = $1 AND type = $2 ORDER BY created_at, id', [t.organizationId, type]);
const resets = (t: Tenant) => q<{ reason: string }>(`SELECT reason FROM credit_ledger WHERE deployment_id = $1 AND kind = 'period_reset' ORDER BY id`, [t.deploymentId]);
const storedEvent = async (id: string) => (await q<{ status: string; last_error: string | null }>('SELECT status, last_error FROM stripe_events WHERE id = $1', [id]))[0];
const balance = async (t: Tenant) =>
  (
    await q<{ period_start: Date; period_end: Date; monthly_allocation: number | null; monthly_used: number; purchased_balance: number }>(
      'SELECT period_start, period_end, monthly_allocation, monthly_used, purchased_balance FROM credit_balances WHERE deployment_id = $1',
      [t.deploymentId],
    )
  )[0]!;

async function ok(res: { statusCode: number; body: string }) {
  expect(res.statusCode, res.body).toBe(200);
  expect(JSON.parse(res.body)).toEqual({ status: 'success' });
}

/** The sale stored when creditgate makes a pack's Checkout Session (billing/checkout.ts): the only thing an event can grant. */
async function storeSale(t: Tenant, session: Record<string, unknown>, credits = 1000) {
  await recordPackCheckout(
    h.deps.db,
    { organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits, checkoutSessionId: session.id as string, priceId: 'price_pack_small', amountTotal: 500, currency: 'usd' },
    h.clock.now(),
  );
}

/** A tenant with no credits whose organization is a Stripe customer, and a stored, paid session of a 1,000-credit pack for 500. */
async function packBuyer() {
  const t = await f.tenantWith(0);
  const customer = unique('cus');
  await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
  const paymentIntent = unique('pi');
  const session = checkoutSessionObject({ customer, organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, paymentIntent, amountTotal: 500 });
  await storeSale(t, session);
  return { t, customer, paymentIntent, session };
}

describe('subscriptions drive tier, plan and period (docs/billing.md, Subscriptions)', () => {
  it('created → updated → deleted: the tier, the plan, the status and the period follow, with their events', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    // Two days after the organization was made (its first period runs from then), it subscribes.
    h.clock.advance(2 * DAY);
    const customer = unique('cus');
    const id = unique('sub');
    const start = h.clock.now();
    const end = addMonths(start, 1);
    const sub = (price: string, status = 'active') => subscriptionObject({ id, customer, price, status, start, end, organizationId: t.organizationId });

    await ok(await deliver(h, stripeEvent('customer.subscription.created', sub('price_launch'), start)));
    expect(await tierOf(t)).toBe('launch');
    expect(await orgOf(t)).toEqual({ plan: 'pro', subscription_status: 'active', stripe_customer_id: customer, stripe_subscription_id: id });
    expect(await balance(t)).toMatchObject({ period_start: start, period_end: end, monthly_allocation: 2000, monthly_used: 0 });
    const view = json<{ data: Record<string, unknown> }>(await h.request({ method: 'GET', url: '/billing/subscription', headers: bearer(t.apiKey) })).data;
    expect(view).toMatchObject({ status: 'active', stripe_subscription_id: id, stripe_price_id: 'price_launch', current_period_end: end.toISOString() });

    h.clock.advance(3 * DAY);
    await ok(await deliver(h, stripeEvent('customer.subscription.updated', sub('price_growth'), h.clock.now())));
    expect(await tierOf(t)).toBe('growth');
    expect(await balance(t)).toMatchObject({ period_start: start, period_end: end, monthly_allocation: 20_000 });

    h.clock.advance(DAY);
    await ok(await deliver(h, stripeEvent('customer.subscription.deleted', sub('price_growth', 'canceled'), h.clock.now())));
    expect(await tierOf(t)).toBe('sandbox');
    expect(await orgOf(t)).toMatchObject({ plan: 'free', subscription_status: 'canceled' });
    expect(await balance(t)).toMatchObject({ monthly_allocation: 0 });

    expect((await outbox(t, 'deployment.tier_changed')).map((e) => [e.data.from, e.data.to])).toEqual([
      ['sandbox', 'launch'],
      ['launch', 'growth'],
      ['growth', 'sandbox'],
    ]);
    expect((await outbox(t, 'subscription.updated')).map((e) => [e.data.status, e.data.tier])).toEqual([
      ['active', 'launch'],
      ['active', 'growth'],
      ['canceled', 'sandbox'],
    ]);
    // The subscription's start began a new credit period once; nothing else reset it.
    expect((await resets(t)).map((r) => r.reason)).toEqual(['first period', `period ${start.toISOString()}`]);
    await f.expectLedgerConsistent(t);
  });

  it('the same event delivered five times at once acts once', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    h.clock.advance(DAY);
    const now = h.clock.now();
    const event = stripeEvent(
      'customer.subscription.created',
      subscriptionObject({ id: unique('sub'), customer: unique('cus'), price: 'price_launch', start: now, end: addMonths(now, 1), organizationId: t.organizationId }),
      now,
    );
    const answers = await Promise.all(Array.from({ length: 5 }, () => deliver(h, event)));
    for (const res of answers) await ok(res);
    expect(await storedEvent(event.id)).toMatchObject({ status: 'processed' });
    expect(await outbox(t, 'deployment.tier_changed')).toHaveLength(1);
    expect(await outbox(t, 'subscription.updated')).toHaveLength(1);
    expect(await resets(t)).toHaveLength(2);
    await f.expectLedgerConsistent(t);
  });

  it('an event older than the last applied one changes nothing', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus');
    const id = unique('sub');
    const start = h.clock.now();
    const sub = (price: string) => subscriptionObject({ id, customer, price, start, end: addMonths(start, 1), organizationId: t.organizationId });
    const created = stripeEvent('customer.subscription.created', sub('price_launch'), start);
    const upgraded = stripeEvent('customer.subscription.updated', sub('price_growth'), new Date(start.getTime() + 60_000));
    // Stripe delivered the upgrade first; the creation arrives after it.
    await ok(await deliver(h, upgraded));
    await ok(await deliver(h, created));
    expect(await tierOf(t)).toBe('growth');
    expect(await storedEvent(created.id)).toMatchObject({ status: 'ignored', last_error: expect.stringContaining('older than the last applied event') });
    expect(await outbox(t, 'deployment.tier_changed')).toHaveLength(1);
  });

  it('a renewal resets the period exactly once, whether it arrives late, early or twice', async () => {
    for (const arrival of ['after-lazy-roll', 'before-any-touch'] as const) {
      h.clock.set('2026-02-20T10:00:00.000Z');
      const t = await createTenant(h, { tier: 'sandbox' });
      h.clock.set('2026-03-01T10:00:00.000Z');
      const customer = unique('cus');
      const id = unique('sub');
      const start = h.clock.now();
      const end = addMonths(start, 1);
      await ok(
        await deliver(h, stripeEvent('customer.subscription.created', subscriptionObject({ id, customer, price: 'price_launch', start, end, organizationId: t.organizationId }), start)),
      );
      h.clock.set(end.getTime() + 3_600_000);
      if (arrival === 'after-lazy-roll') {
        // A call after the boundary rolls the period before Stripe's renewal is heard of.
        expect((await h.request({ method: 'GET', url: '/billing/usage', headers: bearer(t.apiKey) })).statusCode).toBe(200);
      }
      const renewed = subscriptionObject({ id, customer, price: 'price_launch', start: end, end: addMonths(end, 1), organizationId: t.organizationId });
      await ok(await deliver(h, stripeEvent('customer.subscription.updated', renewed, end)));
      await ok(await deliver(h, stripeEvent('customer.subscription.updated', renewed, new Date(end.getTime() + 1000))));
      expect((await resets(t)).map((r) => r.reason), arrival).toEqual(['first period', `period ${start.toISOString()}`, `period ${end.toISOString()}`]);
      expect(await balance(t)).toMatchObject({ period_start: end, period_end: addMonths(end, 1), monthly_used: 0 });
      await f.expectLedgerConsistent(t);
    }
  });

  it('a canceled subscription stays canceled: an active state of the same second (or a stale read) changes nothing', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    h.clock.advance(DAY);
    const customer = unique('cus');
    const id = unique('sub');
    const start = h.clock.now();
    const sub = (status: string) => subscriptionObject({ id, customer, price: 'price_growth', status, start, end: addMonths(start, 1), organizationId: t.organizationId });
    await ok(await deliver(h, stripeEvent('customer.subscription.created', sub('active'), start)));
    h.clock.advance(60_000);
    const at = h.clock.now();
    await ok(await deliver(h, stripeEvent('customer.subscription.deleted', sub('canceled'), at)));
    const revived = stripeEvent('customer.subscription.updated', sub('active'), at);
    await ok(await deliver(h, revived));
    expect(await tierOf(t)).toBe('sandbox');
    expect(await storedEvent(revived.id)).toMatchObject({ status: 'ignored', last_error: expect.stringContaining('canceled') });
  });

  it('with two subscriptions in force, toggling one of them does not refill the allocation again and again', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    h.clock.advance(DAY);
    const customer = unique('cus');
    const start = h.clock.now();
    const yearly = subscriptionObject({ id: unique('sub'), customer, price: 'price_launch', start, end: addMonths(start, 12), organizationId: t.organizationId });
    await ok(await deliver(h, stripeEvent('customer.subscription.created', yearly, start)));
    h.clock.advance(DAY);
    const bStart = h.clock.now();
    const monthly = (cancel: boolean) =>
      subscriptionObject({ id: `${yearly.id}-b`, customer, price: 'price_launch', start: bStart, end: addMonths(bStart, 1), organizationId: t.organizationId, cancelAtPeriodEnd: cancel });
    await ok(await deliver(h, stripeEvent('customer.subscription.created', monthly(false), bStart)));
    const before = (await resets(t)).length;
    for (let i = 0; i < 3; i++) {
      h.clock.advance(60_000);
      await ok(await deliver(h, stripeEvent('customer.subscription.updated', monthly(i % 2 === 0), h.clock.now())));
      await ok(await deliver(h, stripeEvent('customer.subscription.updated', yearly, h.clock.now())));
    }
    expect((await resets(t)).length).toBe(before);
  });

  it('a refund handled before its pack’s grant waits for it, and the grant takes the credits back', async () => {
    const { t, customer, paymentIntent, session } = await packBuyer();
    const refund = stripeEvent(
      'charge.refunded',
      { id: unique('ch'), object: 'charge', amount: 500, amount_refunded: 500, payment_intent: paymentIntent, customer, metadata: { creditgate_pack: 'small' } },
      h.clock.now(),
    );
    await ok(await deliver(h, refund));
    expect(await storedEvent(refund.id)).toMatchObject({ status: 'pending' });
    // The grant settles the waiting refund in its own transaction: the credits are never spendable.
    await ok(await deliver(h, stripeEvent('checkout.session.completed', session, h.clock.now())));
    expect(await storedEvent(refund.id)).toMatchObject({ status: 'processed' });
    expect((await balance(t)).purchased_balance).toBe(0);
    // Handled again as the stripe-events worker would: nothing more.
    h.clock.advance(61_000);
    await handleStoredEvent(h.deps, refund.id);
    expect((await balance(t)).purchased_balance).toBe(0);
    await f.expectLedgerConsistent(t);
  });

  it('a customer no organization knows is acknowledged and ignored', async () => {
    const now = h.clock.now();
    const event = stripeEvent('customer.subscription.created', subscriptionObject({ id: unique('sub'), customer: unique('cus'), price: 'price_launch', start: now, end: addMonths(now, 1) }), now);
    await ok(await deliver(h, event));
    expect(await storedEvent(event.id)).toMatchObject({ status: 'ignored', last_error: expect.stringContaining('no organization') });
  });

  it('metadata cannot move a customer that belongs to another organization', async () => {
    const owner = await createTenant(h, { tier: 'sandbox' });
    const victim = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus');
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [victim.organizationId, unique('cus')]);
    const now = h.clock.now();
    // The subscription names the victim in its metadata, but its customer is the owner's.
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [owner.organizationId, customer]);
    await ok(
      await deliver(h, stripeEvent('customer.subscription.created', subscriptionObject({ id: unique('sub'), customer, price: 'price_growth', start: now, end: addMonths(now, 1), organizationId: victim.organizationId }), now)),
    );
    expect(await tierOf(owner)).toBe('growth');
    expect(await tierOf(victim)).toBe('sandbox');
  });
});

describe('retention', () => {
  it('settled events go after 30 days (a duplicate within them is still recognised); pending ones stay', async () => {
    const now = h.clock.now();
    const settled = stripeEvent('customer.created', { id: unique('cus'), object: 'customer' }, now);
    await ok(await deliver(h, settled));
    const pending = unique('evt');
    await q(`INSERT INTO stripe_events (id, type, created_at, payload, status, next_attempt_at, received_at) VALUES ($1, 'invoice.paid', $2, '{}', 'pending', $3, $2)`, [
      pending,
      now,
      new Date(now.getTime() + 3_600_000),
    ]);
    const prune = WORKERS.find((w) => w.name === 'stripe-event-retention')!;
    h.clock.advance(29 * DAY);
    await prune.run(h.deps);
    expect(await storedEvent(settled.id)).toBeDefined();
    h.clock.advance(2 * DAY);
    await prune.run(h.deps);
    expect(await storedEvent(settled.id)).toBeUndefined();
    expect(await storedEvent(pending)).toMatchObject({ status: 'pending' });
    await q('DELETE FROM stripe_events WHERE id = $1', [pending]);
  });
});

describe('signatures and bodies (docs/billing.md, Inbound events: 400, nothing stored)', () => {
  it('a wrong secret, a 10-minute-old signature, no signature, a body that is not an event: 400 naming the field', async () => {
    const now = h.clock.now();
    const event = stripeEvent('customer.subscription.created', subscriptionObject({ id: unique('sub'), customer: unique('cus'), price: 'price_launch', start: now, end: addMonths(now, 1) }), now);
    const cases = [
      await deliver(h, event, { secret: 'whsec_not_ours' }),
      await deliver(h, event, { signedAt: new Date(now.getTime() - 10 * 60_000) }),
      await h.request({ method: 'POST', url: '/webhooks/stripe', headers: { 'content-type': 'application/json' }, payload: event.body }),
      await deliver(h, { body: JSON.stringify({ id: 'evt_x', type: 'customer.subscription.created' }) }),
      await deliver(h, { body: 'not json' }),
    ];
    for (const res of cases) {
      expect(res.statusCode, res.body).toBe(400);
      expect(json(res)).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
    }
    expect(json<{ fields: Array<{ field: string }> }>(cases[0]!).fields[0]!.field).toBe('stripe-signature');
    expect(await storedEvent(event.id)).toBeUndefined();
    // The same event, properly signed now, is taken.
    await ok(await deliver(h, event));
  });

  it('signed events with odd contents are acknowledged and settled (handled or ignored), never left failing', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus');
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
    const now = h.clock.now();
    const odd = [
      stripeEvent('customer.subscription.updated', { id: unique('sub'), object: 'subscription', customer, status: 42, items: null }, now),
      stripeEvent('customer.subscription.created', { id: unique('sub'), object: 'subscription' }, now),
      stripeEvent('charge.refunded', { id: unique('ch'), object: 'charge', payment_intent: unique('pi'), amount: '500', amount_refunded: 1e300 }, now),
      stripeEvent('invoice.paid', { id: unique('in'), object: 'invoice', customer, status: 'paid', amount_due: 1.5, created: 'yesterday', period_start: -5 }, now),
      stripeEvent('checkout.session.completed', { id: unique('cs'), object: 'checkout.session', mode: 'payment', payment_status: 'paid', metadata: { creditgate_pack: 'x', creditgate_credits: '1e20' } }, now),
      stripeEvent('customer.created', { id: customer, object: 'customer' }, now),
    ];
    for (const event of odd) {
      await ok(await deliver(h, event));
      expect((await storedEvent(event.id))?.status, event.body).not.toBe('pending');
    }
    expect((await balance(t)).purchased_balance).toBe(0);
    expect(await tierOf(t)).toBe('sandbox');
  });

  it('without STRIPE_WEBHOOK_SECRET the route answers 503 BILLING_NOT_CONFIGURED', async () => {
    const bare = await createHarness({}, undefined, h.deps.db);
    try {
      const now = bare.clock.now();
      const res = await deliver(bare, stripeEvent('invoice.created', { id: unique('in'), object: 'invoice' }, now));
      expect(res.statusCode).toBe(503);
      expect(json(res)).toMatchObject({ code: 'BILLING_NOT_CONFIGURED' });
    } finally {
      await bare.close();
    }
  });
});

describe('credit packs: granted once, refunds take back only what is unspent (docs/billing.md, Credit packs)', () => {
  it('one Checkout Session grants once: three deliveries, a second event, two instances racing', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const customer = unique('cus');
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
    const session = checkoutSessionObject({ customer, organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, paymentIntent: unique('pi') });
    await storeSale(t, session);
    const other = await createHarness(stripeConfig, h.clock.now().toISOString(), h.deps.db);
    try {
      const completed = stripeEvent('checkout.session.completed', session, h.clock.now());
      const succeeded = stripeEvent('checkout.session.async_payment_succeeded', session, h.clock.now());
      const answers = await Promise.all([deliver(h, completed), deliver(other, completed), deliver(h, completed), deliver(h, succeeded), deliver(other, succeeded)]);
      for (const res of answers) await ok(res);
    } finally {
      await other.close();
    }
    expect((await balance(t)).purchased_balance).toBe(1000);
    expect(await f.ledgerKinds(t.deploymentId, 'grant')).toHaveLength(1);
    const purchased = await outbox(t, 'credits.purchased');
    expect(purchased.map((e) => [e.data.amount, e.data.pack, e.data.checkout_session_id])).toEqual([[1000, 'small', session.id]]);
    await f.expectLedgerConsistent(t);
  });

  it('an unpaid session grants nothing; a stored session whose event names another organization’s deployment grants nothing', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const other = await createTenant(h, { tier: 'trial' });
    const customer = unique('cus');
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
    const unpaidSession = checkoutSessionObject({ customer, organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, paymentIntent: unique('pi'), paymentStatus: 'unpaid' });
    await storeSale(t, unpaidSession);
    const unpaid = stripeEvent('checkout.session.completed', unpaidSession, h.clock.now());
    await ok(await deliver(h, unpaid));
    expect(await storedEvent(unpaid.id)).toMatchObject({ status: 'ignored', last_error: 'payment_status unpaid' });
    // A stored session of t whose event names the other organization's deployment (docs/billing.md, "Credit packs").
    const crossedSession = checkoutSessionObject({ customer, organizationId: t.organizationId, deploymentId: other.deploymentId, pack: 'small', credits: 1000, paymentIntent: unique('pi') });
    await storeSale(t, crossedSession);
    const crossed = stripeEvent('checkout.session.completed', crossedSession, h.clock.now());
    await ok(await deliver(h, crossed));
    expect((await balance(t)).purchased_balance).toBe(0);
    expect((await balance(other)).purchased_balance).toBe(0);
    expect(await storedEvent(crossed.id)).toMatchObject({ status: 'ignored' });
  });

  it('a refund takes back the refunded share as far as it is unspent, never below zero, once', async () => {
    const { t, customer, paymentIntent, session } = await packBuyer();
    await ok(await deliver(h, stripeEvent('checkout.session.completed', session, h.clock.now())));
    // 700 of the 1,000 credits are spent.
    const action = unique('act').replace(/-/g, '_');
    expect((await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: { 'x-admin-key': h.config.adminApiKey }, payload: { credits: 700 } })).statusCode).toBe(200);
    const tool = await f.toolFor(action);
    const used = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: tool } });
    expect(json(used)).toMatchObject({ success: true, credits_used: 700 });

    const charge = (refunded: number) => ({ id: unique('ch'), object: 'charge', amount: 500, amount_refunded: refunded, refunded: refunded === 500, payment_intent: paymentIntent, customer, currency: 'usd' });
    // Half refunded: 500 credits are due back, 300 are unspent.
    const half = stripeEvent('charge.refunded', charge(250), h.clock.now());
    await ok(await deliver(h, half));
    expect((await balance(t)).purchased_balance).toBe(0);
    // The rest refunded: 500 more due, nothing left to take.
    await ok(await deliver(h, stripeEvent('charge.refunded', charge(500), h.clock.now())));
    // The first refund's event again, under a new id (Stripe resends state, not deltas): nothing.
    await ok(await deliver(h, stripeEvent('charge.refunded', charge(250), h.clock.now())));
    expect((await balance(t)).purchased_balance).toBe(0);
    const adjusts = await f.ledgerKinds(t.deploymentId, 'adjust');
    expect(adjusts.filter((r) => r.purchased_delta !== 0).map((r) => r.purchased_delta)).toEqual([-300]);
    const row = (await q<{ refund_share: number; credits_taken_back: number }>('SELECT refund_share, credits_taken_back FROM credit_purchases WHERE stripe_payment_intent_id = $1', [paymentIntent]))[0];
    expect(row).toEqual({ refund_share: 1000, credits_taken_back: 300 });
    await f.expectLedgerConsistent(t);
  });
});

describe('credit packs go through the deduction batcher (docs/adr/0004-group-commit.md)', () => {
  it('a pack’s grant and its take-back each run in a batch’s transaction; a subscription event does not', async () => {
    const { t, customer, paymentIntent, session } = await packBuyer();
    const ops = () => h.deps.deductions.stats.ops;
    const before = ops();
    await ok(await deliver(h, stripeEvent('checkout.session.completed', session, h.clock.now())));
    expect(ops()).toBe(before + 1);
    expect((await balance(t)).purchased_balance).toBe(1000);
    const charge = { id: unique('ch'), object: 'charge', amount: 500, amount_refunded: 500, refunded: true, payment_intent: paymentIntent, customer, currency: 'usd' };
    await ok(await deliver(h, stripeEvent('charge.refunded', charge, h.clock.now())));
    expect(ops()).toBe(before + 2);
    expect((await balance(t)).purchased_balance).toBe(0);
    const start = h.clock.now();
    await ok(
      await deliver(h, stripeEvent('customer.subscription.created', subscriptionObject({ id: unique('sub'), customer, price: 'price_launch', start, end: addMonths(start, 1), organizationId: t.organizationId }), start)),
    );
    expect(ops()).toBe(before + 2);
    await f.expectLedgerConsistent(t);
  });
});

describe('invoices (docs/billing.md, Inbound events)', () => {
  it('are stored for /billing/invoices; a late older status does not win; payment_failed makes the subscription past_due', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus');
    const subId = unique('sub');
    const start = h.clock.now();
    await ok(
      await deliver(h, stripeEvent('customer.subscription.created', subscriptionObject({ id: subId, customer, price: 'price_launch', start, end: addMonths(start, 1), organizationId: t.organizationId }), start)),
    );
    const invoice = (id: string, status: string) => ({
      id,
      object: 'invoice',
      customer,
      status,
      amount_due: 4900,
      amount_paid: status === 'paid' ? 4900 : 0,
      currency: 'usd',
      hosted_invoice_url: `https://invoice.example/${id}`,
      period_start: Math.floor(start.getTime() / 1000),
      period_end: Math.floor(addMonths(start, 1).getTime() / 1000),
      created: Math.floor(start.getTime() / 1000),
      parent: { type: 'subscription_details', subscription_details: { subscription: subId } },
    });
    const paidId = unique('in');
    await ok(await deliver(h, stripeEvent('invoice.paid', invoice(paidId, 'paid'), h.clock.now())));
    await ok(await deliver(h, stripeEvent('invoice.created', invoice(paidId, 'draft'), h.clock.now())));
    const failedId = unique('in');
    h.clock.advance(60_000);
    await ok(await deliver(h, stripeEvent('invoice.payment_failed', invoice(failedId, 'open'), h.clock.now())));
    const listed = json<{ data: Array<{ stripe_invoice_id: string; status: string; amount_paid: number }> }>(
      await h.request({ method: 'GET', url: '/billing/invoices', headers: bearer(t.apiKey) }),
    ).data;
    expect(listed.map((i) => [i.stripe_invoice_id, i.status]).sort()).toEqual([[failedId, 'open'], [paidId, 'paid']].sort());
    expect(await orgOf(t)).toMatchObject({ subscription_status: 'past_due' });
    // Past due keeps the tier while Stripe retries the payment.
    expect(await tierOf(t)).toBe('launch');
    expect((await outbox(t, 'subscription.updated')).map((e) => e.data.status)).toEqual(['active', 'past_due']);
  });
});
