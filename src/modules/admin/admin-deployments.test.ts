import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures, deploymentUrl, expectInvalid, type Method } from '../../../test/admin-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json } from '../../../test/harness.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import type { DeploymentView } from './service.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * listing deployments, changing their tier and status.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { admin, view, serviceCheck, serviceUsage, resolve, spend, operatorAudit, ledgerRows } = adminFixtures(() => h);

describe('GET deployments', () => {
  it('lists the deployments of one organization with ?organization_id=, and all of them without', async () => {
    const a = await createTenant(h, { tier: 'launch' });
    const b = await createTenant(h, { tier: 'trial' });
    const res = await admin('GET', `/api/v1/admin/deployments?organization_id=${a.organizationId}`);
    expect(res.statusCode).toBe(200);
    const listed = json<{ deployments: DeploymentView[] }>(res).deployments;
    expect(listed.map((d) => d.id)).toEqual([a.deploymentId]);
    expect(listed[0]).toMatchObject({ organization_id: a.organizationId, tier: 'launch', status: 'active', is_primary: true });

    // The unfiltered list reads every deployment in the shared database; it runs before this file moves its
    // clock, so it brings no other test's balance into a later period.
    const all = json<{ deployments: DeploymentView[] }>(await admin('GET', '/api/v1/admin/deployments')).deployments;
    expect(all.map((d) => d.id)).toEqual(expect.arrayContaining([a.deploymentId, b.deploymentId]));

    const none = await admin('GET', `/api/v1/admin/deployments?organization_id=${randomUUID()}`);
    expect(none.statusCode).toBe(200);
    expect(json(none)).toEqual({ deployments: [] });
  });

  it('returns one deployment with its tier, flags and balance', async () => {
    const createdAt = h.clock.now();
    const t = await createTenant(h, { tier: 'launch', purchased: 30 });
    const d = await view(t.deploymentId);
    expect(d).toMatchObject({
      id: t.deploymentId,
      organization_id: t.organizationId,
      tier: 'launch',
      status: 'active',
      is_primary: true,
      secret_prefix: t.deploymentSecret.slice(0, 10),
      billing_anchor: createdAt.toISOString(),
      features: { ai_enabled: true, billing_enabled: true, custom_domain: true, white_label: false, mcp_enabled: true },
      flag_overrides: {},
      overrides: { monthly_credits: null, api_rate_limit: null, ai_tokens_limit: null, expires_at: null },
    });
    expect(d.balance).toMatchObject({
      monthly_allocation: 2000,
      monthly_used: 0,
      monthly_remaining: 2000,
      purchased: 30,
      reserved: 0,
      available: 2030,
      ai_tokens_used: 0,
      period_start: createdAt.toISOString(),
    });
    expect(new Date(d.balance.period_end).getTime()).toBeGreaterThan(createdAt.getTime());
    // Reads are operator calls too (docs/operator.md: every call is audited).
    expect((await operatorAudit('deployment', t.deploymentId, 'read')).length).toBeGreaterThanOrEqual(1);
  });

  it('answers 404 NOT_FOUND for an unknown deployment id', async () => {
    const res = await admin('GET', deploymentUrl(randomUUID()));
    expect(res.statusCode).toBe(404);
    expect(json(res)).toEqual({ error: 'not_found', code: 'NOT_FOUND', message: expect.any(String) });
    for (const [method, rest, payload] of [
      ['PUT', '', { tier: 'growth' }],
      ['PUT', '/overrides', { monthly_credits: 1 }],
      ['DELETE', '/overrides', undefined],
      ['PUT', '/flags', { white_label: true }],
      ['POST', '/usage/reset', { monthly_credits: true }],
      ['POST', '/credits', { amount: 5, reason: 'x' }],
    ] as Array<[Method, string, object | undefined]>) {
      const r = await admin(method, deploymentUrl(randomUUID(), rest), payload);
      expect(r.statusCode, `${method} ${rest}`).toBe(404);
      expect(json(r).code).toBe('NOT_FOUND');
    }
  });
});

describe('PUT deployment tier and status', () => {
  it('applies the new monthly allocation at once: sandbox → launch with nothing used leaves 2,000 available', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_allocation: 0, available: 0 });
    const res = await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'launch' });
    expect(res.statusCode, res.body).toBe(200);
    const d = json<DeploymentView>(res);
    expect(d.tier).toBe('launch');
    expect(d.balance).toMatchObject({ monthly_allocation: 2000, monthly_used: 0, monthly_remaining: 2000, available: 2000 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, tier: 'launch', credits_available: 2000 });
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_used: 1, credits_remaining: 1999 });

    const audit = await operatorAudit('deployment', t.deploymentId, 'update');
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({
      organization_id: t.organizationId,
      metadata: { before: { tier: 'sandbox' }, after: { tier: 'launch' } },
    });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a downgrade never makes the balance negative: the monthly bucket floors at 0, purchased credits untouched', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 50 });
    await spend(t.deploymentId, 150);
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_used: 150, monthly_remaining: 1850, purchased: 50, available: 1900 });

    const res = await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'trial' });
    expect(res.statusCode).toBe(200);
    expect(json<DeploymentView>(res).balance).toMatchObject({
      monthly_allocation: 100,
      monthly_used: 150,
      monthly_remaining: 0,
      purchased: 50,
      available: 50,
    });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 50 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);

    // The next credit comes from purchased credits, the monthly bucket being empty.
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_remaining: 49 });
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_used: 150, purchased: 49 });

    // Down to sandbox: allocation 0, still nothing negative, purchased still there.
    const sandbox = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'sandbox' }));
    expect(sandbox.balance).toMatchObject({ monthly_allocation: 0, monthly_remaining: 0, purchased: 49, available: 49 });

    // Back up: the period's usage still counts against the new allocation.
    const up = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'launch' }));
    expect(up.balance).toMatchObject({ monthly_allocation: 2000, monthly_used: 150, monthly_remaining: 1850, purchased: 49, available: 1899 });

    const negative = await h.deps.db.query(
      'SELECT 1 FROM credit_balances WHERE deployment_id = $1 AND (purchased_balance < 0 OR monthly_used < 0 OR reserved < 0)',
      [t.deploymentId],
    );
    expect(negative).toEqual([]);
    const adjusts = (await ledgerRows(t.deploymentId)).filter((r) => r.kind === 'adjust');
    expect(adjusts.length).toBeGreaterThanOrEqual(2);
    expect(adjusts.every((r) => r.actor === 'operator' && r.purchased_delta === 0)).toBe(true);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('suspension makes MCP checks answer deployment_not_found; reactivation restores them', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, error: null });

    const res = await admin('PUT', deploymentUrl(t.deploymentId), { status: 'suspended' });
    expect(res.statusCode).toBe(200);
    expect(json<DeploymentView>(res)).toMatchObject({ status: 'suspended', tier: 'launch' });

    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({
      allowed: false,
      credit_cost: 0,
      credits_available: null,
      reason: 'deployment_not_found',
    });
    const stdio = await h.request({
      method: 'POST',
      url: '/api/v1/mcp/stdio/check-entitlement',
      headers: bearer(t.apiKey),
      payload: { tool_name: 'x' },
    });
    expect(json(stdio)).toMatchObject({ allowed: false, credit_cost: 0, reason: 'deployment_not_found' });
    const usage = await serviceUsage(t.deploymentId);
    expect(json(usage)).toMatchObject({ success: false, credits_used: 0, error: 'deployment_not_found' });
    expect((await view(t.deploymentId)).balance.monthly_used).toBe(0);
    // The resolve cache is dropped at once: a suspended deployment is not handed out.
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: null, error: 'no_deployment_found', mcp_enabled: false });

    const back = await admin('PUT', deploymentUrl(t.deploymentId), { status: 'active' });
    expect(json<DeploymentView>(back).status).toBe('active');
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, reason: null });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, error: null });

    const audit = await operatorAudit('deployment', t.deploymentId, 'update');
    expect(audit.map((a) => a.metadata)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ after: { tier: 'launch', status: 'suspended' } }),
        expect.objectContaining({ after: { tier: 'launch', status: 'active' } }),
      ]),
    );
  });

  it('rejects an unknown tier, an unknown status and unknown fields with 400, changing nothing', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'platinum' }), 'tier');
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId), { status: 'deleted' }), 'status');
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId), { tier: 'growth', plan: 'pro' }), 'plan');
    const d = await view(t.deploymentId);
    expect(d).toMatchObject({ tier: 'trial', status: 'active' });
    expect(await operatorAudit('deployment', t.deploymentId, 'update')).toEqual([]);
  });
});
