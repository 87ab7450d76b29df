import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, type Harness, json, type Tenant, unique } from '../../../test/harness.js';
import { checkoutSessionObject, deliver, stripeConfig, stripeEvent, WEBHOOK_SECRET } from '../../../test/stripe-events-fixtures.js';
import { recordPackCheckout } from '../credits/purchases.js';

/**
 * What a signed Checkout event may grant (docs/billing.md, "Credit packs"): only a sale this
 * installation stored when it made the session — credits, pack and deployment from that row, the
 * event's amount and currency checked against it, once per row. The review, holding the webhook
 * secret, granted 50,000 credits with an unknown session's metadata and credited another organization
 * by naming it; each of those events is replayed here and must grant nothing. Also the signature's
 * timestamp: 5 minutes either way (docs/billing.md, "Inbound events").
 */
let h: Harness;
const f = creditFixtures(() => h);
beforeAll(async () => {
  h = await createHarness(stripeConfig, '2026-03-01T10:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const storedEvent = async (id: string) => (await q<{ status: string; last_error: string | null }>('SELECT status, last_error FROM stripe_events WHERE id = $1', [id]))[0];
const purchased = async (t: Tenant) => (await f.balanceOf(t.deploymentId)).purchased_balance;
const ledgerRows = async (t: Tenant) => (await q<{ n: number }>('SELECT count(*)::int AS n FROM credit_ledger WHERE deployment_id = $1', [t.deploymentId]))[0]!.n;
const sales = async (sessionId: string) =>
  q<{ granted_at: Date | null; credits: number }>('SELECT granted_at, credits FROM credit_purchases WHERE stripe_checkout_session_id = $1', [sessionId]);

async function ok(res: { statusCode: number; body: string }) {
  expect(res.statusCode, res.body).toBe(200);
  expect(JSON.parse(res.body)).toEqual({ status: 'success' });
}

/** A tenant with no credits, a Stripe customer, and the stored sale of a 1,000-credit pack for 500 usd (as billing/checkout.ts stores it). */
async function buyer() {
  const t = await f.tenantWith(0);
  const customer = unique('cus');
  await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
  const sessionId = unique('cs_test');
  await recordPackCheckout(
    h.deps.db,
    { organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, checkoutSessionId: sessionId, priceId: 'price_pack_small', amountTotal: 500, currency: 'usd' },
    h.clock.now(),
  );
  const session = (overrides: Record<string, unknown> = {}, metadata: Record<string, string> = {}): Record<string, unknown> => {
    const object = checkoutSessionObject({ id: sessionId, customer, organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, paymentIntent: unique('pi') });
    return { ...object, ...overrides, metadata: { ...(object.metadata as Record<string, string>), ...metadata } };
  };
  return { t, customer, sessionId, session };
}

/** Deliver each event, expect it acknowledged and settled as ignored, and the tenants' balances and ledgers unchanged. */
async function expectNothingGranted(events: Array<{ id: string; body: string }>, tenants: Tenant[]) {
  const before = await Promise.all(tenants.map(async (t) => [await purchased(t), await ledgerRows(t)]));
  for (const event of events) {
    await ok(await deliver(h, event));
    expect(await storedEvent(event.id), event.body).toMatchObject({ status: 'ignored', last_error: expect.stringContaining('nothing granted') });
  }
  expect(await Promise.all(tenants.map(async (t) => [await purchased(t), await ledgerRows(t)]))).toEqual(before);
  for (const t of tenants) await f.expectLedgerConsistent(t);
}

describe('a signed Checkout event grants only a stored sale', () => {
  it('an unknown session whose metadata asks for 50,000 credits of an unknown pack grants nothing and stores no sale', async () => {
    const victim = await f.tenantWith(0);
    const customer = unique('cus');
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [victim.organizationId, customer]);
    const forged = checkoutSessionObject({ customer, organizationId: victim.organizationId, deploymentId: victim.deploymentId, pack: 'mega', credits: 50_000, paymentIntent: unique('pi'), amountTotal: 500 });
    const completed = stripeEvent('checkout.session.completed', forged, h.clock.now());
    const succeeded = stripeEvent('checkout.session.async_payment_succeeded', forged, h.clock.now());
    await expectNothingGranted([completed, succeeded], [victim]);
    expect(await sales(forged.id as string)).toEqual([]);
  });

  it('a stored session whose event names another organization, deployment, pack or number of credits grants nothing, to anyone', async () => {
    const { t, session } = await buyer();
    const other = await f.tenantWith(0);
    const events = ([
      { organization_id: other.organizationId, deployment_id: other.deploymentId },
      { deployment_id: other.deploymentId },
      { creditgate_credits: '50000' },
      { creditgate_pack: 'large', creditgate_credits: '10000', creditgate_price: 'price_pack_large' },
    ] as Array<Record<string, string>>).map((metadata) => stripeEvent('checkout.session.completed', session({}, metadata), h.clock.now()));
    await expectNothingGranted(events, [t, other]);
    expect((await sales(session().id as string))[0]).toMatchObject({ granted_at: null, credits: 1000 });
  });

  it('a paid amount or currency other than the stored sale’s grants nothing; the genuine event then grants the stored credits once', async () => {
    const { t, session } = await buyer();
    const mismatched = [{ amount_total: 1 }, { amount_total: 50_000 }, { currency: 'jpy' }, { amount_total: null }, { currency: null }].map((overrides) =>
      stripeEvent('checkout.session.completed', session(overrides), h.clock.now()),
    );
    await expectNothingGranted(mismatched, [t]);

    const genuine = session();
    for (const type of ['checkout.session.completed', 'checkout.session.completed', 'checkout.session.async_payment_succeeded']) {
      await ok(await deliver(h, stripeEvent(type, genuine, h.clock.now())));
    }
    expect(await purchased(t)).toBe(1000);
    expect(await f.ledgerKinds(t.deploymentId, 'grant')).toHaveLength(1);
    await f.expectLedgerConsistent(t);
  });

  it('the credits come from the stored row: an event without metadata grants the stored pack (and the currency’s case does not matter)', async () => {
    const { t, session } = await buyer();
    const bare = { ...session({ currency: 'USD' }), metadata: {} };
    const event = stripeEvent('checkout.session.completed', bare, h.clock.now());
    await ok(await deliver(h, event));
    expect(await storedEvent(event.id)).toMatchObject({ status: 'processed' });
    expect(await purchased(t)).toBe(1000);
    await f.expectLedgerConsistent(t);
  });

  it('a sale stored before amounts were recorded is granted from its row, taking the paid amount', async () => {
    const { t, sessionId, session } = await buyer();
    await q('UPDATE credit_purchases SET amount_total = NULL, currency = NULL WHERE stripe_checkout_session_id = $1', [sessionId]);
    await ok(await deliver(h, stripeEvent('checkout.session.completed', session({ amount_total: 700 }, { creditgate_credits: '50000' }), h.clock.now())));
    expect(await purchased(t)).toBe(0);
    await ok(await deliver(h, stripeEvent('checkout.session.completed', session({ amount_total: 700 }), h.clock.now())));
    expect(await purchased(t)).toBe(1000);
    expect((await q<{ amount_total: number; currency: string }>('SELECT amount_total, currency FROM credit_purchases WHERE stripe_checkout_session_id = $1', [sessionId]))[0]).toEqual({
      amount_total: 700,
      currency: 'usd',
    });
  });

  it('a stored session paid by another customer grants nothing', async () => {
    const { t, session } = await buyer();
    await expectNothingGranted([stripeEvent('checkout.session.completed', session({ customer: unique('cus') }), h.clock.now())], [t]);
  });
});

describe('the signature’s timestamp: 5 minutes either way', () => {
  const header = (body: string, timestamp: number) => Stripe.webhooks.generateTestHeaderString({ payload: body, secret: WEBHOOK_SECRET, timestamp });
  const post = (event: { body: string }, signature: string) =>
    h.request({ method: 'POST', url: '/webhooks/stripe', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, payload: event.body });

  it('an hour ahead, six minutes ahead, six minutes old, or not a number: 400 naming stripe-signature, nothing stored', async () => {
    const now = Math.floor(h.clock.now().getTime() / 1000);
    const event = stripeEvent('customer.created', { id: unique('cus'), object: 'customer' }, h.clock.now());
    for (const timestamp of [now + 3600, now + 360, now - 360, Number.NaN]) {
      const res = await post(event, header(event.body, timestamp));
      expect(res.statusCode, `${timestamp}: ${res.body}`).toBe(400);
      expect(json(res)).toMatchObject({ code: 'INVALID_REQUEST', fields: [{ field: 'stripe-signature' }] });
    }
    expect(await storedEvent(event.id)).toBeUndefined();
    // Within the tolerance on the future side (a sender's clock a little ahead) it is taken.
    await ok(await post(event, header(event.body, now + 240)));
    expect(await storedEvent(event.id)).toBeDefined();
  });

  it('the tolerance follows the service clock, not the machine’s', async () => {
    h.clock.advance(2 * 3600_000);
    const at = h.clock.now();
    const event = stripeEvent('customer.created', { id: unique('cus'), object: 'customer' }, at);
    await ok(await post(event, header(event.body, Math.floor(at.getTime() / 1000))));
  });
});
