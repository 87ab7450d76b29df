import Stripe from 'stripe';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Kit, catalog, startKit, types } from './test-kit.js';

/** Saved cards, off-session PaymentIntents and declines, driven through the official SDK as an auto top-up would. */
let kit: Kit;
beforeEach(async () => {
  kit = await startKit();
});
afterEach(async () => {
  await kit.close();
});

/** What an off-session top-up sends: the customer's saved card, confirmed at once. */
function chargeSaved(customer: string, paymentMethod: string, idempotencyKey?: string) {
  return kit.stripe.paymentIntents.create(
    {
      amount: 500,
      currency: 'usd',
      customer,
      payment_method: paymentMethod,
      off_session: true,
      confirm: true,
      description: 'auto top-up',
      metadata: { organization_id: 'org_1' },
    },
    idempotencyKey ? { idempotencyKey } : {},
  );
}

async function defaultCard(customer: string): Promise<string | null> {
  const read = (await kit.stripe.customers.retrieve(customer)) as Stripe.Customer;
  return (read.invoice_settings.default_payment_method as string | null) ?? null;
}

describe('saving a card', () => {
  it('setup-mode Checkout saves a card (not the default: Stripe leaves that to the integration) and completes with no payment', async () => {
    const { customer } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({
      mode: 'setup',
      customer: customer.id,
      currency: 'usd',
      success_url: 'https://app.example/saved',
      metadata: { organization_id: 'org_1' },
      setup_intent_data: { metadata: { purpose: 'auto_top_up' } },
    });
    expect(session).toMatchObject({ mode: 'setup', payment_status: 'no_payment_required', amount_total: null, currency: 'usd', setup_intent: null });
    expect(await defaultCard(customer.id)).toBeNull();

    kit.standIn.completeCheckout(session.id);
    await kit.standIn.flush();
    expect(types(kit.received)).toEqual(['checkout.session.completed']);
    const done = kit.received[0]!.data.object as Stripe.Checkout.Session;
    expect(done).toMatchObject({ mode: 'setup', status: 'complete', payment_status: 'no_payment_required', payment_intent: null, customer: customer.id });
    expect(done.setup_intent).toMatch(/^seti_/);

    const setupIntent = await kit.stripe.setupIntents.retrieve(done.setup_intent as string);
    expect(setupIntent).toMatchObject({ status: 'succeeded', customer: customer.id, usage: 'off_session', metadata: { purpose: 'auto_top_up' } });
    const card = await kit.stripe.paymentMethods.retrieve(setupIntent.payment_method as string);
    expect(card).toMatchObject({ object: 'payment_method', type: 'card', customer: customer.id, livemode: false, card: { brand: 'visa', last4: '4242' } });
    expect(await defaultCard(customer.id)).toBeNull();
    const listed = await kit.stripe.customers.listPaymentMethods(customer.id, { type: 'card', limit: 1 });
    expect(listed.data.map((pm) => pm.id)).toEqual([card.id]);
  });

  it('setup mode refuses line items; without a customer it creates one', async () => {
    const { pack } = await catalog(kit.stripe);
    await expect(kit.stripe.checkout.sessions.create({ mode: 'setup', line_items: [{ price: pack.id }] })).rejects.toMatchObject({
      statusCode: 400,
      param: 'line_items',
    });
    const session = await kit.stripe.checkout.sessions.create({ mode: 'setup', customer_email: 'new@example.com' });
    const done = kit.standIn.completeCheckout(session.id, { card: 'card_declined' });
    expect(done.customer).toMatch(/^cus_/);
    const card = [...kit.standIn.state.paymentMethods.values()].find((pm) => pm.customer === done.customer)!;
    expect(card.card.last4).toBe('0341');
    expect(kit.standIn.state.customers.get(done.customer!)).toMatchObject({ email: 'new@example.com', invoice_settings: { default_payment_method: null } });
  });

  it('payment mode with setup_future_usage saves the paying card; payment_intent.succeeded comes before completed', async () => {
    const { pack } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({
      mode: 'payment',
      customer_email: 'ada@example.com',
      line_items: [{ price: pack.id }],
      payment_intent_data: { setup_future_usage: 'off_session', metadata: { organization_id: 'org_1' } },
    });
    kit.standIn.completeCheckout(session.id);
    await kit.standIn.flush();
    expect(types(kit.received)).toEqual(['payment_intent.succeeded', 'checkout.session.completed']);
    const intent = kit.received[0]!.data.object as Stripe.PaymentIntent;
    const done = kit.received[1]!.data.object as Stripe.Checkout.Session;
    expect(done.customer).toMatch(/^cus_/);
    expect(intent).toMatchObject({ id: done.payment_intent, status: 'succeeded', customer: done.customer, setup_future_usage: 'off_session' });
    const card = await kit.stripe.paymentMethods.retrieve(intent.payment_method as string);
    expect(card.customer).toBe(done.customer);
    expect(await defaultCard(done.customer as string)).toBeNull();

    // Without setup_future_usage the card paid once and belongs to nobody.
    const once = await kit.stripe.checkout.sessions.create({ mode: 'payment', customer: done.customer as string, line_items: [{ price: pack.id }] });
    const onceIntent = kit.standIn.state.paymentIntents.get(kit.standIn.completeCheckout(once.id).payment_intent!)!;
    expect(kit.standIn.state.paymentMethods.get(onceIntent.payment_method!)?.customer).toBeNull();
    await expect(chargeSaved(done.customer as string, onceIntent.payment_method!)).rejects.toMatchObject({ statusCode: 400, param: 'payment_method' });
  });

  it('sets the default through customers.update only to a card of that customer', async () => {
    const { customer } = await catalog(kit.stripe);
    const other = kit.standIn.createCustomer({ email: 'other@example.com' });
    const first = kit.standIn.savePaymentMethod(customer.id);
    const second = kit.standIn.savePaymentMethod(customer.id, { makeDefault: false });
    const theirs = kit.standIn.savePaymentMethod(other.id);
    expect(await defaultCard(customer.id)).toBe(first.id);
    const updated = await kit.stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: second.id } });
    expect(updated.invoice_settings.default_payment_method).toBe(second.id);
    for (const id of [theirs.id, 'pm_nope']) {
      await expect(kit.stripe.customers.update(customer.id, { invoice_settings: { default_payment_method: id } })).rejects.toMatchObject({
        statusCode: 400,
        code: 'resource_missing',
        param: 'invoice_settings[default_payment_method]',
      });
    }
    expect((await kit.stripe.customers.listPaymentMethods(customer.id, { type: 'card' })).data.map((pm) => pm.id)).toEqual([second.id, first.id]);
    await expect(kit.stripe.paymentMethods.retrieve('pm_nope')).rejects.toMatchObject({ statusCode: 404, code: 'resource_missing' });
  });
});

describe('off-session PaymentIntents', () => {
  it('a good card pays: succeeded, a charge with the metadata, payment_intent.succeeded', async () => {
    const { customer } = await catalog(kit.stripe);
    const card = kit.standIn.savePaymentMethod(customer.id, { makeDefault: true });
    const intent = await chargeSaved(customer.id, card.id, 'top-up-1');
    expect(intent).toMatchObject({ object: 'payment_intent', status: 'succeeded', amount: 500, amount_received: 500, payment_method: card.id, customer: customer.id });
    expect(await kit.stripe.paymentIntents.retrieve(intent.id)).toMatchObject({ status: 'succeeded', latest_charge: intent.latest_charge });
    expect(kit.standIn.state.charges.get(intent.latest_charge as string)).toMatchObject({
      status: 'succeeded',
      paid: true,
      payment_method: card.id,
      metadata: { organization_id: 'org_1' },
    });
    await kit.standIn.flush();
    expect(types(kit.received)).toEqual(['payment_intent.succeeded']);
    expect(kit.received[0]!.request).toEqual({ id: expect.stringMatching(/^req_/), idempotency_key: 'top-up-1' });
    // The same key again: the stored answer, no second payment.
    expect((await chargeSaved(customer.id, card.id, 'top-up-1')).id).toBe(intent.id);
    expect(kit.standIn.state.paymentIntents.size).toBe(1);
  });

  it('a declining card: StripeCardError with the PaymentIntent, payment_failed once, and a replay answers the same', async () => {
    const { customer } = await catalog(kit.stripe);
    const card = kit.standIn.savePaymentMethod(customer.id, { behaviour: 'card_declined' });
    const error = await chargeSaved(customer.id, card.id, 'top-up-2').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Stripe.errors.StripeCardError);
    const cardError = error as Stripe.errors.StripeCardError;
    expect(cardError).toMatchObject({ statusCode: 402, type: 'StripeCardError', code: 'card_declined', decline_code: 'generic_decline', message: 'Your card was declined.' });
    const intentId = cardError.payment_intent?.id;
    expect(intentId).toMatch(/^pi_/);
    expect((cardError.raw as { payment_intent?: { id: string } }).payment_intent?.id).toBe(intentId);
    expect(cardError.payment_method?.id).toBe(card.id);
    expect(cardError.payment_intent).toMatchObject({
      status: 'requires_payment_method',
      payment_method: null,
      last_payment_error: { type: 'card_error', code: 'card_declined', decline_code: 'generic_decline', payment_method: { id: card.id } },
    });
    expect(kit.standIn.state.charges.get(cardError.charge!)).toMatchObject({ status: 'failed', failure_code: 'card_declined', paid: false });

    const again = await chargeSaved(customer.id, card.id, 'top-up-2').catch((e: unknown) => e);
    expect(again).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect((again as Stripe.errors.StripeCardError).payment_intent?.id).toBe(intentId);
    expect((again as Stripe.errors.StripeCardError).headers?.['idempotent-replayed']).toBe('true');
    expect(kit.standIn.state.paymentIntents.size).toBe(1);

    await kit.standIn.flush();
    expect(types(kit.received)).toEqual(['payment_intent.payment_failed']);
    const failed = kit.received[0]!.data.object as Stripe.PaymentIntent;
    expect(failed).toMatchObject({ id: intentId, status: 'requires_payment_method', metadata: { organization_id: 'org_1' } });
    expect(failed.last_payment_error).toMatchObject({ code: 'card_declined', message: 'Your card was declined.' });

    // The card works again: a new key, a new PaymentIntent that succeeds.
    kit.standIn.setCardBehaviour(card.id, 'ok');
    expect((await chargeSaved(customer.id, card.id, 'top-up-3')).status).toBe('succeeded');
  });

  it('a card that needs authentication fails off-session with authentication_required', async () => {
    const { customer } = await catalog(kit.stripe);
    const card = kit.standIn.savePaymentMethod(customer.id, { behaviour: 'authentication_required' });
    const error = (await chargeSaved(customer.id, card.id).catch((e: unknown) => e)) as Stripe.errors.StripeCardError;
    expect(error).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(error).toMatchObject({ code: 'authentication_required', decline_code: 'authentication_required' });
    expect(error.payment_intent).toMatchObject({ status: 'requires_payment_method', last_payment_error: { code: 'authentication_required' } });
    expect(types(kit.standIn.events())).toEqual(['payment_intent.payment_failed']);
  });

  it('refuses a card of another customer, a missing card on confirm, and unmodelled parameters', async () => {
    const { customer } = await catalog(kit.stripe);
    const other = kit.standIn.createCustomer({ email: 'other@example.com' });
    const theirs = kit.standIn.savePaymentMethod(other.id);
    await expect(chargeSaved(customer.id, theirs.id)).rejects.toMatchObject({ statusCode: 400, type: 'StripeInvalidRequestError', param: 'payment_method' });
    await expect(chargeSaved(customer.id, 'pm_nope')).rejects.toMatchObject({ statusCode: 400, code: 'resource_missing', param: 'payment_method' });
    await expect(kit.stripe.paymentIntents.create({ amount: 500, currency: 'usd', customer: customer.id, confirm: true })).rejects.toMatchObject({
      statusCode: 400,
      param: 'payment_method',
    });
    await expect(
      kit.stripe.paymentIntents.create({ amount: 500, currency: 'usd', customer: other.id, payment_method: theirs.id, confirm: true, capture_method: 'manual' }),
    ).rejects.toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'capture_method' });
    expect(kit.standIn.state.paymentIntents.size).toBe(0);
    expect(kit.standIn.events()).toEqual([]);
    // Without confirm it waits, and nothing is emitted.
    const waiting = await kit.stripe.paymentIntents.create({ amount: 500, currency: 'usd', customer: other.id, payment_method: theirs.id });
    expect(waiting).toMatchObject({ status: 'requires_confirmation', latest_charge: null });
    await expect(kit.stripe.paymentIntents.retrieve('pi_nope')).rejects.toMatchObject({ statusCode: 404 });
  });
});

describe('controls over HTTP and the hosted page', () => {
  const post = (path: string, body: object) =>
    fetch(`${kit.standIn.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('save a card, change its behaviour, and save one on the setup page', async () => {
    const { customer } = await catalog(kit.stripe);
    const saved = (await (await post(`/_stand-in/customers/${customer.id}/payment_methods`, { behaviour: 'card_declined', make_default: true })).json()) as {
      id: string;
    };
    expect(await defaultCard(customer.id)).toBe(saved.id);
    expect((await post(`/_stand-in/payment_methods/${saved.id}/behaviour`, { behaviour: 'nope' })).status).toBe(400);
    expect((await post(`/_stand-in/payment_methods/${saved.id}/behaviour`, { behaviour: 'ok' })).status).toBe(200);
    expect((await chargeSaved(customer.id, saved.id)).status).toBe('succeeded');

    const session = await kit.stripe.checkout.sessions.create({ mode: 'setup', customer: customer.id, success_url: 'https://app.example/saved' });
    const html = await (await fetch(session.url!)).text();
    expect(html).toContain('Save card');
    const save = await fetch(`${kit.standIn.url}/_stand-in/checkout/${session.id}/complete`, {
      method: 'POST',
      headers: { accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
      body: 'card=authentication_required',
      redirect: 'manual',
    });
    expect(save.headers.get('location')).toBe('https://app.example/saved');
    const setupIntent = kit.standIn.state.setupIntents.get(kit.standIn.state.checkoutSessions.get(session.id)!.setup_intent!)!;
    expect(kit.standIn.state.cardBehaviours.get(setupIntent.payment_method)?.behaviour).toBe('authentication_required');
    // The customer already had a default: the new card does not replace it.
    expect(await defaultCard(customer.id)).toBe(saved.id);
  });
});
