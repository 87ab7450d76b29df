import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures, deploymentUrl, expectInvalid, uniqueAction } from '../../../test/admin-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json, serviceHeaders, unique } from '../../../test/harness.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import type { DeploymentView } from './service.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * credit grants (also with open reservations), credit costs and tool actions.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { admin, view, serviceCheck, serviceUsage, operatorAudit, ledgerRows } = adminFixtures(() => h);

describe('POST credits', () => {
  it('grants purchased credits and adjusts them down, each with a ledger row and an audit row', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const granted = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 500, reason: 'goodwill' });
    expect(granted.statusCode, granted.body).toBe(200);
    expect(json<DeploymentView>(granted).balance).toMatchObject({ purchased: 500, available: 2500 });

    const adjusted = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -200, reason: 'correction' });
    expect(adjusted.statusCode).toBe(200);
    expect(json<DeploymentView>(adjusted).balance).toMatchObject({ purchased: 300, available: 2300 });

    const rows = (await ledgerRows(t.deploymentId)).filter((r) => r.kind !== 'period_reset');
    expect(rows).toEqual([
      { kind: 'grant', amount: 500, monthly_delta: 0, purchased_delta: 500, purchased_after: 500, actor: 'operator', reason: 'goodwill' },
      { kind: 'adjust', amount: -200, monthly_delta: 0, purchased_delta: -200, purchased_after: 300, actor: 'operator', reason: 'correction' },
    ]);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ credits_available: 2300 });
    expect((await operatorAudit('deployment', t.deploymentId, 'grant_credits')).length).toBe(1);
    expect((await operatorAudit('deployment', t.deploymentId, 'adjust_credits')).length).toBe(1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('refuses an adjustment below zero (400, nothing changed) and invalid amounts', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 300 });
    const ledgerBefore = await ledgerRows(t.deploymentId);
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -301, reason: 'too much' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 0, reason: 'nothing' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 1.5, reason: 'half' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: '10', reason: 'text' }), 'amount');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10 }), 'reason');
    // docs/input.md, Dates: year 10000 once the offset is applied; a leap second Date cannot read.
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10, reason: 'far', expires_at: '9999-12-31T23:59:59-23:59' }), 'expires_at');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10, reason: 'leap', expires_at: '2026-06-30T23:59:60Z' }), 'expires_at');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10, reason: '' }), 'reason');
    const d = await view(t.deploymentId);
    expect(d.balance).toMatchObject({ purchased: 300, available: 2300 });
    expect(await ledgerRows(t.deploymentId)).toEqual(ledgerBefore);
    expect(await operatorAudit('deployment', t.deploymentId, 'adjust_credits')).toEqual([]);
    expect(await operatorAudit('deployment', t.deploymentId, 'grant_credits')).toEqual([]);

    // Exactly down to zero is allowed.
    const zero = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -300, reason: 'refund' });
    expect(zero.statusCode).toBe(200);
    expect(json<DeploymentView>(zero).balance.purchased).toBe(0);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('POST credits with open reservations', () => {
  it('a negative adjustment cannot take purchased credits below what open reservations hold', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 0 });
    await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: 10, reason: 'pack' });
    const action = uniqueAction('held');
    await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 3 });
    await admin('PUT', `/api/v1/admin/tool-actions/${action}`, { action });
    const held = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, reserve: true, invocation_id: 'held-1' },
    });
    expect(json(held)).toMatchObject({ allowed: true, credit_cost: 3, credits_available: 7 });

    // Taking all 10 would leave the held 3 uncovered: the reservation's promise would break.
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -10, reason: 'too much' }), 'amount');
    expect((await view(t.deploymentId)).balance).toMatchObject({ purchased: 10, reserved: 3 });

    const ok = await admin('POST', deploymentUrl(t.deploymentId, '/credits'), { amount: -7, reason: 'fits' });
    expect(ok.statusCode).toBe(200);
    const recorded = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(h),
      payload: { deployment_id: t.deploymentId, tool_name: action, invocation_id: 'held-1' },
    });
    expect(json(recorded)).toMatchObject({ success: true, credits_used: 3 });
    expect((await view(t.deploymentId)).balance).toMatchObject({ purchased: 0, reserved: 0 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('PUT credit-costs', () => {
  it('creates and changes an action cost, visible at once in credit-costs and in check-entitlement', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const action = uniqueAction('cost');
    const created = await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 7, description: 'seven' });
    expect(created.statusCode, created.body).toBe(200);
    expect(json(created)).toEqual({ action, credits: 7, description: 'seven' });
    expect((await admin('PUT', `/api/v1/admin/tool-actions/${action}-tool`, { action })).statusCode).toBe(200);

    const costs = async () => {
      const res = await h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers: serviceHeaders(h) });
      expect(res.statusCode).toBe(200);
      return json<{ costs: Array<{ action: string; credits: number; description: string | null }> }>(res).costs;
    };
    expect(await costs()).toContainEqual({ action, credits: 7, description: 'seven' });
    expect(json(await serviceCheck(t.deploymentId, `${action}-tool`))).toMatchObject({ allowed: true, credit_cost: 7 });

    // Description left out keeps its value.
    const changed = await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 9 });
    expect(json(changed)).toEqual({ action, credits: 9, description: 'seven' });
    expect(await costs()).toContainEqual({ action, credits: 9, description: 'seven' });
    expect(json(await serviceCheck(t.deploymentId, `${action}-tool`))).toMatchObject({ allowed: true, credit_cost: 9 });
    const stdio = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { tool_name: `${action}-tool` },
    });
    expect(json(stdio)).toMatchObject({ allowed: true, credit_cost: 9 });
    expect(json(await serviceUsage(t.deploymentId, `${action}-tool`))).toMatchObject({ success: true, credits_used: 9, credits_remaining: 1991 });

    const cleared = await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 9, description: null });
    expect(json(cleared)).toEqual({ action, credits: 9, description: null });

    const audit = await operatorAudit('credit_cost', action, 'update');
    expect(audit).toHaveLength(3);
    expect(audit.every((a) => a.organization_id === null)).toBe(true);
  });

  it('rejects negative credits, a bad action name and unknown fields with 400', async () => {
    const action = uniqueAction('badcost');
    expectInvalid(await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: -1 }), 'credits');
    expectInvalid(await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 2.5 }), 'credits');
    expectInvalid(await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 1, colour: 'red' }), 'colour');
    const upper = await admin('PUT', '/api/v1/admin/credit-costs/Not%20Valid', { credits: 1 });
    expect(upper.statusCode).toBe(400);
    expect(json(upper).code).toBe('INVALID_REQUEST');
    expect(await h.deps.db.query('SELECT 1 FROM credit_costs WHERE action = $1', [action])).toEqual([]);
  });
});

describe('PUT/DELETE tool-actions', () => {
  it('maps a tool to an action and back; a tool with no row is metered as platform_basic (1 credit)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const tool = unique('tool');
    const action = uniqueAction('mapped');
    await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 4 });

    // No row: platform_basic, 1 credit, and the usage record says so.
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 1 });
    expect(json(await serviceUsage(t.deploymentId, tool))).toMatchObject({ success: true, credits_used: 1 });

    const unknown = await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action: uniqueAction('no-such-action') });
    expectInvalid(unknown, 'action');
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ credit_cost: 1 });

    const mapped = await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
    expect(mapped.statusCode).toBe(200);
    expect(json(mapped)).toEqual({ tool_name: tool, action });
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 4 });
    expect(json(await serviceUsage(t.deploymentId, tool))).toMatchObject({ success: true, credits_used: 4 });

    const removed = await admin('DELETE', `/api/v1/admin/tool-actions/${tool}`);
    expect(removed.statusCode).toBe(204);
    expect(json(await serviceCheck(t.deploymentId, tool))).toMatchObject({ allowed: true, credit_cost: 1 });
    expect(json(await serviceUsage(t.deploymentId, tool))).toMatchObject({ success: true, credits_used: 1 });

    const again = await admin('DELETE', `/api/v1/admin/tool-actions/${tool}`);
    expect(again.statusCode).toBe(404);
    expect(json(again)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });

    const usage = await h.deps.db.query<{ metric: string; quantity: number }>(
      'SELECT metric, quantity FROM usage_records WHERE deployment_id = $1 AND success ORDER BY "timestamp", quantity DESC',
      [t.deploymentId],
    );
    expect(usage.map((u) => `${u.metric}:${u.quantity}`).sort()).toEqual(
      [`${action}:4`, 'platform_basic:1', 'platform_basic:1'].sort(),
    );
    expect((await view(t.deploymentId)).balance.monthly_used).toBe(6);

    expect(await operatorAudit('tool_action', tool, 'update')).toHaveLength(1);
    expect(await operatorAudit('tool_action', tool, 'delete')).toHaveLength(1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
