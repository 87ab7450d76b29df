import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPackStandIn } from '../../../test/billing-fixtures.js';
import { createHarness, createTenant, type Harness, type Tenant, unique } from '../../../test/harness.js';
import type { StripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { signature, subscriptionObject } from '../../../test/stripe-events-fixtures.js';
import { addMonths } from '../../clock.js';

/**
 * Events this installation's own Stripe account did not make (docs/billing.md, Inbound events): a
 * connected account's (an endpoint listening to Connect events shares the secret), the other mode's,
 * or of a subscription Stripe does not know. Their metadata can name any organization: none of them
 * gives a tier or binds a customer.
 */
let h: Harness;
let standIn: StripeStandIn;
let enterprise: string;
beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  const kit = await startPackStandIn(() => h, start);
  standIn = kit.standIn;
  enterprise = standIn.createPrice({ productName: 'Enterprise', unitAmount: 99_900, interval: 'month' }).id;
  h = await createHarness({ ...kit.config, stripePriceTiers: { [enterprise]: 'enterprise' } }, start.toISOString());
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const seconds = (d: Date) => Math.floor(d.getTime() / 1000);

function signedEvent(type: string, object: Record<string, unknown>, extra: { account?: string; livemode?: boolean } = {}) {
  const id = unique('evt');
  const body = JSON.stringify({
    id,
    object: 'event',
    ...(extra.account ? { account: extra.account } : {}),
    api_version: '2026-10-28.endive',
    created: seconds(h.clock.now()),
    type,
    data: { object },
    livemode: extra.livemode ?? false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
  });
  return { id, body };
}

async function deliver(event: { body: string }) {
  const res = await h.request({
    method: 'POST',
    url: '/webhooks/stripe',
    headers: { 'content-type': 'application/json', 'stripe-signature': signature(event.body, h.clock.now(), standIn.webhookSecret) },
    payload: event.body,
  });
  expect(res.statusCode, res.body).toBe(200);
}

/** A subscription to the enterprise price whose metadata names the tenant, with a customer Stripe (here) never made. */
const subscriptionFor = (t: Tenant, id = unique('sub')) =>
  subscriptionObject({ id, customer: unique('cus_elsewhere'), price: enterprise, start: h.clock.now(), end: addMonths(h.clock.now(), 1), organizationId: t.organizationId });

async function expectUntouched(t: Tenant, eventId: string) {
  const stored = await q<{ status: string }>('SELECT status FROM stripe_events WHERE id = $1', [eventId]);
  expect(stored[0]?.status).toBe('ignored');
  const tier = await q<{ tier: string }>('SELECT tier FROM deployments WHERE id = $1', [t.deploymentId]);
  expect(tier[0]!.tier).toBe('sandbox');
  const org = await q<{ stripe_customer_id: string | null }>('SELECT stripe_customer_id FROM organizations WHERE id = $1', [t.organizationId]);
  expect(org[0]!.stripe_customer_id).toBeNull();
  expect(await q('SELECT 1 FROM subscriptions WHERE organization_id = $1', [t.organizationId])).toEqual([]);
}

describe('events of another account or mode', () => {
  it('a connected account’s subscription event gives no tier and binds no customer', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const event = signedEvent('customer.subscription.created', subscriptionFor(t), { account: 'acct_connected' });
    await deliver(event);
    await expectUntouched(t, event.id);
  });

  it('a connected account’s subscription Checkout binds no customer', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const session = { id: unique('cs_test'), object: 'checkout.session', mode: 'subscription', status: 'complete', payment_status: 'paid', customer: unique('cus_elsewhere'), metadata: { organization_id: t.organizationId } };
    const event = signedEvent('checkout.session.completed', session, { account: 'acct_connected' });
    await deliver(event);
    await expectUntouched(t, event.id);
  });

  it('a live-mode event is ignored by an installation with a test key', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const session = { id: unique('cs_live'), object: 'checkout.session', mode: 'subscription', status: 'complete', payment_status: 'paid', customer: unique('cus_live'), metadata: { organization_id: t.organizationId } };
    const event = signedEvent('checkout.session.completed', session, { livemode: true });
    await deliver(event);
    await expectUntouched(t, event.id);
  });
});

describe('a subscription Stripe does not know', () => {
  it('its event gives no tier, whatever its metadata names', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const event = signedEvent('customer.subscription.created', subscriptionFor(t));
    await deliver(event);
    await expectUntouched(t, event.id);
  });

  it('its end still ends what this installation has of it', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus_gone');
    const id = unique('sub');
    await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
    await q(
      `INSERT INTO subscriptions (organization_id, stripe_subscription_id, stripe_customer_id, stripe_price_id, status, created_at, updated_at)
       VALUES ($1, $2, $3, $4, 'active', $5, $5)`,
      [t.organizationId, id, customer, enterprise, h.clock.now()],
    );
    const ended = subscriptionObject({ id, customer, price: enterprise, status: 'canceled', start: h.clock.now(), end: addMonths(h.clock.now(), 1) });
    await deliver(signedEvent('customer.subscription.deleted', ended));
    const row = await q<{ status: string }>('SELECT status FROM subscriptions WHERE stripe_subscription_id = $1', [id]);
    expect(row[0]!.status).toBe('canceled');
  });
});
