import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, json, serviceHeaders } from '../../../test/harness.js';
import { findLedgerMismatches } from './ledger.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const DAY = 24 * 60 * 60 * 1000;

async function purchased(deploymentId: string): Promise<number> {
  const res = await h.request({ method: 'GET', url: `/api/v1/admin/deployments/${deploymentId}`, headers: adminHeaders(h) });
  return json<{ balance: { purchased: number } }>(res).balance.purchased;
}

async function grantCredits(deploymentId: string, amount: number, expiresAt?: Date) {
  const res = await h.request({
    method: 'POST',
    url: `/api/v1/admin/deployments/${deploymentId}/credits`,
    headers: adminHeaders(h),
    payload: { amount, reason: 'test', ...(expiresAt ? { expires_at: expiresAt.toISOString() } : {}) },
  });
  expect(res.statusCode, res.body).toBe(200);
}

async function spend(deploymentId: string, times: number) {
  for (let i = 0; i < times; i++) {
    const res = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: deploymentId, tool_name: 'x' } });
    expect(json(res).success).toBe(true);
  }
}

/** A deployment whose monthly allocation is 0, so every credit spent is a purchased one. */
async function purchasedOnlyTenant() {
  const t = await createTenant(h, { tier: 'trial' });
  await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload: { monthly_credits: 0 } });
  return t;
}

describe('expiring grants (docs/metering.md, Expiring grants)', () => {
  it('lapse at their expiry with what is left of them; spending took them first', async () => {
    const t = await purchasedOnlyTenant();
    await grantCredits(t.deploymentId, 30);
    await grantCredits(t.deploymentId, 10, new Date(h.clock.now().getTime() + 10 * DAY));
    await spend(t.deploymentId, 4);
    expect(await purchased(t.deploymentId)).toBe(36);
    h.clock.advance(10 * DAY + 1000);
    // 4 of the expiring 10 were spent; 6 lapse, the 30 that never expire stay.
    expect(await purchased(t.deploymentId)).toBe(30);
    const expire = await h.deps.db.query<{ amount: number }>(
      "SELECT amount FROM credit_ledger WHERE deployment_id = $1 AND kind = 'expire'",
      [t.deploymentId],
    );
    expect(expire).toEqual([{ amount: -6 }]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a grant that arrives after earlier credits were spent lapses whole', async () => {
    const t = await purchasedOnlyTenant();
    await grantCredits(t.deploymentId, 3);
    await spend(t.deploymentId, 3);
    await grantCredits(t.deploymentId, 5, new Date(h.clock.now().getTime() + DAY));
    h.clock.advance(DAY);
    expect(await purchased(t.deploymentId)).toBe(0);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('the hot path cannot spend a grant after it lapsed', async () => {
    const t = await purchasedOnlyTenant();
    await grantCredits(t.deploymentId, 2, new Date(h.clock.now().getTime() + DAY));
    h.clock.advance(DAY + 1);
    const res = await h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x' } });
    expect(json(res)).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('refuses an expiry in the past or on a negative adjustment', async () => {
    const t = await purchasedOnlyTenant();
    for (const payload of [
      { amount: 5, reason: 'x', expires_at: new Date(h.clock.now().getTime() - 1000).toISOString() },
      { amount: -5, reason: 'x', expires_at: new Date(h.clock.now().getTime() + DAY).toISOString() },
    ]) {
      const res = await h.request({ method: 'POST', url: `/api/v1/admin/deployments/${t.deploymentId}/credits`, headers: adminHeaders(h), payload });
      expect(res.statusCode).toBe(400);
      expect(json(res)).toMatchObject({ code: 'INVALID_REQUEST' });
    }
    expect(await purchased(t.deploymentId)).toBe(0);
  });
});
