import type Stripe from 'stripe';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Kit, START, catalog, startKit, subscribe, types } from './test-kit.js';

let kit: Kit;
beforeEach(async () => {
  kit = await startKit();
});
afterEach(async () => {
  await kit.close();
});

describe('catalog and customers', () => {
  it('creates and retrieves prices and customers; lookup keys are unique; metadata merges', async () => {
    const product = await kit.stripe.products.create({ name: 'Launch' });
    const price = await kit.stripe.prices.create({ product: product.id, unit_amount: 4900, currency: 'usd', recurring: { interval: 'year' }, lookup_key: 'launch' });
    expect(price).toMatchObject({ object: 'price', product: product.id, type: 'recurring', recurring: { interval: 'year' }, lookup_key: 'launch' });
    expect(price.id).toMatch(/^price_/);
    expect((await kit.stripe.prices.retrieve(price.id)).unit_amount).toBe(4900);
    await expect(kit.stripe.prices.create({ product: product.id, unit_amount: 1, currency: 'usd', lookup_key: 'launch' })).rejects.toMatchObject({
      param: 'lookup_key',
    });

    const customer = await kit.stripe.customers.create({ email: 'ada@example.com', metadata: { organization_id: 'org_1', plan: 'x' } });
    await kit.stripe.customers.update(customer.id, { metadata: { plan: '', seats: '3' } });
    expect(await kit.stripe.customers.retrieve(customer.id)).toMatchObject({ email: 'ada@example.com', metadata: { organization_id: 'org_1', seats: '3' } });
  });
});

describe('checkout in payment mode', () => {
  it('sells a one-time price: session, payment, signed checkout.session.completed', async () => {
    const { pack, customer } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({
      mode: 'payment',
      customer: customer.id,
      line_items: [{ price: pack.id, quantity: 2 }],
      success_url: 'https://app.example/ok',
      cancel_url: 'https://app.example/cancel',
      client_reference_id: 'org_1',
      metadata: { pack: 'small' },
      payment_intent_data: { metadata: { organization_id: 'org_1' } },
    });
    expect(session).toMatchObject({
      object: 'checkout.session',
      status: 'open',
      payment_status: 'unpaid',
      mode: 'payment',
      customer: customer.id,
      amount_total: 1000,
      currency: 'usd',
      subscription: null,
      payment_intent: null,
      client_reference_id: 'org_1',
      metadata: { pack: 'small' },
      created: START / 1000,
      expires_at: START / 1000 + 86400,
      url: `${kit.standIn.url}/checkout/${session.id}`,
    });
    expect(session.id).toMatch(/^cs_test_/);

    kit.standIn.completeCheckout(session.id);
    expect(kit.received).toHaveLength(0);
    await kit.standIn.flush();

    expect(types(kit.received)).toEqual(['payment_intent.succeeded', 'checkout.session.completed']);
    const event = kit.received[1]!;
    expect(event).toMatchObject({ object: 'event', api_version: '2026-10-28.endive', livemode: false, pending_webhooks: 1 });
    const paid = event.data.object as Stripe.Checkout.Session;
    expect(paid).toMatchObject({ status: 'complete', payment_status: 'paid', customer: customer.id });
    const charge = [...kit.standIn.state.charges.values()][0]!;
    expect(charge).toMatchObject({ amount: 1000, payment_intent: paid.payment_intent, metadata: { organization_id: 'org_1' } });
    expect(await kit.stripe.checkout.sessions.retrieve(session.id)).toMatchObject({ status: 'complete', payment_intent: paid.payment_intent });
  });

  it('async payment: completed unpaid first, then async_payment_succeeded or _failed', async () => {
    const { pack, customer } = await catalog(kit.stripe);
    const open = () => kit.stripe.checkout.sessions.create({ mode: 'payment', customer: customer.id, line_items: [{ price: pack.id, quantity: 1 }] });
    const good = await open();
    const bad = await open();
    kit.standIn.completeCheckout(good.id, { asyncPayment: true });
    kit.standIn.completeCheckout(bad.id, { asyncPayment: true, fail: true });
    kit.standIn.settleAsyncPayment(good.id);
    kit.standIn.settleAsyncPayment(bad.id);
    await kit.standIn.flush();
    expect(kit.received.map((e) => [e.type, (e.data.object as Stripe.Checkout.Session).payment_status])).toEqual([
      ['checkout.session.completed', 'unpaid'],
      ['checkout.session.completed', 'unpaid'],
      ['payment_intent.succeeded', undefined],
      ['checkout.session.async_payment_succeeded', 'paid'],
      ['checkout.session.async_payment_failed', 'unpaid'],
    ]);
  });

  it('a declined card leaves the session open; an old session expires', async () => {
    const { pack } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: pack.id }] });
    expect(kit.standIn.completeCheckout(session.id, { fail: true }).status).toBe('open');
    kit.advance(86400);
    expect(() => kit.standIn.completeCheckout(session.id)).toThrow(/expired/);
    expect(types(kit.standIn.events())).toEqual(['checkout.session.expired']);
  });

  it('expands line_items on retrieve', async () => {
    const { pack } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: pack.id, quantity: 3 }] });
    const full = await kit.stripe.checkout.sessions.retrieve(session.id, { expand: ['line_items'] });
    expect(full.line_items?.data[0]).toMatchObject({ quantity: 3, amount_total: 1500, price: { id: pack.id } });
  });
});

describe('subscriptions', () => {
  it('checkout creates the subscription, its paid invoice, and the events in Stripe order', async () => {
    const { monthly, customer } = await catalog(kit.stripe);
    const subId = await subscribe(kit, monthly.id, customer.id);
    expect(types(kit.received)).toEqual([
      'customer.subscription.created',
      'invoice.created',
      'invoice.finalized',
      'invoice.paid',
      'invoice.payment_succeeded',
      'checkout.session.completed',
    ]);
    expect(kit.received.map((e) => (e.data.object as { status?: string }).status)).toEqual(['active', 'draft', 'open', 'paid', 'paid', 'complete']);
    const invoice = kit.received[3]!.data.object as Stripe.Invoice;
    expect(invoice.parent?.subscription_details?.subscription).toBe(subId);
    expect(invoice.parent?.subscription_details?.metadata).toEqual({ organization_id: 'org_1' });
    expect(invoice).toMatchObject({ amount_due: 4900, amount_paid: 4900, currency: 'usd', customer: customer.id });
    expect(invoice.hosted_invoice_url).toBe(`${kit.standIn.url}/invoices/${invoice.id}`);

    const sub = await kit.stripe.subscriptions.retrieve(subId);
    const item = sub.items.data[0]!;
    expect(sub).toMatchObject({ status: 'active', customer: customer.id, metadata: { organization_id: 'org_1' }, cancel_at_period_end: false });
    expect(item.price.id).toBe(monthly.id);
    expect(item.current_period_start).toBe(START / 1000);
    // Jan 31 + 1 month clamps to Feb 28.
    expect(item.current_period_end).toBe(Date.UTC(2031, 1, 28, 12) / 1000);
  });

  it('a price change keeps the period and reports previous_attributes', async () => {
    const { monthly, growth, customer } = await catalog(kit.stripe);
    const subId = await subscribe(kit, monthly.id, customer.id);
    const before = await kit.stripe.subscriptions.retrieve(subId);
    const item = before.items.data[0]!;
    const after = await kit.stripe.subscriptions.update(subId, {
      items: [{ id: item.id, price: growth.id }],
      proration_behavior: 'none',
      metadata: { plan: 'growth' },
    });
    expect(after.items.data[0]).toMatchObject({ price: { id: growth.id }, current_period_end: item.current_period_end });
    expect(after.metadata).toEqual({ organization_id: 'org_1', plan: 'growth' });
    await kit.standIn.flush();
    const updated = kit.received.at(-1)!;
    expect(updated.type).toBe('customer.subscription.updated');
    const previous = updated.data.previous_attributes as Partial<Stripe.Subscription>;
    expect(previous.items?.data[0]?.price.id).toBe(monthly.id);
    expect(previous.metadata).toEqual({ organization_id: 'org_1' });
    expect(updated.request?.idempotency_key).toMatch(/^stripe-node-retry-/);
  });

  it('cancel at period end, then the renewal ends it; DELETE ends another now', async () => {
    const { monthly, customer } = await catalog(kit.stripe);
    const endsLater = await subscribe(kit, monthly.id, customer.id);
    const endsNow = await subscribe(kit, monthly.id, customer.id);
    const pending = await kit.stripe.subscriptions.update(endsLater, { cancel_at_period_end: true });
    expect(pending).toMatchObject({ status: 'active', cancel_at_period_end: true, cancel_at: pending.items.data[0]!.current_period_end });
    kit.standIn.advanceSubscription(endsLater);
    expect(await kit.stripe.subscriptions.cancel(endsNow)).toMatchObject({ status: 'canceled', ended_at: START / 1000 });
    await kit.standIn.flush();
    expect(types(kit.received.slice(-3))).toEqual(['customer.subscription.updated', 'customer.subscription.deleted', 'customer.subscription.deleted']);
    expect((await kit.stripe.subscriptions.retrieve(endsLater)).ended_at).toBe(pending.items.data[0]!.current_period_end);
  });

  it('renewal moves the period and pays a new invoice', async () => {
    const { monthly, customer } = await catalog(kit.stripe);
    const subId = await subscribe(kit, monthly.id, customer.id);
    kit.received.length = 0;
    kit.advance(28 * 86400);
    kit.standIn.advanceSubscription(subId);
    await kit.standIn.flush();
    expect(types(kit.received)).toEqual(['customer.subscription.updated', 'invoice.created', 'invoice.finalized', 'invoice.paid', 'invoice.payment_succeeded']);
    const item = (await kit.stripe.subscriptions.retrieve(subId)).items.data[0]!;
    expect([item.current_period_start, item.current_period_end]).toEqual([Date.UTC(2031, 1, 28, 12) / 1000, Date.UTC(2031, 2, 31, 12) / 1000]);
    const invoice = kit.received[3]!.data.object as Stripe.Invoice;
    expect(invoice.lines.data[0]!.period).toEqual({ start: item.current_period_start, end: item.current_period_end });
    expect(invoice.billing_reason).toBe('subscription_cycle');
  });

  it('a failed renewal goes past_due; paying the invoice recovers it', async () => {
    const { monthly, customer } = await catalog(kit.stripe);
    const subId = await subscribe(kit, monthly.id, customer.id);
    kit.received.length = 0;
    kit.standIn.failRenewal(subId);
    await kit.standIn.flush();
    expect(types(kit.received)).toEqual([
      'customer.subscription.updated',
      'invoice.created',
      'invoice.finalized',
      'invoice.payment_failed',
      'customer.subscription.updated',
    ]);
    expect(kit.received[4]!.data.previous_attributes).toEqual({ status: 'active' });
    expect((await kit.stripe.subscriptions.retrieve(subId)).status).toBe('past_due');
    const invoice = kit.received[3]!.data.object as Stripe.Invoice;
    kit.standIn.payInvoice(invoice.id!);
    expect((await kit.stripe.subscriptions.retrieve(subId)).status).toBe('active');
  });

  it('opens a billing portal session for a known customer only', async () => {
    const { customer } = await catalog(kit.stripe);
    const portal = await kit.stripe.billingPortal.sessions.create({ customer: customer.id, return_url: 'https://app.example/billing' });
    expect(portal).toMatchObject({ object: 'billing_portal.session', customer: customer.id, url: `${kit.standIn.url}/portal/${portal.id}` });
    expect(portal.id).toMatch(/^bps_/);
    await expect(kit.stripe.billingPortal.sessions.create({ customer: 'cus_nope' })).rejects.toMatchObject({
      statusCode: 400,
      code: 'resource_missing',
      param: 'customer',
    });
  });
});

describe('refunds', () => {
  async function paidCharge() {
    const { pack, customer } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({
      mode: 'payment',
      customer: customer.id,
      line_items: [{ price: pack.id, quantity: 2 }],
      payment_intent_data: { metadata: { organization_id: 'org_1' } },
    });
    return kit.standIn.completeCheckout(session.id).payment_intent!;
  }

  it('refunds part, then the rest by default; refuses more than is left', async () => {
    const intent = await paidCharge();
    const part = await kit.stripe.refunds.create({ payment_intent: intent, amount: 300 });
    expect(part).toMatchObject({ object: 'refund', amount: 300, payment_intent: intent, status: 'succeeded' });
    await expect(kit.stripe.refunds.create({ payment_intent: intent, amount: 800 })).rejects.toMatchObject({ statusCode: 400, param: 'amount' });
    const rest = await kit.stripe.refunds.create({ charge: part.charge as string });
    expect(rest.amount).toBe(700);
    await kit.standIn.flush();
    const refunded = kit.received.filter((e) => e.type === 'charge.refunded').map((e) => e.data.object as Stripe.Charge);
    expect(refunded.map((c) => [c.amount_refunded, c.refunded])).toEqual([
      [300, false],
      [1000, true],
    ]);
    expect(refunded[1]).toMatchObject({ object: 'charge', amount: 1000, payment_intent: intent, currency: 'usd', metadata: { organization_id: 'org_1' } });
  });
});

describe('meter events', () => {
  it('stores events, counts a repeated identifier once, and checks customer and timestamp', async () => {
    const { customer } = await catalog(kit.stripe);
    const send = (identifier: string | undefined, timestamp?: number) =>
      kit.stripe.billing.meterEvents.create({
        event_name: 'credits_used',
        payload: { stripe_customer_id: customer.id, value: '25' },
        ...(identifier ? { identifier } : {}),
        ...(timestamp ? { timestamp } : {}),
      });
    const first = await send('usage-1');
    expect(first).toMatchObject({ object: 'billing.meter_event', identifier: 'usage-1', payload: { value: '25' }, timestamp: START / 1000, livemode: false });
    expect(await send('usage-1')).toEqual(first);
    const generated = await send(undefined);
    expect(generated.identifier).not.toBe('usage-1');
    expect(kit.standIn.meterEvents().map((e) => e.identifier)).toEqual(['usage-1', generated.identifier]);

    await expect(send('old', START / 1000 - 36 * 86400)).rejects.toMatchObject({ statusCode: 400, param: 'timestamp' });
    await expect(
      kit.stripe.billing.meterEvents.create({ event_name: 'credits_used', payload: { stripe_customer_id: 'cus_nope', value: '1' } }),
    ).rejects.toMatchObject({ statusCode: 400, param: 'payload[stripe_customer_id]' });
  });
});
