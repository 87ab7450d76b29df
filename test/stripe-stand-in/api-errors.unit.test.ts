import Stripe from 'stripe';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Kit, catalog, startKit } from './test-kit.js';

let kit: Kit;
beforeEach(async () => {
  kit = await startKit();
});
afterEach(async () => {
  await kit.close();
});

describe('errors the SDK turns into its typed errors', () => {
  it('401 for a wrong or missing key', async () => {
    const wrong = new Stripe('sk_test_wrong', { host: '127.0.0.1', port: kit.standIn.port, protocol: 'http', maxNetworkRetries: 0 });
    const error = await wrong.customers.create({ email: 'a@example.com' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Stripe.errors.StripeAuthenticationError);
    expect((error as Stripe.errors.StripeError).message).toMatch(/^Invalid API Key provided/);
    const bare = await fetch(`${kit.standIn.url}/v1/customers`, { method: 'POST' });
    expect(bare.status).toBe(401);
    expect(kit.standIn.state.customers.size).toBe(0);
  });

  it('404 resource_missing for an unknown id in the path, 400 naming the parameter otherwise', async () => {
    const missing = await kit.stripe.prices.retrieve('price_nope').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing', param: 'id', message: "No such price: 'price_nope'" });
    await expect(kit.stripe.subscriptions.retrieve('sub_nope')).rejects.toMatchObject({ statusCode: 404, code: 'resource_missing' });
    await expect(kit.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: 'price_nope', quantity: 1 }] })).rejects.toMatchObject({
      statusCode: 400,
      code: 'resource_missing',
      param: 'line_items[0][price]',
    });
  });

  it('400 when the price does not fit the mode, or a parameter is not modelled', async () => {
    const { monthly, pack } = await catalog(kit.stripe);
    await expect(kit.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: monthly.id }] })).rejects.toMatchObject({
      statusCode: 400,
      message: expect.stringMatching(/recurring price/),
    });
    await expect(kit.stripe.checkout.sessions.create({ mode: 'subscription', line_items: [{ price: pack.id }] })).rejects.toMatchObject({ statusCode: 400 });
    await expect(
      kit.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: pack.id }], allow_promotion_codes: true }),
    ).rejects.toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'allow_promotion_codes' });
    const unknownUrl = await fetch(`${kit.standIn.url}/v1/coupons`, { headers: { authorization: `Bearer ${kit.standIn.secretKey}` } });
    expect(unknownUrl.status).toBe(404);
  });
});

describe('idempotency keys', () => {
  it('the same key answers the stored response once more, with no second effect', async () => {
    const first = await kit.stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: 'k-1' });
    const again = await kit.stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: 'k-1' });
    expect(again.id).toBe(first.id);
    expect(again.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(kit.standIn.state.customers.size).toBe(1);
    await expect(kit.stripe.customers.create({ email: 'b@example.com' }, { idempotencyKey: 'k-1' })).rejects.toBeInstanceOf(
      Stripe.errors.StripeIdempotencyError,
    );
    // Without a key of its own the SDK sends a fresh one per call: two calls, two customers.
    await kit.stripe.customers.create({ email: 'a@example.com' });
    expect(kit.standIn.state.customers.size).toBe(2);
  });

  it('a replayed update emits no second event', async () => {
    const { customer, monthly, growth } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({ mode: 'subscription', customer: customer.id, line_items: [{ price: monthly.id }] });
    const subId = kit.standIn.completeCheckout(session.id).subscription!;
    const itemId = kit.standIn.state.subscriptions.get(subId)!.items.data[0]!.id;
    const change = () => kit.stripe.subscriptions.update(subId, { items: [{ id: itemId, price: growth.id }] }, { idempotencyKey: 'upgrade-1' });
    await change();
    await change();
    expect(kit.standIn.events('customer.subscription.updated')).toHaveLength(1);
  });
});

describe('failNext', () => {
  it('the next matching requests answer an api_error and change nothing', async () => {
    kit.standIn.failNext(1);
    const error = await kit.stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: 'k-2' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(error).toMatchObject({ statusCode: 500, type: 'StripeAPIError' });
    expect(kit.standIn.state.customers.size).toBe(0);
    // A retry with the same key runs for real, since the failure stored nothing.
    await kit.stripe.customers.create({ email: 'a@example.com' }, { idempotencyKey: 'k-2' });
    expect(kit.standIn.state.customers.size).toBe(1);

    kit.standIn.failNext(1, { status: 503, path: /^\/v1\/billing_portal\// });
    const { id } = await kit.stripe.customers.create({});
    await expect(kit.stripe.billingPortal.sessions.create({ customer: id })).rejects.toMatchObject({ statusCode: 503 });
    await expect(kit.stripe.billingPortal.sessions.create({ customer: id })).resolves.toMatchObject({ customer: id });
  });
});

describe('control routes and pages', () => {
  const post = (path: string, body: object) =>
    fetch(`${kit.standIn.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('move the clock, inject faults and complete a checkout over HTTP', async () => {
    const clock = (await (await post('/_stand-in/clock', { advance_seconds: 60 })).json()) as { unix: number };
    expect(clock.unix).toBe(Math.floor(kit.nowMs() / 1000) + 60);
    expect((await post('/_stand-in/faults', { count: 1, status: 502 })).status).toBe(200);
    await expect(kit.stripe.customers.create({})).rejects.toMatchObject({ statusCode: 502 });

    const { pack } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({
      mode: 'payment',
      line_items: [{ price: pack.id }],
      success_url: 'https://app.example/ok?session={CHECKOUT_SESSION_ID}',
    });
    const pageHtml = await (await fetch(session.url!)).text();
    expect(pageHtml).toContain('Small pack');
    expect(pageHtml).toContain(`action="/_stand-in/checkout/${session.id}/complete"`);
    const pay = await fetch(`${kit.standIn.url}/_stand-in/checkout/${session.id}/complete`, {
      method: 'POST',
      headers: { accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
      body: '',
      redirect: 'manual',
    });
    expect(pay.status).toBe(303);
    expect(pay.headers.get('location')).toBe(`https://app.example/ok?session=${session.id}`);
    expect((await post(`/_stand-in/checkout/${session.id}/complete`, {})).status).toBe(400);
  });

  it('the portal page lists the customer’s subscriptions with cancel buttons', async () => {
    const { customer, monthly } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({ mode: 'subscription', customer: customer.id, line_items: [{ price: monthly.id }] });
    const subId = kit.standIn.completeCheckout(session.id).subscription!;
    const portal = await kit.stripe.billingPortal.sessions.create({ customer: customer.id });
    const html = await (await fetch(portal.url)).text();
    expect(html).toContain(`/_stand-in/subscriptions/${subId}/cancel`);
    const cancel = await fetch(`${kit.standIn.url}/_stand-in/subscriptions/${subId}/cancel`, {
      method: 'POST',
      headers: { accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
      body: `at_period_end=true&portal=${portal.id}`,
      redirect: 'manual',
    });
    expect(cancel.headers.get('location')).toBe(`/portal/${portal.id}`);
    expect(kit.standIn.state.subscriptions.get(subId)).toMatchObject({ status: 'active', cancel_at_period_end: true });
  });
});
