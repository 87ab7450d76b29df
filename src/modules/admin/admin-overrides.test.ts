import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminFixtures, deploymentUrl, expectInvalid } from '../../../test/admin-fixtures.js';
import { createHarness, createTenant, type Harness, json } from '../../../test/harness.js';
import { DAY } from '../../clock.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import type { DeploymentView } from './service.js';

/**
 * The operator API (docs/operator.md) over HTTP, flat /api/v1 shapes, every call audited with actor `operator`:
 * limit overrides and their edges.
 * Shared helpers: test/admin-fixtures.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const { admin, view, serviceCheck, serviceUsage, entitlements, spend, operatorAudit } = adminFixtures(() => h);

describe('PUT/DELETE overrides', () => {
  it('merges: fields left out keep their value, null removes one; the allocation follows at once', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const first = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, api_rate_limit: 50 });
    expect(first.statusCode, first.body).toBe(200);
    expect(json<DeploymentView>(first).overrides).toEqual({ monthly_credits: 500, api_rate_limit: 50, ai_tokens_limit: null, expires_at: null });
    expect(json<DeploymentView>(first).balance).toMatchObject({ monthly_allocation: 500, available: 500 });
    expect(json<DeploymentView>(first).tier).toBe('trial');

    const second = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { ai_tokens_limit: 7000 }));
    expect(second.overrides).toEqual({ monthly_credits: 500, api_rate_limit: 50, ai_tokens_limit: 7000, expires_at: null });

    const third = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { api_rate_limit: null }));
    expect(third.overrides).toEqual({ monthly_credits: 500, api_rate_limit: null, ai_tokens_limit: 7000, expires_at: null });

    const snapshot = json<{ features: Record<string, unknown>; quotas: { ai_tokens: { limit: number | null } } }>(
      await entitlements(t.deploymentId, t.deploymentSecret),
    );
    expect(snapshot.features).toMatchObject({ ai_monthly_limit: 7000, api_rate_limit: 500 });
    expect(snapshot.quotas.ai_tokens.limit).toBe(7000);

    const fourth = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: null }));
    expect(fourth.overrides.monthly_credits).toBeNull();
    expect(fourth.balance).toMatchObject({ monthly_allocation: 100, available: 100 });
    expect(fourth.tier).toBe('trial');

    const audit = await operatorAudit('deployment_override', t.deploymentId, 'override');
    expect(audit).toHaveLength(4);
    expect(audit.every((a) => a.organization_id === t.organizationId)).toBe(true);
    expect(audit.map((a) => a.metadata.after)).toContainEqual({ monthly_credits: 500, api_rate_limit: 50, ai_tokens_limit: null, expires_at: null });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('rejects negative numbers, unknown fields and a past expires_at with 400 naming the field; the previous override stays', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 20 * DAY).toISOString();
    const set = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, ai_tokens_limit: 3000, expires_at: expiresAt });
    expect(set.statusCode).toBe(200);
    const before = await view(t.deploymentId);
    const past = new Date(h.clock.now().getTime() - 1000).toISOString();
    const cases: Array<[object, string]> = [
      [{ monthly_credits: -1 }, 'monthly_credits'],
      [{ api_rate_limit: -5 }, 'api_rate_limit'],
      [{ ai_tokens_limit: -100 }, 'ai_tokens_limit'],
      [{ ai_tokens_limit: 1.5 }, 'ai_tokens_limit'],
      [{ monthly_credits: '50' }, 'monthly_credits'],
      [{ bogus: 1 }, 'bogus'],
      [{ monthly_credits: 10, tier: 'growth' }, 'tier'],
      [{ expires_at: past }, 'expires_at'],
      [{ monthly_credits: 10, expires_at: past }, 'expires_at'],
      [{ expires_at: h.clock.now().toISOString() }, 'expires_at'],
      [{ expires_at: 'next tuesday' }, 'expires_at'],
      [{ expires_at: '9999-12-31T23:59:59-23:59' }, 'expires_at'], // docs/input.md, Dates: year 10000
    ];
    for (const [body, field] of cases) {
      const res = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), body);
      expectInvalid(res, field);
    }
    const after = await view(t.deploymentId);
    expect(after.overrides).toEqual({ monthly_credits: 500, api_rate_limit: null, ai_tokens_limit: 3000, expires_at: expiresAt });
    expect(after.overrides).toEqual(before.overrides);
    expect(after.balance.monthly_allocation).toBe(500);
    expect(await operatorAudit('deployment_override', t.deploymentId, 'override')).toHaveLength(1);
  });

  it('when an override expires the tier value applies again, with the period usage counted against it', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 10 * DAY);
    const res = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), {
      monthly_credits: 500,
      ai_tokens_limit: 5000,
      api_rate_limit: 42,
      expires_at: expiresAt.toISOString(),
    });
    expect(res.statusCode).toBe(200);
    await spend(t.deploymentId, 30);
    expect((await view(t.deploymentId)).balance).toMatchObject({ monthly_allocation: 500, monthly_remaining: 470, available: 470 });

    h.clock.set(expiresAt.getTime() - 1);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 470 });
    const stillOn = json<{ features: Record<string, unknown> }>(await entitlements(t.deploymentId, t.deploymentSecret));
    expect(stillOn.features).toMatchObject({ ai_monthly_limit: 5000, api_rate_limit: 42 });

    h.clock.set(expiresAt);
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 70 });
    const d = await view(t.deploymentId);
    expect(d.tier).toBe('trial');
    expect(d.balance).toMatchObject({ monthly_allocation: 100, monthly_used: 30, monthly_remaining: 70, available: 70 });
    const snapshot = json<{ features: Record<string, unknown>; quotas: { ai_tokens: { limit: number | null } } }>(
      await entitlements(t.deploymentId, t.deploymentSecret),
    );
    expect(snapshot.features).toMatchObject({ ai_monthly_limit: 1000, api_rate_limit: 500 });
    expect(snapshot.quotas.ai_tokens.limit).toBe(1000);
    expect(json(await serviceUsage(t.deploymentId))).toMatchObject({ success: true, credits_remaining: 69 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('an expiring override whose usage exceeds the tier allocation leaves the monthly bucket at 0, purchased untouched', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 20 });
    const expiresAt = new Date(h.clock.now().getTime() + 3 * DAY);
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, expires_at: expiresAt.toISOString() });
    await spend(t.deploymentId, 150);
    h.clock.set(expiresAt.getTime() + 1);
    const d = await view(t.deploymentId);
    expect(d.balance).toMatchObject({ monthly_allocation: 100, monthly_used: 150, monthly_remaining: 0, purchased: 20, available: 20 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 20 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('DELETE removes every override and the tier applies again', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), {
      monthly_credits: 500,
      api_rate_limit: 42,
      ai_tokens_limit: 5,
      expires_at: new Date(h.clock.now().getTime() + 5 * DAY).toISOString(),
    });
    await spend(t.deploymentId, 10);
    const res = await admin('DELETE', deploymentUrl(t.deploymentId, '/overrides'));
    expect(res.statusCode, res.body).toBe(200);
    const d = json<DeploymentView>(res);
    expect(d.overrides).toEqual({ monthly_credits: null, api_rate_limit: null, ai_tokens_limit: null, expires_at: null });
    expect(d.tier).toBe('trial');
    expect(d.balance).toMatchObject({ monthly_allocation: 100, monthly_used: 10, monthly_remaining: 90, available: 90 });
    const snapshot = json<{ features: Record<string, unknown> }>(await entitlements(t.deploymentId, t.deploymentSecret));
    expect(snapshot.features).toMatchObject({ ai_monthly_limit: 1000, api_rate_limit: 500 });
    expect(await operatorAudit('deployment_override', t.deploymentId, 'delete')).toHaveLength(1);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('overrides: edges', () => {
  it('after an override has expired, a new PUT without expires_at applies (the lapsed expiry is not inherited)', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 2 * DAY);
    await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500, expires_at: expiresAt.toISOString() });
    h.clock.set(expiresAt.getTime() + 1);
    expect((await view(t.deploymentId)).balance.monthly_allocation).toBe(100);

    const res = await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 800 });
    expect(res.statusCode, res.body).toBe(200);
    const d = json<DeploymentView>(res);
    expect(d.overrides.monthly_credits).toBe(800);
    expect(d.balance).toMatchObject({ monthly_allocation: 800, available: 800 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 800 });
  });

  it('a monthly_credits override on an enterprise deployment counts the period usage against it; removing it is unlimited again', async () => {
    const t = await createTenant(h, { tier: 'enterprise' });
    await spend(t.deploymentId, 100);
    const capped = json<DeploymentView>(await admin('PUT', deploymentUrl(t.deploymentId, '/overrides'), { monthly_credits: 500 }));
    expect(capped.balance).toMatchObject({ monthly_allocation: 500, monthly_used: 100, monthly_remaining: 400, available: 400 });
    expect(json(await serviceCheck(t.deploymentId))).toMatchObject({ allowed: true, credits_available: 400 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
    const freed = json<DeploymentView>(await admin('DELETE', deploymentUrl(t.deploymentId, '/overrides')));
    expect(freed.balance).toMatchObject({ monthly_allocation: null, available: null });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
