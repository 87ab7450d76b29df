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

describe('expiring grants and open holds (docs/metering.md, Expiring grants)', () => {
  const MINUTE = 60_000;
  const check = (deploymentId: string, id: string, body: Record<string, unknown> = {}) =>
    h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers: serviceHeaders(h), payload: { deployment_id: deploymentId, tool_name: 'hold_tool', reserve: true, invocation_id: id, ...body } });
  const record = (deploymentId: string, id: string) =>
    h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: deploymentId, tool_name: 'hold_tool', invocation_id: id } });
  const release = (deploymentId: string, id: string) =>
    h.request({ method: 'POST', url: `/api/v1/mcp/reservations/${id}/release`, headers: serviceHeaders(h), payload: { deployment_id: deploymentId } });
  const price = (credits: number) =>
    h.request({ method: 'PUT', url: '/api/v1/admin/credit-costs/hold_action', headers: adminHeaders(h), payload: { credits } });
  const mapTool = () => h.request({ method: 'PUT', url: '/api/v1/admin/tool-actions/hold_tool', headers: adminHeaders(h), payload: { action: 'hold_action' } });
  const expectConsistent = async (organizationId: string) => expect(await findLedgerMismatches(h.deps.db, organizationId)).toEqual([]);

  it('a held call whose credits were an expiring grant is paid by it when recorded after the expiry', async () => {
    await price(5);
    await mapTool();
    const t = await purchasedOnlyTenant();
    await grantCredits(t.deploymentId, 10, new Date(h.clock.now().getTime() + 2 * MINUTE));
    for (const id of ['g-1', 'g-2']) expect(json(await check(t.deploymentId, id)).allowed).toBe(true);
    h.clock.advance(3 * MINUTE);
    // Both holds run out after the grant's expiry, within their 5 minutes: they still hold.
    for (const id of ['g-1', 'g-2']) expect(json(await record(t.deploymentId, id)), id).toMatchObject({ success: true, credits_used: 5 });
    expect(await purchased(t.deploymentId)).toBe(0);
    await expectConsistent(t.organizationId);
  });

  it('with bought credits too: the held call spends the promotion, and the bought credits stay', async () => {
    await price(10);
    await mapTool();
    const t = await purchasedOnlyTenant();
    await grantCredits(t.deploymentId, 10);
    await grantCredits(t.deploymentId, 10, new Date(h.clock.now().getTime() + 2 * MINUTE));
    expect(json(await check(t.deploymentId, 'mixed')).allowed).toBe(true);
    h.clock.advance(3 * MINUTE);
    expect(json(await record(t.deploymentId, 'mixed'))).toMatchObject({ success: true, credits_used: 10 });
    expect(await purchased(t.deploymentId)).toBe(10);
    await expectConsistent(t.organizationId);
  });

  it('a hold released after the expiry: what it kept from the grant lapses then', async () => {
    await price(4);
    await mapTool();
    const t = await purchasedOnlyTenant();
    await grantCredits(t.deploymentId, 10, new Date(h.clock.now().getTime() + 2 * MINUTE));
    expect(json(await check(t.deploymentId, 'let-go')).allowed).toBe(true);
    h.clock.advance(3 * MINUTE);
    // The sync at the expiry lapses the 6 credits no hold needs; the 4 held stay for the hold.
    expect(await purchased(t.deploymentId)).toBe(4);
    expect((await release(t.deploymentId, 'let-go')).statusCode).toBe(200);
    h.clock.advance(1000);
    expect(await purchased(t.deploymentId)).toBe(0);
    await expectConsistent(t.organizationId);
  });
});
