import Stripe from 'stripe';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { startReceiver } from '../receiver.js';
import { startStripeStandIn } from './server.js';
import { type Kit, START, catalog, startKit, types } from './test-kit.js';

let kit: Kit | undefined;
afterEach(async () => {
  await kit?.close();
  kit = undefined;
});

/** Three checkout.session.completed events (bank debits, so no payment_intent.succeeded yet), queued and not yet delivered. */
async function threeEvents(k: Kit): Promise<string[]> {
  const { pack } = await catalog(k.stripe);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const session = await k.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: pack.id }], client_reference_id: `n${i}` });
    k.standIn.completeCheckout(session.id, { asyncPayment: true });
    ids.push(k.standIn.events().at(-1)!.id);
  }
  return ids;
}

describe('manual delivery', () => {
  it('signs like Stripe with a generated whsec_ secret; flush delivers the queue in order', async () => {
    kit = await startKit();
    expect(kit.standIn.webhookSecret).toMatch(/^whsec_/);
    const ids = await threeEvents(kit);
    expect(kit.standIn.queue().map((e) => e.id)).toEqual(ids);
    const results = await kit.standIn.flush();
    expect(results.map((r) => [r.eventId, r.status, r.signedAt])).toEqual(ids.map((id) => [id, 200, START / 1000]));
    expect(kit.received.map((e) => e.id)).toEqual(ids);
    expect(kit.standIn.queue()).toEqual([]);
  });

  it('reverse order, duplicates and concurrent duplicates', async () => {
    kit = await startKit();
    const ids = await threeEvents(kit);
    await kit.standIn.flush({ order: 'reverse' });
    expect(kit.received.map((e) => e.id)).toEqual([...ids].reverse());
    await kit.standIn.deliverEvent(ids[0]!, { times: 2 });
    const together = await kit.standIn.deliverEvent(ids[1]!, { times: 3, concurrently: true });
    expect(together.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(kit.received.slice(3).map((e) => e.id)).toEqual([ids[0], ids[0], ids[1], ids[1], ids[1]]);
  });

  it('a refused delivery stays queued for the next flush', async () => {
    kit = await startKit();
    const ids = await threeEvents(kit);
    kit.respond(500);
    expect((await kit.standIn.flush()).map((r) => r.ok)).toEqual([false, false, false]);
    expect(kit.standIn.queue()).toHaveLength(3);
    kit.respond(200);
    await kit.standIn.deliverEvent(ids[1]!);
    expect(kit.standIn.queue().map((e) => e.id)).toEqual([ids[0], ids[2]]);
    await kit.standIn.flush();
    expect(kit.standIn.queue()).toEqual([]);
  });

  it('a delivery signed 10 minutes ago is rejected by constructEvent (tolerance 300 s)', async () => {
    kit = await startKit();
    const [id] = await threeEvents(kit);
    const stale = await kit.standIn.resend(id!, { signedAt: new Date(kit.nowMs() - 10 * 60_000) });
    expect(stale).toMatchObject({ status: 400, ok: false, signedAt: START / 1000 - 600 });
    expect(kit.rejected).toEqual([expect.stringMatching(/Timestamp outside the tolerance zone/)]);
    // A late delivery signed now still verifies: signatures date the delivery, not the event.
    kit.advance(3600);
    expect((await kit.standIn.resend(id!)).status).toBe(200);
  });
});

describe('auto delivery', () => {
  it('sends each event as it happens and retries a refusal with backoff', async () => {
    kit = await startKit({ delivery: 'auto', retryDelaysMs: [5, 5, 5] });
    kit.respond(503);
    const { pack } = await catalog(kit.stripe);
    const session = await kit.stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: pack.id }] });
    kit.standIn.completeCheckout(session.id, { asyncPayment: true });
    await kit.standIn.idle();
    expect(kit.standIn.deliveries().map((d) => d.status)).toEqual([503]);
    kit.respond(200);
    await vi.waitFor(() => expect(kit!.standIn.queue()).toEqual([]), { timeout: 15_000, interval: 5 });
    expect(types(kit.received)).toEqual(['checkout.session.completed', 'checkout.session.completed']);
    expect(kit.standIn.deliveries().map((d) => d.status)).toEqual([503, 200]);
  });

  it('POSTs to webhookUrl with Stripe’s headers', async () => {
    const receiver = await startReceiver();
    const standIn = await startStripeStandIn({ webhookUrl: receiver.url, delivery: 'auto', now: () => new Date(START), webhookSecret: 'whsec_fixed' });
    try {
      standIn.createCustomer({ email: 'a@example.com' });
      const price = standIn.createPrice({ productName: 'Pack', unitAmount: 500 });
      const stripe = new Stripe(standIn.secretKey, { host: '127.0.0.1', port: standIn.port, protocol: 'http', maxNetworkRetries: 0 });
      const session = await stripe.checkout.sessions.create({ mode: 'payment', line_items: [{ price: price.id }] });
      standIn.completeCheckout(session.id, { asyncPayment: true });
      await standIn.idle();
      const [request] = receiver.received;
      expect(request?.headers['content-type']).toBe('application/json; charset=utf-8');
      const event = Stripe.webhooks.constructEvent(request!.body, request!.headers['stripe-signature'] as string, 'whsec_fixed', 300, undefined, START);
      expect(event.type).toBe('checkout.session.completed');
    } finally {
      await standIn.close();
      await receiver.close();
    }
  });
});
