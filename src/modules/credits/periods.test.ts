import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  serviceHeaders,
  unique,
} from '../../../test/harness.js';
import { addMonths, DAY, HOUR } from '../../clock.js';
import type { DeploymentView } from '../admin/service.js';
import { findLedgerMismatches } from './ledger.js';

/**
 * Periods (docs/metering.md) with a moved clock: the period is the monthly anniversary of billing_anchor (the deployment's
 * creation time here); at the boundary the monthly allocation and AI tokens reset, nothing rolls over,
 * purchased credits stay; the reset happens once, lazily, on whichever call touches the balance first.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Balance = DeploymentView['balance'];

async function view(deploymentId: string, harness: Harness = h): Promise<DeploymentView> {
  const res = await harness.request({ method: 'GET', url: `/api/v1/admin/deployments/${deploymentId}`, headers: adminHeaders(harness) });
  expect(res.statusCode, res.body).toBe(200);
  return json<DeploymentView>(res);
}

const balanceOf = async (deploymentId: string): Promise<Balance> => (await view(deploymentId)).balance;

const serviceCheck = (deploymentId: string, toolName = 'period-tool', harness: Harness = h) =>
  harness.request({
    method: 'POST',
    url: '/api/v1/mcp/check-entitlement',
    headers: serviceHeaders(harness),
    payload: { deployment_id: deploymentId, tool_name: toolName },
  });

const serviceUsage = (deploymentId: string, toolName = 'period-tool', harness: Harness = h, extra: object = {}) =>
  harness.request({
    method: 'POST',
    url: '/api/v1/mcp/usage',
    headers: serviceHeaders(harness),
    payload: { deployment_id: deploymentId, tool_name: toolName, ...extra },
  });

/** A tool whose calls cost exactly `credits`, through an action created for it (unique: tests share the database). */
async function toolCosting(credits: number): Promise<string> {
  const action = unique('period-cost').toLowerCase();
  const cost = await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits } });
  expect(cost.statusCode, cost.body).toBe(200);
  const tool = await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${action}`, headers: adminHeaders(h), payload: { action } });
  expect(tool.statusCode, tool.body).toBe(200);
  return action;
}

async function spend(deploymentId: string, credits: number): Promise<void> {
  const res = await serviceUsage(deploymentId, await toolCosting(credits));
  expect(json(res), res.body).toMatchObject({ success: true, credits_used: credits });
}

async function periodResets(deploymentId: string, since: Date) {
  return h.deps.db.query<{ amount: number; monthly_delta: number; purchased_delta: number; monthly_after: number | null; reason: string | null }>(
    `SELECT amount, monthly_delta, purchased_delta, monthly_after, reason FROM credit_ledger
     WHERE deployment_id = $1 AND kind = 'period_reset' AND created_at >= $2 ORDER BY id`,
    [deploymentId, since],
  );
}

async function expectLedgerConsistent(organizationId: string): Promise<void> {
  expect(await findLedgerMismatches(h.deps.db, organizationId)).toEqual([]);
}

describe('monthly period boundary', () => {
  it('resets the monthly allocation at the anniversary of billing_anchor; nothing rolls over; purchased credits stay', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'trial', purchased: 20 });
    const d = await view(t.deploymentId);
    expect(d.billing_anchor).toBe(anchor.toISOString());
    const boundary = addMonths(anchor, 1);
    expect(d.balance).toMatchObject({ period_start: anchor.toISOString(), period_end: boundary.toISOString() });

    await spend(t.deploymentId, 30);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 30, monthly_remaining: 70, purchased: 20, available: 90 });

    h.clock.set(boundary.getTime() - 1);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 90 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ period_start: anchor.toISOString(), monthly_used: 30 });

    h.clock.set(boundary);
    // 100 fresh monthly credits, not 100 + the 70 left over; the 20 purchased are still there.
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 120 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({
      period_start: boundary.toISOString(),
      period_end: addMonths(anchor, 2).toISOString(),
      monthly_allocation: 100,
      monthly_used: 0,
      monthly_remaining: 100,
      purchased: 20,
      available: 120,
    });
    const resets = await periodResets(t.deploymentId, boundary);
    expect(resets).toHaveLength(1);
    expect(resets[0]).toMatchObject({ monthly_delta: 30, purchased_delta: 0, monthly_after: 100 });
    await expectLedgerConsistent(t.organizationId);
  });

  it('does not roll an unused allocation over either', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'launch' });
    h.clock.set(addMonths(anchor, 1).getTime() + HOUR);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_allocation: 2000, monthly_remaining: 2000, available: 2000 });
    await expectLedgerConsistent(t.organizationId);
  });

  it('purchased credits never reset, also after being spent into, and several periods later', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'trial', purchased: 50 });
    await spend(t.deploymentId, 120);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 100, monthly_remaining: 0, purchased: 30, available: 30 });

    // No touch for three periods: the first touch lands in the current period at once.
    const third = addMonths(anchor, 3);
    h.clock.set(third.getTime() + 5 * DAY);
    expect(await balanceOf(t.deploymentId)).toMatchObject({
      period_start: third.toISOString(),
      period_end: addMonths(anchor, 4).toISOString(),
      monthly_used: 0,
      monthly_remaining: 100,
      purchased: 30,
      available: 130,
    });
    expect((await periodResets(t.deploymentId, addMonths(anchor, 1))).length).toBeGreaterThanOrEqual(1);
    await expectLedgerConsistent(t.organizationId);
  });

  it('resets AI token usage at the boundary, and resets_at moves to the next anniversary', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'launch' });
    // Stands in for AI usage until the AI proxy exists.
    await h.deps.db.query('UPDATE credit_balances SET ai_tokens_used = 4000 WHERE deployment_id = $1', [t.deploymentId]);
    const snapshot = async () =>
      json<{ quotas: { ai_tokens: { used: number; limit: number | null; remaining: number | null; resets_at: string } } }>(
        await h.request({
          method: 'POST',
          url: '/api/v1/entitlements/check',
          payload: { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret },
        }),
      ).quotas.ai_tokens;
    expect(await snapshot()).toEqual({ used: 4000, limit: 10000, remaining: 6000, resets_at: addMonths(anchor, 1).toISOString() });
    h.clock.set(addMonths(anchor, 1));
    expect(await snapshot()).toEqual({ used: 0, limit: 10000, remaining: 10000, resets_at: addMonths(anchor, 2).toISOString() });
    await expectLedgerConsistent(t.organizationId);
  });

  it('clamps an anchor on the 31st to the last day of shorter months', async () => {
    // Later than anything the tests above reached: the clock only moves forward in this file.
    h.clock.set('2027-01-31T10:00:00.000Z');
    const t = await createTenant(h, { tier: 'trial' });
    await spend(t.deploymentId, 10);
    expect(await balanceOf(t.deploymentId)).toMatchObject({
      period_start: '2027-01-31T10:00:00.000Z',
      period_end: '2027-02-28T10:00:00.000Z',
      monthly_used: 10,
    });
    h.clock.set('2027-02-28T10:00:00.000Z');
    expect(await balanceOf(t.deploymentId)).toMatchObject({
      period_start: '2027-02-28T10:00:00.000Z',
      period_end: '2027-03-31T10:00:00.000Z',
      monthly_used: 0,
    });
    h.clock.set('2027-03-31T10:00:00.000Z');
    expect(await balanceOf(t.deploymentId)).toMatchObject({
      period_start: '2027-03-31T10:00:00.000Z',
      period_end: '2027-04-30T10:00:00.000Z',
    });
    await expectLedgerConsistent(t.organizationId);
  });
});

describe('the reset happens exactly once, lazily', () => {
  it('concurrent first touches after the boundary, on two instances, write exactly one period_reset row', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'launch', purchased: 7 });
    await spend(t.deploymentId, 5);
    const boundary = addMonths(anchor, 1);
    const after = new Date(boundary.getTime() + HOUR);
    h.clock.set(after);
    // A second instance on the same database (its own caches and clock).
    const h2 = await createHarness();
    try {
      h2.clock.set(after);
      const calls = [
        ...Array.from({ length: 6 }, () => serviceUsage(t.deploymentId)),
        ...Array.from({ length: 6 }, () => serviceUsage(t.deploymentId, 'period-tool', h2)),
        ...Array.from({ length: 3 }, () => serviceCheck(t.deploymentId)),
        ...Array.from({ length: 3 }, () => serviceCheck(t.deploymentId, 'period-tool', h2)),
        h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } }),
        h2.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } }),
        h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h) }),
        h2.request({
          method: 'POST',
          url: '/api/v1/entitlements/check',
          payload: { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret },
        }),
        h.request({
          method: 'GET',
          url: '/api/v1/ai/quota',
          headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
        }),
      ];
      const results = await Promise.all(calls);
      expect(results.map((r) => r.statusCode)).toEqual(results.map(() => 200));
      const usages = [...results.slice(0, 12), ...results.slice(18, 20)];
      expect(usages.every((r) => json(r).success === true)).toBe(true);
      expect(results.slice(12, 18).every((r) => json(r).allowed === true)).toBe(true);

      const resets = await periodResets(t.deploymentId, boundary);
      expect(resets).toHaveLength(1);
      expect(resets[0]!.reason).toContain(boundary.toISOString());
      expect(await balanceOf(t.deploymentId)).toMatchObject({
        period_start: boundary.toISOString(),
        monthly_allocation: 2000,
        monthly_used: 14,
        purchased: 7,
        available: 1993,
      });
      await expectLedgerConsistent(t.organizationId);
    } finally {
      await h2.close();
    }
  });

  it('whichever call touches the balance first does the reset, and its answer already reflects the new period', async () => {
    const anchor = h.clock.now();
    const touches: Array<{
      name: string;
      touch: (t: { deploymentId: string; deploymentSecret: string; apiKey: string }) => Promise<void>;
    }> = [
      {
        name: 'service check-entitlement',
        touch: async (t) => expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 2000 }),
      },
      {
        name: 'service usage',
        touch: async (t) => expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_remaining: 1999 }),
      },
      {
        name: 'stdio check-entitlement',
        touch: async (t) => {
          const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
          expect(json(res)).toMatchObject({ allowed: true });
        },
      },
      {
        name: 'stdio record-usage',
        touch: async (t) => {
          const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
          expect(json(res)).toMatchObject({ success: true, credits_remaining: 1999 });
        },
      },
      {
        name: 'entitlements check',
        touch: async (t) => {
          const res = await h.request({
            method: 'POST',
            url: '/api/v1/entitlements/check',
            payload: { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret },
          });
          expect(json<{ quotas: { ai_tokens: { resets_at: string } } }>(res).quotas.ai_tokens.resets_at).toBe(addMonths(anchor, 2).toISOString());
        },
      },
      {
        name: 'ai quota',
        touch: async (t) => {
          const res = await h.request({
            method: 'GET',
            url: '/api/v1/ai/quota',
            headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
          });
          expect(json(res)).toMatchObject({ credits_available: 2000, resets_at: addMonths(anchor, 2).toISOString() });
        },
      },
      {
        name: 'operator read',
        touch: async (t) => expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 0, available: 2000 }),
      },
    ];
    const tenants = [];
    for (const _ of touches) {
      const t = await createTenant(h, { tier: 'launch' });
      await spend(t.deploymentId, 3);
      tenants.push(t);
    }
    const boundary = addMonths(anchor, 1);
    h.clock.set(boundary.getTime() + 2 * DAY);
    for (const [i, { name, touch }] of touches.entries()) {
      const t = tenants[i]!;
      await touch(t);
      const rows = await h.deps.db.query<{ period_start: Date }>('SELECT period_start FROM credit_balances WHERE deployment_id = $1', [
        t.deploymentId,
      ]);
      expect(rows[0]!.period_start.toISOString(), name).toBe(boundary.toISOString());
      expect(await periodResets(t.deploymentId, boundary), name).toHaveLength(1);
      await expectLedgerConsistent(t.organizationId);
    }
  });

  it('a reservation taken before the boundary is recorded after it, against the new period', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'trial' });
    const tool = await toolCosting(3);
    const boundary = addMonths(anchor, 1);
    h.clock.set(boundary.getTime() - 60_000);
    const held = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: tool, reserve: true, invocation_id: 'across-boundary' },
    });
    expect(json(held)).toMatchObject({ allowed: true, credit_cost: 3, credits_available: 97 });
    h.clock.set(boundary.getTime() + 60_000);
    const recorded = await serviceUsage(t.deploymentId, tool, h, { invocation_id: 'across-boundary' });
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 3, credits_remaining: 97 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ period_start: boundary.toISOString(), monthly_used: 3, reserved: 0 });
    expect(await periodResets(t.deploymentId, boundary)).toHaveLength(1);
    await expectLedgerConsistent(t.organizationId);
  });
});

describe('terms across periods', () => {
  it('a monthly_credits override persists across periods; a tier change carries into the next period', async () => {
    const anchor = h.clock.now();
    const a = await createTenant(h, { tier: 'trial' });
    const b = await createTenant(h, { tier: 'launch' });
    const put = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${a.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { monthly_credits: 500 },
    });
    expect(put.statusCode).toBe(200);
    await spend(a.deploymentId, 40);
    h.clock.set(anchor.getTime() + 10 * DAY);
    const tier = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${b.deploymentId}`, headers: adminHeaders(h), payload: { tier: 'growth' } });
    expect(tier.statusCode).toBe(200);
    await spend(b.deploymentId, 100);

    h.clock.set(addMonths(anchor, 1));
    expect(await balanceOf(a.deploymentId)).toMatchObject({ monthly_allocation: 500, monthly_used: 0, available: 500 });
    expect(await balanceOf(b.deploymentId)).toMatchObject({ monthly_allocation: 20000, monthly_used: 0, available: 20000 });
    h.clock.set(addMonths(anchor, 2));
    expect(await balanceOf(a.deploymentId)).toMatchObject({ monthly_allocation: 500, available: 500 });
    await expectLedgerConsistent(a.organizationId);
    await expectLedgerConsistent(b.organizationId);
  });
});

describe('deduction order', () => {
  it('takes the monthly allocation first, then purchased credits, and refuses what neither covers', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 10 });
    const ninetyFive = await toolCosting(95);
    const ten = await toolCosting(10);
    const five = await toolCosting(5);

    expect(json(await serviceUsage(t.deploymentId, ninetyFive))).toMatchObject({ success: true, credits_remaining: 15 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 95, purchased: 10 });

    // 10 credits: the last 5 monthly ones, then 5 purchased.
    expect(json(await serviceUsage(t.deploymentId, ten))).toMatchObject({ success: true, credits_used: 10, credits_remaining: 5 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 100, monthly_remaining: 0, purchased: 5, available: 5 });
    const last = await h.deps.db.query<{ monthly_delta: number; purchased_delta: number; amount: number }>(
      `SELECT monthly_delta, purchased_delta, amount FROM credit_ledger WHERE deployment_id = $1 AND kind = 'deduct' ORDER BY id DESC LIMIT 1`,
      [t.deploymentId],
    );
    expect(last[0]).toEqual({ monthly_delta: -5, purchased_delta: -5, amount: -10 });
    const usage = await h.deps.db.query<{ quantity: number; monthly_taken: number; purchased_taken: number }>(
      'SELECT quantity, monthly_taken, purchased_taken FROM usage_records WHERE deployment_id = $1 AND success ORDER BY quantity DESC',
      [t.deploymentId],
    );
    expect(usage).toEqual([
      { quantity: 95, monthly_taken: 95, purchased_taken: 0 },
      { quantity: 10, monthly_taken: 5, purchased_taken: 5 },
    ]);

    // 10 more: only 5 left in all; refused, nothing taken.
    expect(json(await serviceCheck(t.deploymentId, ten))).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(json(await serviceUsage(t.deploymentId, ten))).toMatchObject({ success: false, credits_used: 0, error: 'insufficient_credits' });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 100, purchased: 5 });

    expect(json(await serviceUsage(t.deploymentId, five))).toMatchObject({ success: true, credits_remaining: 0 });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 100, purchased: 0, available: 0 });
    const negative = await h.deps.db.query(
      'SELECT 1 FROM credit_balances WHERE deployment_id = $1 AND (purchased_balance < 0 OR monthly_used > monthly_allocation)',
      [t.deploymentId],
    );
    expect(negative).toEqual([]);
    await expectLedgerConsistent(t.organizationId);
  });
});

describe('the ledger', () => {
  it('is append-only: UPDATE and DELETE on credit_ledger raise an error and change nothing', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 25 });
    await spend(t.deploymentId, 4);
    const before = await h.deps.db.query('SELECT * FROM credit_ledger WHERE deployment_id = $1 ORDER BY id', [t.deploymentId]);
    expect(before.length).toBeGreaterThanOrEqual(3);
    await expect(h.deps.db.query('UPDATE credit_ledger SET amount = 0 WHERE deployment_id = $1', [t.deploymentId])).rejects.toThrow(
      /append-only/,
    );
    await expect(h.deps.db.query('DELETE FROM credit_ledger WHERE deployment_id = $1', [t.deploymentId])).rejects.toThrow(/append-only/);
    await expect(
      h.deps.db.transaction((tx) => tx.query("UPDATE credit_ledger SET reason = 'edited' WHERE deployment_id = $1", [t.deploymentId])),
    ).rejects.toThrow(/append-only/);
    const after = await h.deps.db.query('SELECT * FROM credit_ledger WHERE deployment_id = $1 ORDER BY id', [t.deploymentId]);
    expect(after).toEqual(before);
    await expectLedgerConsistent(t.organizationId);
  });
});

describe('enterprise', () => {
  it('is unlimited: credits_remaining and credits_available null, never denied for credits, purchased credits untouched', async () => {
    const anchor = h.clock.now();
    const t = await createTenant(h, { tier: 'enterprise', purchased: 100 });
    const expensive = await toolCosting(1_000_000);
    const check = json(await serviceCheck(t.deploymentId, expensive));
    expect(check).toEqual({ allowed: true, tier: 'enterprise', credit_cost: 1_000_000, credits_available: null, reason: null });
    for (let i = 0; i < 3; i++) {
      expect(json(await serviceUsage(t.deploymentId, expensive))).toMatchObject({
        success: true,
        credits_used: 1_000_000,
        credits_remaining: null,
        error: null,
      });
    }
    const stdio = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: expensive } });
    expect(json(stdio)).toMatchObject({ success: true, credits_used: 1_000_000, credits_remaining: null });
    expect(await balanceOf(t.deploymentId)).toMatchObject({
      monthly_allocation: null,
      monthly_remaining: null,
      available: null,
      purchased: 100,
    });
    const quota = await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    });
    expect(json(quota)).toMatchObject({ limit: null, remaining: null, credits_available: null });
    await expectLedgerConsistent(t.organizationId);

    h.clock.set(addMonths(anchor, 1).getTime() + DAY);
    expect(json(await serviceCheck(t.deploymentId, expensive))).toMatchObject({ allowed: true, credits_available: null });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_allocation: null, available: null, purchased: 100, monthly_used: 0 });
    await expectLedgerConsistent(t.organizationId);
  });
});
