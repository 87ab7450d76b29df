import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findLedgerMismatches } from '../credits/ledger.js';
import { bearer, createHarness, createTenant, type Harness, json, mistyped } from '../../../test/harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const check = (key: string, body: unknown) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(key), payload: body as object });
const record = (key: string, body: unknown, headers: Record<string, string> = {}) =>
  h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: { ...bearer(key), ...headers }, payload: body as object });

describe('stdio check-entitlement', () => {
  it('allows a launch deployment and names the cost of the mapped action', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const res = await check(t.apiKey, { tool_name: 'anything' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toEqual({ allowed: true, credit_cost: 1, tier: 'launch', reason: null });
  });

  it('denies sandbox, with credit_cost 0 and the tier', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    expect(json(await check(t.apiKey, { tool_name: 'x' }))).toEqual({
      allowed: false,
      credit_cost: 0,
      tier: 'sandbox',
      reason: 'sandbox_tier',
    });
  });

  it('denies for insufficient credits when the cost exceeds the balance', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: { 'x-admin-key': h.config.adminApiKey },
      payload: { monthly_credits: 2 },
    });
    expect(json(await check(t.apiKey, { tool_name: 'x' })).allowed).toBe(true);
    const toolAction = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/tool-actions/${t.deploymentId}-crew`,
      headers: { 'x-admin-key': h.config.adminApiKey },
      payload: { action: 'crew_execute' },
    });
    expect(toolAction.statusCode).toBe(200);
    expect(json(await check(t.apiKey, { tool_name: `${t.deploymentId}-crew` }))).toEqual({
      allowed: false,
      credit_cost: 0,
      tier: 'trial',
      reason: 'insufficient_credits',
      // The seed's fields keep their values; what the call costs and what is spendable is here.
      payment_required: { reason: 'insufficient_credits', credits_required: 5, credits_available: 2 },
    });
  });

  it('refuses a missing, malformed, revoked or unknown key with 401 and the flat unauthorized body', async () => {
    const t = await createTenant(h);
    for (const headers of [{}, bearer('cg_nope'), bearer(mistyped(t.apiKey)), { authorization: t.apiKey }]) {
      const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers, payload: { tool_name: 'x' } });
      expect(res.statusCode).toBe(401);
      expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
    }
  });

  it('needs scope read to check and write to record', async () => {
    const t = await createTenant(h, { scopes: ['read'] });
    expect((await check(t.apiKey, { tool_name: 'x' })).statusCode).toBe(200);
    const res = await record(t.apiKey, { tool_name: 'x' });
    expect(res.statusCode).toBe(403);
    expect(json(res)).toMatchObject({ error: 'forbidden', code: 'INSUFFICIENT_SCOPE' });
  });

  it('rejects invalid bodies with 400 INVALID_REQUEST and never 500', async () => {
    const t = await createTenant(h);
    const cases: unknown[] = [{}, { tool_name: 5 }, { tool_name: 'x', extra: 1 }, { tool_name: '' }, { tool_name: 'x'.repeat(201) }];
    for (const body of cases) {
      const res = await check(t.apiKey, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(json(res)).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
    }
    const malformed = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: { ...bearer(t.apiKey), 'content-type': 'application/json' },
      payload: '{"tool_name":',
    });
    expect(malformed.statusCode).toBe(400);
    expect(json(malformed).code).toBe('INVALID_REQUEST');
  });
});

describe('stdio record-usage', () => {
  it('deducts the cost, monthly allocation first, and keeps the ledger equal to the balance', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 10 });
    const res = await record(t.apiKey, { tool_name: 'x', metadata: { run: 1 } });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ success: true, credits_used: 1, credits_remaining: 109, error: null });
    const balance = await h.deps.db.query<{ monthly_used: number; purchased_balance: number }>(
      'SELECT monthly_used, purchased_balance FROM credit_balances WHERE deployment_id = $1',
      [t.deploymentId],
    );
    expect(balance[0]).toEqual({ monthly_used: 1, purchased_balance: 10 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('reports a denial as success false, deducts nothing and keeps a failed usage record', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    const res = await record(t.apiKey, { tool_name: 'x' });
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ success: false, credits_used: 0, error: 'sandbox_tier' });
    const usage = await h.deps.db.query<{ success: boolean; quantity: number }>(
      'SELECT success, quantity FROM usage_records WHERE deployment_id = $1',
      [t.deploymentId],
    );
    expect(usage).toEqual([{ success: false, quantity: 0 }]);
  });

  it('replays the same invocation_id without deducting twice', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const first = await record(t.apiKey, { tool_name: 'x', invocation_id: 'inv-1' });
    const again = await record(t.apiKey, { tool_name: 'x' }, { 'idempotency-key': 'inv-1' });
    expect(json(again)).toEqual(json(first));
    expect(again.headers['idempotent-replayed']).toBe('true');
    const reused = await record(t.apiKey, { tool_name: 'y', invocation_id: 'inv-1' });
    expect(reused.statusCode).toBe(422);
    expect(json(reused)).toMatchObject({ error: 'idempotency_key_reused', code: 'IDEMPOTENCY_KEY_REUSED' });
    const rows = await h.deps.db.query('SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind = $2', [t.deploymentId, 'deduct']);
    expect(rows).toHaveLength(1);
  });

  it("updates the key's last_used_at at most once a minute", async () => {
    const t = await createTenant(h);
    const lastUsed = async () =>
      (await h.deps.db.query<{ last_used_at: Date | null }>('SELECT last_used_at FROM api_keys WHERE key_prefix = $1', [t.apiKey.slice(0, 10)]))[0]!
        .last_used_at;
    const waitFor = async (expected: number) => {
      const deadline = Date.now() + 5_000;
      while ((await lastUsed())?.getTime() !== expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect((await lastUsed())?.getTime()).toBe(expected);
    };
    expect(await lastUsed()).toBeNull();
    const first = h.clock.now().getTime();
    await check(t.apiKey, { tool_name: 'x' });
    await waitFor(first);
    h.clock.advance(30_000);
    await check(t.apiKey, { tool_name: 'x' });
    await new Promise((r) => setTimeout(r, 50));
    expect((await lastUsed())?.getTime()).toBe(first);
    h.clock.advance(31_000);
    await check(t.apiKey, { tool_name: 'x' });
    await waitFor(first + 61_000);
  });

  it('writes the last_used_at of many keys used at once, each to its own use, again a minute later', async () => {
    const tenants = await Promise.all(Array.from({ length: 12 }, () => createTenant(h)));
    const prefixes = tenants.map((t) => t.apiKey.slice(0, 10));
    const lastUsed = async () =>
      (
        await h.deps.db.query<{ key_prefix: string; last_used_at: Date | null }>(
          'SELECT key_prefix, last_used_at FROM api_keys WHERE key_prefix = ANY($1::text[])',
          [`{${prefixes.join(',')}}`],
        )
      ).map((r) => r.last_used_at?.getTime() ?? null);
    const waitForAll = async (expected: number) => {
      const deadline = Date.now() + 5_000;
      while (!(await lastUsed()).every((t) => t === expected) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      expect(await lastUsed()).toEqual(prefixes.map(() => expected));
    };
    const first = h.clock.now().getTime();
    // Every key twice in the same moment: one write each is enough.
    const answers = await Promise.all(tenants.flatMap((t) => [check(t.apiKey, { tool_name: 'x' }), check(t.apiKey, { tool_name: 'x' })]));
    expect(answers.every((r) => r.statusCode === 200)).toBe(true);
    await waitForAll(first);
    h.clock.advance(61_000);
    await Promise.all(tenants.map((t) => check(t.apiKey, { tool_name: 'x' })));
    await waitForAll(first + 61_000);
  });
});
