import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures, deploymentUrl, expectInvalid } from '../../../test/admin-fixtures.js';
import { bearer, createHarness, createTenant, type Harness, json } from '../../../test/harness.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import type { DeploymentView } from './service.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * feature flags and usage resets.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { admin, view, serviceCheck, serviceUsage, resolve, entitlements, spend, operatorAudit } = adminFixtures(() => h);

describe('PUT flags', () => {
  it('pins flags one by one, merges, and null restores the tier value', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const pinned = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { white_label: true }));
    expect(pinned.flag_overrides).toEqual({ white_label: true });
    expect(pinned.features).toEqual({ ai_enabled: true, billing_enabled: true, custom_domain: true, white_label: true, mcp_enabled: true });

    const merged = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { custom_domain: false }));
    expect(merged.flag_overrides).toEqual({ white_label: true, custom_domain: false });
    expect(merged.features).toMatchObject({ white_label: true, custom_domain: false });

    const restored = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { white_label: null }));
    expect(restored.flag_overrides).toEqual({ custom_domain: false });
    expect(restored.features).toMatchObject({ white_label: false, custom_domain: false });
    expect(restored.tier).toBe('launch');

    const snapshot = json<{ features: Record<string, unknown> }>(await entitlements(t.deploymentId, t.deploymentSecret));
    expect(snapshot.features).toMatchObject({ white_label: false, custom_domain: false, ai_enabled: true });

    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { teleport: true }), 'teleport');
    expectInvalid(await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { ai_enabled: 'yes' }), 'ai_enabled');
    expect((await view(t.deploymentId)).flag_overrides).toEqual({ custom_domain: false });

    const audit = await operatorAudit('deployment_flags', t.deploymentId, 'override');
    expect(audit).toHaveLength(3);
    expect(audit.every((a) => a.organization_id === t.organizationId)).toBe(true);
  });

  it('mcp_enabled false on a launch deployment makes MCP checks answer mcp_disabled', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expect(json(await resolve(t.userId))).toMatchObject({ mcp_enabled: true });
    await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { mcp_enabled: false });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: false, credit_cost: 0, tier: 'launch', reason: 'mcp_disabled' });
    const stdio = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
    expect(json(stdio)).toEqual({ allowed: false, credit_cost: 0, tier: 'launch', reason: 'mcp_disabled' });
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: false, credits_used: 0, error: 'mcp_disabled' });
    expect(json(await resolve(t.userId))).toMatchObject({ deployment_id: t.deploymentId, mcp_enabled: false });

    await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { mcp_enabled: null });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, reason: null });
    expect(json(await resolve(t.userId))).toMatchObject({ mcp_enabled: true });
  });

  it('mcp_enabled true does not lift the sandbox denial (reason order of docs/metering.md, Denials)', async () => {
    const t = await createTenant(h, { tier: 'sandbox' });
    await admin('PUT', deploymentUrl(t.deploymentId, '/flags'), { mcp_enabled: true });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: false, reason: 'sandbox_tier' });
  });
});

describe('POST usage/reset', () => {
  it('refills the monthly bucket and/or clears AI tokens, with a ledger row and an audit row', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    await spend(t.deploymentId, 150);
    // Stands in for AI usage until the AI proxy exists.
    await h.deps.db.query('UPDATE credit_balances SET ai_tokens_used = 1234 WHERE deployment_id = $1', [t.deploymentId]);

    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), {}), 'ai_tokens');
    expectInvalid(await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), { everything: true }), 'everything');
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_used: 150, ai_tokens_used: 1234 });

    const credits = await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), { monthly_credits: true });
    expect(credits.statusCode, credits.body).toBe(200);
    expect(json<DeploymentView>(credits).balance).toMatchObject({ monthly_used: 0, monthly_remaining: 2000, available: 2000, ai_tokens_used: 1234 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);

    await spend(t.deploymentId, 5);
    const tokens = await admin('POST', deploymentUrl(t.deploymentId, '/usage/reset'), { ai_tokens: true });
    expect(json<DeploymentView>(tokens).balance).toMatchObject({ monthly_used: 5, ai_tokens_used: 0 });
    const quota = await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    });
    expect(json(quota)).toMatchObject({ used: 0, remaining: 10000 });

    expect(await operatorAudit('deployment', t.deploymentId, 'reset_usage')).toHaveLength(2);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
