import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY, HOUR, MINUTE, SECOND } from '../../clock.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createHarness, type Harness, json, serviceHeaders, type Tenant, unique } from '../../../test/harness.js';

/**
 * A lapsed hold and an id used again after its 24 hours (docs/metering.md, Reservations and Refunds):
 * a record of a lapsed hold is priced now whether or not the sweep ran; a refund of an id's older
 * usage leaves the id's newer call recorded.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Body = Record<string, unknown>;
const { admin, tenantWith, balanceOf, expectLedgerConsistent } = creditFixtures(() => h);
const post = (url: string, body: Body) => h.request({ method: 'POST', url, headers: serviceHeaders(h), payload: body });
const check = (body: Body) => post('/api/v1/mcp/check-entitlement', body);
const usage = (body: Body) => post('/api/v1/mcp/usage', body);
const invocation = (t: Tenant, id: string) =>
  h.request({ method: 'GET', url: `/api/v1/mcp/invocations/${encodeURIComponent(id)}?deployment_id=${t.deploymentId}`, headers: serviceHeaders(h) });

/** A tool of its own action at `credits`; returns the tool and a way to change its price. */
async function pricedTool(credits: number): Promise<{ tool: string; price: (c: number) => Promise<unknown> }> {
  const action = unique('act').replace(/[^a-z0-9_]/gi, '_').toLowerCase();
  const price = (c: number) => admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: c });
  await price(credits);
  const tool = `${action}_tool`;
  await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
  return { tool, price };
}

async function expectReservedConsistent(t: Tenant): Promise<void> {
  const rows = await h.deps.db.query<{ reserved: number; ai: number; held: number }>(
    `SELECT b.reserved::int AS reserved, b.ai_credits_reserved::int AS ai,
            COALESCE((SELECT SUM(reserved_amount) FROM invocations i WHERE i.deployment_id = b.deployment_id AND i.status = 'reserved'), 0)::int AS held
     FROM credit_balances b WHERE b.deployment_id = $1`,
    [t.deploymentId],
  );
  expect(rows[0]!.reserved).toBe(rows[0]!.held + rows[0]!.ai);
}

describe('a lapsed hold', () => {
  it('recorded before any sweep is priced now, as after a sweep; its credits are not held any more', async () => {
    const { tool, price } = await pricedTool(1);
    const t = await tenantWith(100);
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: tool, reserve: true, invocation_id: 'lapsed' })).allowed).toBe(true);
    h.clock.advance(6 * MINUTE);
    await price(50);
    // No sweep has run: the hold is still on the row, past its 5 minutes.
    const recorded = json(await usage({ deployment_id: t.deploymentId, tool_name: tool, invocation_id: 'lapsed' }));
    expect(recorded).toMatchObject({ success: true, credits_used: 50 });
    expect((await balanceOf(t.deploymentId)).reserved).toBe(0);
    expect(json(await invocation(t, 'lapsed'))).toMatchObject({ status: 'recorded' });
    // A retry replays, charged once.
    expect(json(await usage({ deployment_id: t.deploymentId, tool_name: tool, invocation_id: 'lapsed' }))).toMatchObject({ credits_used: 50 });
    await expectLedgerConsistent(t);
    await expectReservedConsistent(t);
  });

  it('of another tool is still a reused id, and releases nothing', async () => {
    const a = await pricedTool(1);
    const b = await pricedTool(1);
    const t = await tenantWith(100);
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: a.tool, reserve: true, invocation_id: 'other' })).allowed).toBe(true);
    h.clock.advance(6 * MINUTE);
    const res = await usage({ deployment_id: t.deploymentId, tool_name: b.tool, invocation_id: 'other' });
    expect(res.statusCode).toBe(422);
    await expectLedgerConsistent(t);
    await expectReservedConsistent(t);
  });
});

describe('an id used again after 24 hours', () => {
  it('a whole refund of its older usage leaves its newer call recorded', async () => {
    const t = await tenantWith(100);
    const { tool } = await pricedTool(3);
    const first = json<{ usage_id: string }>(await usage({ deployment_id: t.deploymentId, tool_name: tool, invocation_id: 'again' }));
    h.clock.advance(DAY + SECOND);
    const second = json<{ usage_id: string }>(await usage({ deployment_id: t.deploymentId, tool_name: tool, invocation_id: 'again' }));
    expect(second.usage_id).not.toBe(first.usage_id);
    const refunded = await post(`/api/v1/mcp/usage/${first.usage_id}/refund`, { reason: 'the first call failed' });
    expect(refunded.statusCode, refunded.body).toBe(200);
    expect(json(await invocation(t, 'again'))).toMatchObject({ usage_id: second.usage_id, status: 'recorded', credits_refunded: 0 });
    // A retry reserving the id is told it is paid, not that it was given back.
    h.clock.advance(HOUR);
    expect(json(await check({ deployment_id: t.deploymentId, tool_name: tool, reserve: true, invocation_id: 'again' }))).toMatchObject({ invocation_status: 'recorded' });
    await expectLedgerConsistent(t);
  });
});
