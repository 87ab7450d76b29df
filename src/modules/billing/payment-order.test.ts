import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createPassesHarness, dbKind, type Harness, type Tenant, unique } from '../../../test/harness.js';
import { checkoutSessionObject, deliver, signature, stripeConfig, stripeEvent } from '../../../test/stripe-events-fixtures.js';
import type { Database } from '../../db/client.js';
import { recordPackCheckout } from '../credits/purchases.js';
import { receiveStripeEvent } from './stripe-events.js';

/**
 * A pack's grant, refunds and disputes in any order and at the same time (docs/billing.md, "Disputes"):
 * what arrived before the grant is settled in the grant's own transaction, so the credits of money
 * that went back are never spendable; and a dispute read while its grant commits is not lost.
 */
let h: Harness;
const f = creditFixtures(() => h);
beforeAll(async () => {
  h = await createPassesHarness(stripeConfig, '2026-03-01T10:00:00.000Z');
});
afterAll(async () => {
  await h?.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const eventStatus = async (id: string) => (await q<{ status: string }>('SELECT status FROM stripe_events WHERE id = $1', [id]))[0]?.status;

/** A tenant with a stored pack sale of 1,000 credits for 500 cents, and its completion event (not delivered). */
async function soldPack(): Promise<{ t: Tenant; paymentIntent: string; completed: { id: string; body: string } }> {
  const t = await f.tenantWith(0);
  const customer = unique('cus');
  await q('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
  const sessionId = unique('cs_test');
  const paymentIntent = unique('pi');
  await recordPackCheckout(
    h.deps.db,
    { organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, checkoutSessionId: sessionId, priceId: 'price_pack_small', amountTotal: 500, currency: 'usd' },
    h.clock.now(),
  );
  const session = checkoutSessionObject({ id: sessionId, customer, organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, paymentIntent });
  return { t, paymentIntent, completed: stripeEvent('checkout.session.completed', session, h.clock.now()) };
}

const refundOf = (paymentIntent: string, amountRefunded: number) =>
  stripeEvent(
    'charge.refunded',
    { id: unique('ch'), object: 'charge', payment_intent: paymentIntent, amount: 500, amount_refunded: amountRefunded, metadata: { creditgate_pack: 'small' } },
    h.clock.now(),
  );
const withdrawalOf = (paymentIntent: string) =>
  stripeEvent(
    'charge.dispute.funds_withdrawn',
    { id: unique('dp'), object: 'dispute', amount: 500, currency: 'usd', charge: unique('ch'), payment_intent: paymentIntent, status: 'needs_response' },
    h.clock.now(),
  );

describe('what arrives before the grant', () => {
  it('a refund is settled in the grant’s transaction: the refunded credits are never spendable', async () => {
    const { t, paymentIntent, completed } = await soldPack();
    const refund = refundOf(paymentIntent, 500);
    expect((await deliver(h, refund)).statusCode).toBe(200);
    // The pack is not granted yet: the refund waits, pending, on the worker's backoff.
    expect(await eventStatus(refund.id)).toBe('pending');

    expect((await deliver(h, completed)).statusCode).toBe(200);
    // No worker pass: the grant itself took the refunded share back.
    expect(await eventStatus(refund.id)).toBe('processed');
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    const sale = await q<{ refund_share: number; credits_taken_back: number }>('SELECT refund_share, credits_taken_back FROM credit_purchases WHERE stripe_payment_intent_id = $1', [
      paymentIntent,
    ]);
    expect(sale).toEqual([{ refund_share: 1000, credits_taken_back: 1000 }]);
    await f.expectLedgerConsistent(t);
  });

  it('two partial refunds and a chargeback, delivered out of order, settle once each at the grant', async () => {
    const { t, paymentIntent, completed } = await soldPack();
    const later = refundOf(paymentIntent, 200);
    const earlier = refundOf(paymentIntent, 100);
    const withdrawn = withdrawalOf(paymentIntent);
    for (const e of [later, withdrawn, earlier]) expect((await deliver(h, e)).statusCode).toBe(200);
    expect(await eventStatus(withdrawn.id)).toBe('ignored');

    expect((await deliver(h, completed)).statusCode).toBe(200);
    for (const e of [later, earlier, withdrawn]) expect(await eventStatus(e.id)).toBe('processed');
    // 200 of 500 cents refunded → 400 credits; the dispute covers the other 600.
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    const sale = await q<{ refund_share: number; dispute_share: number }>('SELECT refund_share, dispute_share FROM credit_purchases WHERE stripe_payment_intent_id = $1', [paymentIntent]);
    expect(sale).toEqual([{ refund_share: 400, dispute_share: 600 }]);
    await f.expectLedgerConsistent(t);
  });
});

/**
 * `deps` whose transactions stop before they record an event's outcome (`UPDATE stripe_events SET
 * status`) until `open()`: an instance slow to commit what it read.
 */
function slowToCommit(db: Database) {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  let arrived!: () => void;
  const reached = new Promise<void>((resolve) => {
    arrived = resolve;
  });
  const slowTx = <T extends object>(tx: T): T =>
    new Proxy(tx, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop !== 'query' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
        return async (sql: string, ...rest: unknown[]) => {
          if (sql.trimStart().startsWith('UPDATE stripe_events SET status')) {
            arrived();
            await gate;
          }
          return value.call(target, sql, ...rest);
        };
      },
    });
  const slow = new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'transaction') {
        return (fn: (tx: object) => Promise<unknown>, options?: unknown) =>
          (target.transaction as (fn: (tx: object) => Promise<unknown>, o?: unknown) => Promise<unknown>).call(target, (tx) => fn(slowTx(tx)), options);
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { db: slow, open, reached };
}

// Two connections at once: PGlite has one, so this race exists on PostgreSQL only.
describe.runIf(dbKind === 'postgres')('a chargeback handled while its grant commits (PostgreSQL)', () => {
  it('waits for the grant, or is settled by it: the disputed credits are taken back', async () => {
    const { t, paymentIntent, completed } = await soldPack();
    const withdrawn = withdrawalOf(paymentIntent);
    // Instance B reads the chargeback (no granted purchase yet) and is slow to commit that.
    const slow = slowToCommit(h.deps.db);
    const b = receiveStripeEvent({ ...h.deps, db: slow.db }, withdrawn.body, signature(withdrawn.body, h.clock.now()));
    await slow.reached;
    // Instance A receives the completion meanwhile.
    let aDone = false;
    const a = receiveStripeEvent(h.deps, completed.body, signature(completed.body, h.clock.now())).finally(() => {
      aDone = true;
    });
    // A waits for B's hold on the payment (or, without one, grants at once).
    await vi.waitFor(
      async () => {
        if (aDone) return;
        const waiting = await q(
          "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
          [],
        );
        expect(waiting.length).toBeGreaterThan(0);
      },
      { timeout: 15_000, interval: 20 },
    );
    slow.open();
    await Promise.all([a, b]);

    expect(await eventStatus(completed.id)).toBe('processed');
    expect(await eventStatus(withdrawn.id)).toBe('processed');
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    await f.expectLedgerConsistent(t);
  });
});
