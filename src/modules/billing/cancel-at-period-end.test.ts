import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMonths, DAY, SECOND } from '../../clock.js';
import { adminHeaders, createHarness, createTenant, type Harness, json, serviceHeaders, type Tenant, unique } from '../../../test/harness.js';
import { deliver, stripeConfig, stripeEvent, subscriptionObject } from '../../../test/stripe-events-fixtures.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/**
 * A subscription set to cancel at its period's end (docs/metering.md, Periods): Stripe ends it at
 * `current_period_end` and sends `customer.subscription.deleted` then, seconds or (with the endpoint
 * down) days later. The period after that end is not paid for, so it is not rolled at the paid tier
 * while the deletion is on its way: no second allocation, no new AI token quota. The deletion then sets
 * the tier it falls to, and the roll follows that tier.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness(stripeConfig, '2026-03-01T10:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

async function ok(res: { statusCode: number; body: string }): Promise<void> {
  expect(res.statusCode, res.body).toBe(200);
}

/** A tool that costs `credits`, recorded through the service API. */
async function spend(t: Tenant, credits: number): Promise<{ success: boolean; error?: string }> {
  const action = unique('cape-cost').toLowerCase();
  await ok(await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits } }));
  await ok(await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${action}`, headers: adminHeaders(h), payload: { action } }));
  const res = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: action } });
  return json<{ success: boolean; error?: string }>(res);
}

/** Monthly credits the deployment was given, by rolls and allocation changes. */
const allocated = async (t: Tenant) =>
  (
    await h.deps.db.query<{ n: number }>(
      "SELECT COALESCE(sum(monthly_delta), 0)::int AS n FROM credit_ledger WHERE deployment_id = $1 AND kind IN ('period_reset', 'adjust') AND monthly_delta > 0",
      [t.deploymentId],
    )
  )[0]!.n;
const balance = async (t: Tenant) =>
  (
    await h.deps.db.query<{ period_end: Date; monthly_allocation: number | null; monthly_used: number; ai_tokens_used: number }>(
      'SELECT period_end, monthly_allocation, monthly_used, ai_tokens_used FROM credit_balances WHERE deployment_id = $1',
      [t.deploymentId],
    )
  )[0]!;

describe('a subscription that cancels at its period end', () => {
  it('the period after its end is not rolled at the paid tier before the deletion lands; the deletion’s tier is rolled then', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    h.clock.advance(DAY);
    const customer = unique('cus');
    const id = unique('sub');
    const start = h.clock.now();
    const end = addMonths(start, 1);
    const sub = (status: string, cancel: boolean) =>
      subscriptionObject({ id, customer, price: 'price_growth', status, start, end, organizationId: t.organizationId, cancelAtPeriodEnd: cancel });
    await ok(await deliver(h, stripeEvent('customer.subscription.created', sub('active', false), start)));
    const paid = await balance(t);
    expect(paid.monthly_allocation).toBe(20_000);
    expect(await spend(t, 20_000)).toMatchObject({ success: true });
    h.clock.advance(10 * DAY);
    await ok(await deliver(h, stripeEvent('customer.subscription.updated', sub('active', true), h.clock.now())));

    // The paid period is over; the deletion has not come yet.
    h.clock.set(end.getTime() + SECOND);
    expect(await spend(t, 1)).toMatchObject({ success: false, error: 'insufficient_credits' });
    h.clock.advance(3 * DAY);
    expect(await spend(t, 1)).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect(await allocated(t)).toBe(20_000);
    expect(await balance(t)).toMatchObject({ period_end: end, monthly_used: 20_000 });

    await ok(await deliver(h, stripeEvent('customer.subscription.deleted', sub('canceled', true), end)));
    expect(await spend(t, 1)).toMatchObject({ success: false });
    const after = await balance(t);
    // The roll now follows the tier the deletion set (sandbox: no monthly credits), from its own anchor.
    expect(after.period_end.getTime()).toBeGreaterThan(h.clock.now().getTime());
    expect(after).toMatchObject({ monthly_allocation: 0, monthly_used: 0 });
    expect(await allocated(t)).toBe(20_000);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a subscription renewed (its cancellation taken back before the end) rolls into the paid next period as before', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus');
    const id = unique('sub');
    const start = h.clock.now();
    const end = addMonths(start, 1);
    const sub = (cancel: boolean, s = start, e = end) =>
      subscriptionObject({ id, customer, price: 'price_growth', status: 'active', start: s, end: e, organizationId: t.organizationId, cancelAtPeriodEnd: cancel });
    await ok(await deliver(h, stripeEvent('customer.subscription.created', sub(false), start)));
    expect(await spend(t, 20_000)).toMatchObject({ success: true });
    h.clock.advance(5 * DAY);
    await ok(await deliver(h, stripeEvent('customer.subscription.updated', sub(true), h.clock.now())));
    h.clock.advance(5 * DAY);
    await ok(await deliver(h, stripeEvent('customer.subscription.updated', sub(false), h.clock.now())));
    // The renewal event is late: the roll at the end does not wait for it, as for any renewing subscription.
    h.clock.set(end.getTime() + SECOND);
    expect(await spend(t, 1)).toMatchObject({ success: true });
    expect(await allocated(t)).toBe(40_000);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
  it('another subscription in force that goes on: the period rolls as for any renewing subscription', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const customer = unique('cus');
    const start = h.clock.now();
    const end = addMonths(start, 1);
    const first = subscriptionObject({ id: unique('sub'), customer, price: 'price_growth', status: 'active', start, end, organizationId: t.organizationId });
    await ok(await deliver(h, stripeEvent('customer.subscription.created', first, start)));
    h.clock.advance(SECOND);
    const id = unique('sub');
    const second = (cancel: boolean) =>
      subscriptionObject({ id, customer, price: 'price_growth', status: 'active', start, end, organizationId: t.organizationId, cancelAtPeriodEnd: cancel });
    // The second is the one the organization names; it is set to end, the first renews.
    await ok(await deliver(h, stripeEvent('customer.subscription.created', second(false), h.clock.now())));
    h.clock.advance(DAY);
    await ok(await deliver(h, stripeEvent('customer.subscription.updated', second(true), h.clock.now())));
    expect(await spend(t, 20_000)).toMatchObject({ success: true });
    h.clock.set(end.getTime() + DAY);
    expect(await spend(t, 1)).toMatchObject({ success: true });
    expect(await allocated(t)).toBe(40_000);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
