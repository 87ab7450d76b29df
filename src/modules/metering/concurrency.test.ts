import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createTenant, grant, type Harness, json, serviceHeaders } from '../../../test/harness.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/**
 * The money invariants under concurrency. On PostgreSQL these requests really run in parallel on a
 * pool of connections; on PGlite they are serialised by its single connection (same answers expected).
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

async function balanceOf(deploymentId: string) {
  const rows = await h.deps.db.query<{ monthly_used: number; purchased_balance: number; reserved: number; monthly_allocation: number }>(
    'SELECT monthly_used, purchased_balance, reserved, monthly_allocation FROM credit_balances WHERE deployment_id = $1',
    [deploymentId],
  );
  return rows[0]!;
}

describe('concurrent metering', () => {
  it('200 concurrent record-usage calls against a balance of 100: exactly 100 succeed, balance 0', async () => {
    // trial: 100 monthly credits; split 60 monthly + 40 purchased to exercise both buckets.
    const t = await createTenant(h, { tier: 'trial' });
    await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: { 'x-admin-key': h.config.adminApiKey },
      payload: { monthly_credits: 60 },
    });
    await grant(h, t.deploymentId, 40);
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        h.request({
          method: 'POST',
          url: i % 2 === 0 ? '/api/v1/mcp/stdio/record-usage' : '/api/v1/mcp/usage',
          headers: i % 2 === 0 ? bearer(t.apiKey) : serviceHeaders(h),
          payload: i % 2 === 0 ? { tool_name: 'x' } : { deployment_id: t.deploymentId, tool_name: 'x' },
        }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    const succeeded = results.filter((r) => json(r).success === true);
    expect(succeeded).toHaveLength(100);
    expect(results.filter((r) => json(r).error === 'insufficient_credits')).toHaveLength(100);
    const b = await balanceOf(t.deploymentId);
    expect(b.monthly_used).toBe(60);
    expect(b.purchased_balance).toBe(0);
    const usage = await h.deps.db.query<{ ok: number; failed: number; credits: number }>(
      `SELECT count(*) FILTER (WHERE success)::int AS ok, count(*) FILTER (WHERE NOT success)::int AS failed,
              COALESCE(SUM(quantity), 0)::int AS credits
       FROM usage_records WHERE deployment_id = $1`,
      [t.deploymentId],
    );
    expect(usage[0]).toEqual({ ok: 100, failed: 100, credits: 100 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('50 concurrent reservations of cost 3 against 100 credits: exactly 33 are granted', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await h.request({
      method: 'PUT',
      url: '/api/v1/admin/tool-actions/concurrency-task-advanced',
      headers: { 'x-admin-key': h.config.adminApiKey },
      payload: { action: 'task_advanced' },
    });
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        h.request({
          method: 'POST',
          url: '/api/v1/mcp/check-entitlement',
          headers: serviceHeaders(h),
          payload: { deployment_id: t.deploymentId, tool_name: 'concurrency-task-advanced', reserve: true, invocation_id: `r-${i}` },
        }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    const granted = results.filter((r) => json(r).allowed === true);
    expect(granted).toHaveLength(33);
    expect(results.filter((r) => json(r).reason === 'insufficient_credits')).toHaveLength(17);
    expect((await balanceOf(t.deploymentId)).reserved).toBe(99);
    // Every granted reservation can be recorded, whatever else happens to the balance.
    const drain = await Promise.all(
      Array.from({ length: 10 }, () =>
        h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x' } }),
      ),
    );
    expect(drain.filter((r) => json(r).success === true)).toHaveLength(1);
    const recorded = await Promise.all(
      granted.map((r) =>
        h.request({
          method: 'POST',
          url: '/api/v1/mcp/usage',
          headers: serviceHeaders(h),
          payload: { deployment_id: t.deploymentId, tool_name: 'concurrency-task-advanced', invocation_id: json(r).invocation_id },
        }),
      ),
    );
    expect(recorded.every((r) => json(r).success === true)).toBe(true);
    const b = await balanceOf(t.deploymentId);
    expect(b).toMatchObject({ monthly_used: 100, reserved: 0 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a release sent together with a record of the same id for another tool still gives the hold back', async () => {
    // Found by the money model (credits/engine.model.test.ts): in one deduction batch the record took the
    // held row, declined it (another tool: 422), and the release then answered "nothing held" with the
    // hold left for the sweep. In either serial order the release gives the credit back.
    const t = await createTenant(h, { tier: 'trial' });
    for (let i = 0; i < 20; i++) {
      const id = `rel-other-${i}`;
      const held = await h.request({
        method: 'POST',
        url: '/api/v1/mcp/check-entitlement',
        headers: serviceHeaders(h),
        payload: { deployment_id: t.deploymentId, tool_name: 'tool-a', reserve: true, invocation_id: id },
      });
      expect(json(held).allowed, held.body).toBe(true);
      const [record, release] = await Promise.all([
        h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'tool-b', invocation_id: id } }),
        h.request({ method: 'POST', url: `/api/v1/mcp/reservations/${id}/release`, headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId } }),
      ]);
      expect(record.statusCode, record.body).toBe(422);
      expect(json(record).code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(release.statusCode, release.body).toBe(200);
      expect(json(release), `round ${i}`).toEqual({ invocation_id: id, status: 'released', released_credits: 1 });
      expect((await balanceOf(t.deploymentId)).reserved).toBe(0);
    }
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('the same invocation_id sent 20 times concurrently deducts once and answers the same', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        h.request({
          method: 'POST',
          url: '/api/v1/mcp/stdio/record-usage',
          headers: { ...bearer(t.apiKey), 'idempotency-key': 'same-call' },
          payload: { tool_name: 'x', metadata: { a: 1 } },
        }),
      ),
    );
    expect(results.every((r) => r.statusCode === 200)).toBe(true);
    const bodies = results.map((r) => json(r));
    expect(new Set(bodies.map((b) => b.usage_id)).size).toBe(1);
    expect(bodies.every((b) => b.success === true && b.credits_used === 1)).toBe(true);
    expect(results.filter((r) => r.headers['idempotent-replayed'] === 'true')).toHaveLength(19);
    expect((await balanceOf(t.deploymentId)).monthly_used).toBe(1);
    const deducts = await h.deps.db.query("SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind = 'deduct'", [t.deploymentId]);
    expect(deducts).toHaveLength(1);
  });
});
