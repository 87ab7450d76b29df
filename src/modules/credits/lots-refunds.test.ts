import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { adminHeaders, createHarness, type Harness, json, serviceHeaders, type Tenant, unique } from '../../../test/harness.js';
import { DAY, HOUR } from '../../clock.js';
import { type Lot, settleLots } from './grants.js';

/**
 * A refund's purchased credits go back to the open expiring grants first, soonest expiry first, each
 * up to its amount; only the rest comes back as credits that never expire (docs/metering.md, Expiring
 * grants). As credits that never expire, every refund of a charge a promotion paid moved that much of
 * it past its expiry, and a tenant can provoke refunds: the webhook proxy gives back its own charge
 * for a host it could not reach.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 400 }, '2026-01-15T12:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

const { admin, tenantWith, balanceOf, ledgerKinds, expectLedgerConsistent } = creditFixtures(() => h);

const promotion = (t: Tenant, amount: number, expiresAt: Date) =>
  admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, { amount, reason: 'promotion', expires_at: expiresAt.toISOString() });
const later = (ms: number) => new Date(h.clock.now().getTime() + ms);

/** Each open expiring grant's id → what it still holds, settled at the balance's purchased spending. */
async function lotsLeft(t: Tenant): Promise<number[]> {
  const lots = await h.deps.db.query<Lot>(
    'SELECT id, amount, remaining, consumed_mark, expires_at, created_at FROM credit_grants WHERE deployment_id = $1 AND expired_at IS NULL ORDER BY expires_at',
    [t.deploymentId],
  );
  const row = await h.deps.db.query<{ purchased_consumed: number }>('SELECT purchased_consumed FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
  const settled = settleLots(lots, Number(row[0]!.purchased_consumed));
  return lots.map((l) => Number(settled.get(l.id)));
}

async function purchasedNow(t: Tenant): Promise<number> {
  const res = await h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h) });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ balance: { purchased: number } }>(res).balance.purchased;
}

async function costing(credits: number): Promise<string> {
  const action = unique('lots-refund').toLowerCase();
  await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits });
  await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action });
  return action;
}

async function spend(t: Tenant, credits: number, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await h.request({
    method: 'POST',
    url: '/api/v1/mcp/usage',
    headers: serviceHeaders(h),
    payload: { deployment_id: t.deploymentId, tool_name: await costing(credits), ...extra },
  });
  expect(json(res), res.body).toMatchObject({ success: true, credits_used: credits });
  return json<{ usage_id: string }>(res).usage_id;
}

async function refund(usageId: string, amount?: number): Promise<void> {
  const res = await h.request({
    method: 'POST',
    url: `/api/v1/mcp/usage/${usageId}/refund`,
    headers: serviceHeaders(h),
    payload: { reason: 'service refund', ...(amount === undefined ? {} : { amount }) },
  });
  expect(res.statusCode, res.body).toBe(200);
}

describe('a refund goes back to the open expiring grants first', () => {
  it('a charge a promotion paid, refunded, is the promotion again: it lapses whole', async () => {
    const t = await tenantWith(0);
    const expiresAt = later(DAY);
    await promotion(t, 5, expiresAt);
    const usage = await spend(t, 3);
    expect(await lotsLeft(t)).toEqual([2]);
    await refund(usage);
    expect(await lotsLeft(t)).toEqual([5]);
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    expect((await ledgerKinds(t.deploymentId, 'expire')).map((r) => r.purchased_delta)).toEqual([-5]);
    await expectLedgerConsistent(t);
  });

  it('soonest expiry first, each up to its amount; the rest never expires', async () => {
    const t = await tenantWith(0, 4);
    const soon = later(DAY);
    const late = later(2 * DAY);
    await promotion(t, 5, late);
    await promotion(t, 5, soon);
    const usage = await spend(t, 12); // soon 5, late 5, then 2 of the 4 that never expire
    expect(await lotsLeft(t)).toEqual([0, 0]);
    await refund(usage, 7);
    expect(await lotsLeft(t)).toEqual([5, 2]);
    expect((await balanceOf(t.deploymentId)).purchased_balance).toBe(9);
    h.clock.set(soon.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(4);
    h.clock.set(late.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(2);
    // The other 5 refunded: the lots that lapsed are not reopened, so they never expire.
    await refund(usage);
    expect(await purchasedNow(t)).toBe(7);
    expect((await ledgerKinds(t.deploymentId, 'expire')).map((r) => r.purchased_delta)).toEqual([-5, -2]);
    await expectLedgerConsistent(t);
  });

  it('a grant never spent takes nothing back: a charge made before it came refunds as credits that never expire', async () => {
    const t = await tenantWith(0, 10);
    const usage = await spend(t, 3);
    const expiresAt = later(DAY);
    await promotion(t, 5, expiresAt);
    await refund(usage);
    expect(await lotsLeft(t)).toEqual([5]);
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(10);
    await expectLedgerConsistent(t);
  });

  it('a grant made after the charge, then spent, takes nothing back: the refund of bought credits never expires', async () => {
    const t = await tenantWith(0, 10);
    const usage = await spend(t, 4); // bought credits: 6 left
    h.clock.advance(1_000);
    const expiresAt = later(DAY);
    await promotion(t, 5, expiresAt);
    await spend(t, 5); // the promotion pays it
    expect(await lotsLeft(t)).toEqual([0]);
    await refund(usage);
    expect(await lotsLeft(t)).toEqual([0]);
    h.clock.set(expiresAt.getTime() + HOUR);
    // 6 bought left and 4 bought refunded: all 10 paid for, none lapses.
    expect(await purchasedNow(t)).toBe(10);
    await expectLedgerConsistent(t);
  });

  it('the monthly part goes back to the month; only the purchased part to the promotion', async () => {
    const t = await tenantWith(2);
    const expiresAt = later(DAY);
    await promotion(t, 5, expiresAt);
    const usage = await spend(t, 3); // 2 monthly, 1 of the promotion
    expect(await lotsLeft(t)).toEqual([4]);
    await refund(usage);
    expect(await lotsLeft(t)).toEqual([5]);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, purchased_balance: 5 });
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    await expectLedgerConsistent(t);
  });

  it('a refund into a grant kept past its expiry for a hold lapses at the next read', async () => {
    const t = await tenantWith(0);
    const expiresAt = later(2 * 60_000);
    await promotion(t, 10, expiresAt);
    const usage = await spend(t, 5);
    const action = await costing(5);
    const hold = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, reserve: true, invocation_id: 'kept-hold' },
    });
    expect(json(hold).allowed).toBe(true);
    h.clock.set(expiresAt.getTime() + 60_000);
    expect(await purchasedNow(t)).toBe(5); // the 5 the hold needs stay for it
    await refund(usage);
    expect(await purchasedNow(t)).toBe(5); // the refunded 5 were the promotion's: they lapse
    const record = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, invocation_id: 'kept-hold' },
    });
    expect(json(record)).toMatchObject({ success: true, credits_used: 5 });
    expect(await purchasedNow(t)).toBe(0);
    expect((await ledgerKinds(t.deploymentId, 'expire')).map((r) => r.purchased_delta)).toEqual([-5]);
    await expectLedgerConsistent(t);
  });
});

describe('the webhook proxy’s own refunds', () => {
  it('sends to hosts that cannot be reached give the promotion back, and it lapses whole', async () => {
    const t = await tenantWith(0);
    const expiresAt = later(DAY);
    await promotion(t, 3, expiresAt);
    for (let i = 0; i < 3; i++) {
      const res = await h.request({
        method: 'POST',
        url: '/api/v1/proxy/webhooks/send',
        headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
        payload: { url: `http://lots-refund-${i}.invalid/`, payload: {} },
      });
      expect(res.statusCode, res.body).toBe(403); // no attempt could be made: the charge is refunded
    }
    expect(await lotsLeft(t)).toEqual([3]);
    expect((await ledgerKinds(t.deploymentId, 'refund')).length).toBe(3);
    h.clock.set(expiresAt.getTime() + HOUR);
    expect(await purchasedNow(t)).toBe(0);
    await expectLedgerConsistent(t);
  });
});
