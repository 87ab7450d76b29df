import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { adminHeaders, createHarness, type Harness, json, serviceHeaders, type Tenant, unique } from '../../../test/harness.js';
import { checkoutSessionObject, deliver, stripeConfig, stripeEvent } from '../../../test/stripe-events-fixtures.js';
import { DAY, HOUR } from '../../clock.js';
import { type Lot, settleLots } from './grants.js';
import { recordPackCheckout } from './purchases.js';

/**
 * Taking purchased credits away is not spending them (docs/metering.md, Expiring grants): a pack's
 * credits taken back after a refund or a chargeback, and an operator's negative adjustment, take the
 * credits that never expire first, and only what those cannot cover comes out of the expiring grants.
 * Counted as spending, the take-back of a refunded pack took an open promotion's credits and left the
 * pack's, which never expire: after the promotion's expiry the tenant kept credits it never paid for.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness(stripeConfig, '2026-03-01T10:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

const { admin, tenantWith, balanceOf, ledgerKinds, expectLedgerConsistent } = creditFixtures(() => h);

const promotion = (t: Tenant, amount: number, expiresAt: Date) =>
  admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, { amount, reason: 'promotion', expires_at: expiresAt.toISOString() });
const adjust = (t: Tenant, amount: number) =>
  h.request({ method: 'POST', url: `/api/v1/admin/deployments/${t.deploymentId}/credits`, headers: adminHeaders(h), payload: { amount, reason: 'correction' } });

/** What the open expiring grants still hold, settled at the balance's purchased spending. */
async function inLots(t: Tenant): Promise<number> {
  const lots = await h.deps.db.query<Lot>(
    'SELECT id, amount, remaining, consumed_mark, expires_at, created_at FROM credit_grants WHERE deployment_id = $1 AND expired_at IS NULL',
    [t.deploymentId],
  );
  const row = await h.deps.db.query<{ purchased_consumed: number }>('SELECT purchased_consumed FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
  return [...settleLots(lots, Number(row[0]!.purchased_consumed)).values()].reduce((sum, left) => sum + Number(left), 0);
}

/** Purchased credits as a read after the clock moved sees them (the sync lapses what is due). */
async function purchasedNow(t: Tenant): Promise<number> {
  const res = await h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h) });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ balance: { purchased: number } }>(res).balance.purchased;
}

async function spend(t: Tenant, credits: number): Promise<void> {
  const action = unique('lots-cost').toLowerCase();
  await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits });
  await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action });
  const res = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: action } });
  expect(json(res), res.body).toMatchObject({ success: true, credits_used: credits });
}

/** A tenant with a Stripe customer that bought a 1,000-credit pack (500 cents); its payment intent. */
async function boughtPack(t: Tenant): Promise<{ customer: string; paymentIntent: string }> {
  const customer = unique('cus');
  await h.deps.db.query('UPDATE organizations SET stripe_customer_id = $2 WHERE id = $1', [t.organizationId, customer]);
  const paymentIntent = unique('pi');
  const session = checkoutSessionObject({ customer, organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, paymentIntent, amountTotal: 500 });
  await recordPackCheckout(
    h.deps.db,
    { organizationId: t.organizationId, deploymentId: t.deploymentId, pack: 'small', credits: 1000, checkoutSessionId: session.id as string, priceId: 'price_pack_small', amountTotal: 500, currency: 'usd' },
    h.clock.now(),
  );
  expect((await deliver(h, stripeEvent('checkout.session.completed', session, h.clock.now()))).statusCode).toBe(200);
  return { customer, paymentIntent };
}

const refunded = (pack: { customer: string; paymentIntent: string }, cents: number) =>
  deliver(
    h,
    stripeEvent(
      'charge.refunded',
      { id: unique('ch'), object: 'charge', amount: 500, amount_refunded: cents, refunded: cents === 500, payment_intent: pack.paymentIntent, customer: pack.customer, currency: 'usd' },
      h.clock.now(),
    ),
  );

describe('a take-back of money that went back takes the credits that never expire first', () => {
  it('a refunded pack takes its own credits, and the open promotion still lapses whole', async () => {
    const t = await tenantWith(0);
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    await promotion(t, 1000, expiresAt);
    const pack = await boughtPack(t);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(2000);

    expect((await refunded(pack, 500)).statusCode).toBe(200);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    expect(await inLots(t)).toBe(1000); // what is left is the promotion

    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    expect((await ledgerKinds(t.deploymentId, 'expire')).map((r) => r.purchased_delta)).toEqual([-1000]);
    await expectLedgerConsistent(t);
  });

  it('a chargeback of the pack does the same', async () => {
    const t = await tenantWith(0);
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    await promotion(t, 1000, expiresAt);
    const pack = await boughtPack(t);
    const dispute = { id: unique('dp'), object: 'dispute', amount: 500, currency: 'usd', charge: unique('ch'), payment_intent: pack.paymentIntent, status: 'needs_response' };
    expect((await deliver(h, stripeEvent('charge.dispute.funds_withdrawn', dispute, h.clock.now()))).statusCode).toBe(200);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    expect(await inLots(t)).toBe(1000);

    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    await expectLedgerConsistent(t);
  });

  it('a chargeback the seller wins gives back to the promotion what it took from it, not as credits that never expire', async () => {
    const t = await tenantWith(0);
    const pack = await boughtPack(t);
    await spend(t, 1000); // the pack spent whole
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    await promotion(t, 500, expiresAt);
    const dispute = { id: unique('dp'), object: 'dispute', amount: 500, currency: 'usd', charge: unique('ch'), payment_intent: pack.paymentIntent, status: 'needs_response' };
    // Nothing of the pack is left: the take-back comes out of the promotion.
    expect((await deliver(h, stripeEvent('charge.dispute.funds_withdrawn', dispute, h.clock.now()))).statusCode).toBe(200);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    expect((await deliver(h, stripeEvent('charge.dispute.funds_reinstated', { ...dispute, status: 'won' }, h.clock.now()))).statusCode).toBe(200);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(500);
    expect(await inLots(t)).toBe(500);
    // As without the dispute: the promotion lapses whole.
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    await expectLedgerConsistent(t);
  });

  it('what the credits that never expire cannot cover comes out of the promotion, as spending would take it', async () => {
    const t = await tenantWith(0);
    const pack = await boughtPack(t);
    await spend(t, 900); // 100 of the pack left, all of it never expiring
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    await promotion(t, 500, expiresAt);
    // Half the payment refunded: 500 credits due, 100 never expire, so 400 come out of the promotion.
    expect((await refunded(pack, 250)).statusCode).toBe(200);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(100);
    expect(await inLots(t)).toBe(100);
    // Credits bought afterwards never expire and stay; the promotion's last 100 lapse.
    await admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, { amount: 1000, reason: 'bought later' });
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(1000);
    expect((await ledgerKinds(t.deploymentId, 'expire')).map((r) => r.purchased_delta)).toEqual([-100]);
    await expectLedgerConsistent(t);
  });
});

describe('an operator’s negative adjustment removes credits that never expire first', () => {
  it('takes the credits that never expire, then the promotion; what is left of it lapses', async () => {
    const t = await tenantWith(0, 10);
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    await promotion(t, 10, expiresAt);
    expect((await adjust(t, -10)).statusCode).toBe(200);
    expect(await inLots(t)).toBe(10);
    expect((await adjust(t, -4)).statusCode).toBe(200);
    expect(await inLots(t)).toBe(6);
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    expect((await ledgerKinds(t.deploymentId, 'expire')).map((r) => r.purchased_delta)).toEqual([-6]);
    await expectLedgerConsistent(t);
  });

  it('still never takes what open holds need, and the hold is paid by the promotion first', async () => {
    const t = await tenantWith(0, 10);
    const expiresAt = new Date(h.clock.now().getTime() + DAY);
    await promotion(t, 10, expiresAt);
    const action = unique('lots-hold').toLowerCase();
    await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 15 });
    await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action });
    const hold = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, reserve: true, invocation_id: 'lots-hold-1' },
    });
    expect(json(hold).allowed).toBe(true);
    expect((await adjust(t, -6)).statusCode).toBe(400); // 15 of 20 held: 5 may go
    expect((await adjust(t, -5)).statusCode).toBe(200);
    expect(await inLots(t)).toBe(10);
    const record = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, invocation_id: 'lots-hold-1' },
    });
    expect(json(record)).toMatchObject({ success: true, credits_used: 15 });
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    expect(await inLots(t)).toBe(0);
    await expectLedgerConsistent(t);
  });
});
