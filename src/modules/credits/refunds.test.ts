import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  json,
  serviceHeaders,
  type Tenant,
  unique,
} from '../../../test/harness.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { DAY } from '../../clock.js';
import { createApiKey } from '../api-keys/service.js';

/**
 * Refunds (docs/metering.md): only the platform refunds (service key, operator API), credits go back to their
 * own bucket, and the monthly part of an ended period is not given back. A security review found a tenant
 * refunding itself with its own key, and old monthly charges coming back as permanent credits.
 */
let h: Harness;
let advanced: string; // a tool of this file that costs 3 (task_advanced)
beforeAll(async () => {
  h = await createHarness();
  advanced = unique('tool-task_advanced');
  await admin('PUT', `/api/v1/admin/tool-actions/${advanced}`, { action: 'task_advanced' });
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;
type Body = Record<string, unknown>;
const { admin, tenantWith, balanceOf, ledgerKinds, expectLedgerConsistent } = creditFixtures(() => h);

const serviceUsage = (body: Body) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: body });
const invocationWithKey = (key: string, invocationId: string) =>
  h.request({ method: 'GET', url: `/api/v1/mcp/invocations/${encodeURIComponent(invocationId)}`, headers: bearer(key) });
const refund = (usageId: string, body: Body, headers: Headers = serviceHeaders(h)) =>
  h.request({ method: 'POST', url: `/api/v1/mcp/usage/${usageId}/refund`, headers, payload: body });
const operatorRefund = (usageId: string, body: Body, headers: Headers = {}) =>
  h.request({ method: 'POST', url: `/api/v1/admin/usage/${usageId}/refund`, headers: { ...adminHeaders(h), ...headers }, payload: body });


describe('refunds', () => {
  async function usedOnce(t: Tenant, invocationId?: string) {
    const body = json(
      await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced, ...(invocationId ? { invocation_id: invocationId } : {}) }),
    );
    expect(body.success).toBe(true);
    return body.usage_id as string;
  }

  it('partial then whole: purchased credits come back first, then the monthly bucket, each with a refund ledger row', async () => {
    // 2 monthly + 5 purchased; a cost of 3 takes 2 monthly and 1 purchased.
    const t = await tenantWith(2, 5);
    const usageId = await usedOnce(t, 'ref-1');
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 2, purchased_balance: 4, reserved: 0 });

    const partial = await refund(usageId, { amount: 1, reason: 'partial failure' });
    expect(partial.statusCode).toBe(200);
    expect(json(partial)).toMatchObject({ usage_id: usageId, credits_refunded: 1, total_refunded: 1, credits_remaining: 5 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 2, purchased_balance: 5, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'ref-1'))).toMatchObject({ status: 'recorded', credits_refunded: 1 });

    const whole = await refund(usageId, { reason: 'gave up' });
    expect(whole.statusCode).toBe(200);
    expect(json(whole)).toMatchObject({ usage_id: usageId, credits_refunded: 2, total_refunded: 3, credits_remaining: 7 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 5, reserved: 0 });
    expect(json(await invocationWithKey(t.apiKey, 'ref-1'))).toMatchObject({ status: 'refunded', credits_refunded: 3 });

    const refunds = await ledgerKinds(t.deploymentId, 'refund');
    expect(refunds).toEqual([
      { amount: 1, monthly_delta: 0, purchased_delta: 1, usage_id: usageId },
      { amount: 2, monthly_delta: 2, purchased_delta: 0, usage_id: usageId },
    ]);
    const usage = await h.deps.db.query<{ refunded: number; quantity: number }>('SELECT refunded, quantity FROM usage_records WHERE id = $1', [
      usageId,
    ]);
    expect(usage).toEqual([{ refunded: 3, quantity: 3 }]);
    await expectLedgerConsistent(t);

    // Nothing is left to refund.
    const over = await refund(usageId, { amount: 1, reason: 'again' });
    expect(over.statusCode).toBe(400);
    expect(json(over)).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 5, reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('a usage paid from the monthly bucket alone is refunded to the monthly bucket', async () => {
    const t = await tenantWith(10, 5);
    const usageId = await usedOnce(t);
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 3, purchased_balance: 5, reserved: 0 });
    expect(json(await refund(usageId, { reason: 'whole' }))).toMatchObject({ credits_refunded: 3, total_refunded: 3, credits_remaining: 15 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 5, reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('the Idempotency-Key makes a repeated partial refund answer the first and not refund twice', async () => {
    const t = await tenantWith(10);
    const usageId = await usedOnce(t);
    const first = await refund(usageId, { amount: 1, reason: 'retry-safe' }, { ...serviceHeaders(h), 'idempotency-key': 'refund-key-1' });
    expect(first.statusCode).toBe(200);
    const again = await refund(usageId, { amount: 1, reason: 'retry-safe' }, { ...serviceHeaders(h), 'idempotency-key': 'refund-key-1' });
    expect(again.statusCode).toBe(200);
    expect(json(again)).toEqual(json(first));
    expect(json(first)).toMatchObject({ credits_refunded: 1, total_refunded: 1 });
    expect(typeof json(first).refund_id).toBe('string');
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2 });
    expect(await ledgerKinds(t.deploymentId, 'refund')).toHaveLength(1);

    // The same key in the body is the same key.
    const inBody = await refund(usageId, { amount: 1, reason: 'retry-safe', idempotency_key: 'refund-key-1' });
    expect(json(inBody)).toEqual(json(first));
    expect(await ledgerKinds(t.deploymentId, 'refund')).toHaveLength(1);

    // Same key, different amount: refused, nothing refunded.
    const reused = await refund(usageId, { amount: 2, reason: 'retry-safe' }, { ...serviceHeaders(h), 'idempotency-key': 'refund-key-1' });
    expect(reused.statusCode).toBe(422);
    expect(json(reused)).toMatchObject({ error: 'idempotency_key_reused', code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 2 });

    // A different key is a new refund.
    const second = await refund(usageId, { amount: 1, reason: 'retry-safe' }, { ...serviceHeaders(h), 'idempotency-key': 'refund-key-2' });
    expect(json(second)).toMatchObject({ credits_refunded: 1, total_refunded: 2 });
    expect(await ledgerKinds(t.deploymentId, 'refund')).toHaveLength(2);
    await expectLedgerConsistent(t);
  });

  it('an amount over what is refundable → 400 and nothing changes', async () => {
    const t = await tenantWith(10);
    const usageId = await usedOnce(t);
    const res = await refund(usageId, { amount: 4, reason: 'too much' });
    expect(res.statusCode).toBe(400);
    expect(json(res)).toMatchObject({ code: 'INVALID_REQUEST' });
    expect(await refund(usageId, { amount: 2, reason: 'ok' })).toMatchObject({ statusCode: 200 });
    const rest = await refund(usageId, { amount: 2, reason: 'over the rest' });
    expect(rest.statusCode).toBe(400);
    expect(await balanceOf(t.deploymentId)).toMatchObject({ monthly_used: 1 });
    expect(await ledgerKinds(t.deploymentId, 'refund')).toHaveLength(1);
    await expectLedgerConsistent(t);
  });

  it('a refund of a failed usage → 409 CONFLICT; of an unknown usage → 404', async () => {
    const t = await tenantWith(0);
    const failed = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced }));
    expect(failed).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect(typeof failed.usage_id).toBe('string');
    const res = await refund(failed.usage_id as string, { reason: 'nothing was taken' });
    expect(res.statusCode).toBe(409);
    expect(json(res)).toMatchObject({ error: 'conflict', code: 'CONFLICT' });
    const sandbox = await createTenant(h, { tier: 'sandbox' });
    const denied = json(await serviceUsage({ deployment_id: sandbox.deploymentId, tool_name: 'x' }));
    expect((await refund(denied.usage_id as string, { reason: 'denied' })).statusCode).toBe(409);
    const unknown = await refund(randomUUID(), { reason: 'who?' });
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    await expectLedgerConsistent(t);
    await expectLedgerConsistent(sandbox);
  });
});

describe('only the platform refunds (docs/decisions.md, Refund auth: a tenant refunded itself)', () => {
  async function usedOnce(t: Tenant) {
    const body = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: advanced }));
    expect(body.success).toBe(true);
    return body.usage_id as string;
  }

  it("refuses the organization's own API key, whatever its scopes, also for usage the service key recorded", async () => {
    const t = await tenantWith(10);
    const serviceRecorded = await usedOnce(t);
    const ownRecorded = json(
      await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: advanced } }),
    ).usage_id as string;
    const { key: adminKey } = await createApiKey(h.ctx, { organizationId: t.organizationId, name: 'all', scopes: ['read', 'write', 'admin'] });
    const before = await balanceOf(t.deploymentId);
    for (const usageId of [serviceRecorded, ownRecorded]) {
      for (const key of [t.apiKey, adminKey]) {
        for (const body of [{ reason: 'mine' }, { amount: 1, reason: 'mine' }]) {
          const res = await refund(usageId, body, bearer(key));
          expect(res.statusCode).toBe(403);
          expect(json(res)).toMatchObject({ error: 'forbidden', code: 'FORBIDDEN' });
        }
      }
    }
    // An unknown usage answers the same: a key learns nothing about which usage ids exist.
    expect((await refund(randomUUID(), { reason: 'probe' }, bearer(t.apiKey))).statusCode).toBe(403);
    expect(await balanceOf(t.deploymentId)).toEqual(before);
    expect(await ledgerKinds(t.deploymentId, 'refund')).toEqual([]);
    await expectLedgerConsistent(t);
  });

  it('after a period boundary, refunds of old monthly charges give nothing back (50 refunds are not 50 permanent credits)', async () => {
    const t = await tenantWith(100);
    const usages: string[] = [];
    for (let i = 0; i < 50; i++) {
      const body = json(await serviceUsage({ deployment_id: t.deploymentId, tool_name: 'platform-basic-tool' }));
      expect(body).toMatchObject({ success: true, credits_used: 1 });
      usages.push(body.usage_id as string);
    }
    h.clock.advance(32 * DAY); // the next period: its allocation is fresh, the old one is gone
    for (const usageId of usages) {
      const res = await refund(usageId, { reason: 'old charge' });
      expect(res.statusCode).toBe(200);
      expect(json(res)).toMatchObject({ credits_refunded: 1, credits_forfeited: 1, total_refunded: 1 });
    }
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    const refunds = await ledgerKinds(t.deploymentId, 'refund');
    expect(refunds).toHaveLength(50);
    expect(refunds.every((r) => r.purchased_delta === 0 && r.monthly_delta === 0 && r.amount === 1)).toBe(true);
    await expectLedgerConsistent(t);
  });

  it('after a period boundary the purchased part still comes back to the purchased bucket', async () => {
    // 2 monthly + 5 purchased; a cost of 3 takes 2 monthly and 1 purchased.
    const t = await tenantWith(2, 5);
    const usageId = await usedOnce(t);
    h.clock.advance(32 * DAY);
    const res = json(await refund(usageId, { reason: 'failed downstream' }));
    expect(res).toMatchObject({ credits_refunded: 3, credits_forfeited: 2, total_refunded: 3 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 5, reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('an operator usage reset does not turn a refund of this period into purchased credits', async () => {
    const t = await tenantWith(10);
    const usageId = await usedOnce(t);
    await admin('POST', `/api/v1/admin/deployments/${t.deploymentId}/usage/reset`, { monthly_credits: true });
    expect(json(await refund(usageId, { reason: 'after reset' }))).toMatchObject({ credits_refunded: 3, credits_forfeited: 3 });
    expect(await balanceOf(t.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });
    await expectLedgerConsistent(t);
  });

  it('the operator API refunds too, idempotently, and a replay shows the same split', async () => {
    const t = await tenantWith(2, 5);
    const usageId = await usedOnce(t);
    h.clock.advance(32 * DAY);
    const first = await operatorRefund(usageId, { amount: 3, reason: 'goodwill' }, { 'idempotency-key': 'op-1' });
    expect(first.statusCode).toBe(200);
    expect(json(first)).toMatchObject({ credits_refunded: 3, credits_forfeited: 2, total_refunded: 3 });
    const again = await operatorRefund(usageId, { amount: 3, reason: 'goodwill' }, { 'idempotency-key': 'op-1' });
    expect(json(again)).toEqual(json(first));
    expect(await balanceOf(t.deploymentId)).toMatchObject({ purchased_balance: 5 });
    const audit = await h.deps.db.query<{ actor: string }>("SELECT actor FROM credit_ledger WHERE deployment_id = $1 AND kind = 'refund'", [
      t.deploymentId,
    ]);
    expect(audit).toEqual([{ actor: 'operator' }]);
    // The audit log says the operator moved credits back, once (the replay moved nothing).
    const rows = await h.deps.db.query<{ actor: string; organization_id: string; metadata: Record<string, unknown> }>(
      "SELECT actor, organization_id, metadata FROM audit_logs WHERE resource_type = 'usage' AND resource_id = $1 AND action = 'refund'",
      [usageId],
    );
    expect(rows).toEqual([
      {
        actor: 'operator',
        organization_id: t.organizationId,
        metadata: { deployment_id: t.deploymentId, amount: 3, forfeited: 2, reason: 'goodwill', refund_id: json(first).refund_id },
      },
    ]);
    expect((await operatorRefund(usageId, { reason: 'x' }, { 'x-admin-key': 'wrong' })).statusCode).toBe(401);
    await expectLedgerConsistent(t);
  });
});
