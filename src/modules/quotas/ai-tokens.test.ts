import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, grant, type Harness, json, type Tenant } from '../../../test/harness.js';
import type { Ctx } from '../../context.js';
import { AppError, flatErrorBody } from '../../errors.js';
import { findLedgerMismatches } from '../credits/ledger.js';
import { getDeployment } from '../deployments/service.js';
import { accountAiTokens, assertAiAvailable, creditsForTokens } from './ai-tokens.js';

/**
 * The AI token quota (docs/limits.md) through the service functions the AI proxy will call: counting per period,
 * spill-over into purchased credits by model class, the 429 when neither is left, overrides, resets
 * (exactly once), idempotency, and the `quota.threshold` events for AI tokens and monthly credits.
 */
let h: Harness;

beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const ctxFor = (t: Tenant): Ctx => ({ ...h.ctx, actor: { type: 'deployment', deploymentId: t.deploymentId, organizationId: t.organizationId } });
const account = (t: Tenant, inputTokens: number, outputTokens: number, model = 'gpt-4o-mini', requestId?: string) =>
  accountAiTokens(ctxFor(t), { id: t.deploymentId, organization_id: t.organizationId }, { inputTokens, outputTokens, model, requestId });
const available = async (t: Tenant) => assertAiAvailable(ctxFor(t), await getDeployment(h.deps.db, t.deploymentId));
const quota = async (t: Tenant) =>
  json<{ used: number; limit: number | null; remaining: number | null; resets_at: string; credits_available: number | null }>(
    await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    }),
  );
const purchased = async (t: Tenant) =>
  (await h.deps.db.query<{ purchased_balance: number }>('SELECT purchased_balance FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]))[0]!
    .purchased_balance;
const events = (t: Tenant) =>
  h.deps.db.query<{ type: string; data: Record<string, unknown>; organization_id: string }>(
    `SELECT type, data, organization_id FROM outbox_events WHERE deployment_id = $1 AND type = 'quota.threshold'
     ORDER BY created_at, (data->>'threshold')::int`,
    [t.deploymentId],
  );

async function expectLedgerConsistent(t: Tenant): Promise<void> {
  expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
}

describe('counting tokens per period', () => {
  it('counts input + output tokens against the tier limit without charging inside it', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 5 });
    const r = await account(t, 300, 200);
    expect(r).toMatchObject({ tokens: 500, tokensOverLimit: 0, creditsDue: 0, creditsCharged: 0, used: 500, limit: 1000, remaining: 500 });
    expect(await quota(t)).toMatchObject({ used: 500, limit: 1000, remaining: 500 });
    expect(await purchased(t)).toBe(5);
  });

  it('past the limit, tokens are paid from purchased credits at the class rate per 1,000 tokens, rounded up', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 100 });
    await account(t, 900, 0);
    // 250 tokens, 150 past the limit, advanced (3 per 1,000): 0.45 → 1 credit.
    const advanced = await account(t, 200, 50, 'gpt-4o');
    expect(advanced).toMatchObject({ tokensOverLimit: 150, modelClass: 'advanced', creditsDue: 1, creditsCharged: 1, used: 1150, remaining: 0 });
    // Wholly past the limit now: 2,500 premium tokens (10 per 1,000) = 25 credits.
    const premium = await account(t, 1000, 1500, 'o1');
    expect(premium).toMatchObject({ tokensOverLimit: 2500, modelClass: 'premium', creditsDue: 25, creditsCharged: 25 });
    // An unlisted model takes the default class (premium, 10 per 1,000: 1 token rounds up to 1 credit).
    expect(await account(t, 1, 0, 'some-new-model')).toMatchObject({ modelClass: 'premium', creditsCharged: 1 });
    expect(await purchased(t)).toBe(100 - 1 - 25 - 1);
    const ledger = await h.deps.db.query<{ kind: string; amount: number; purchased_delta: number }>(
      `SELECT kind, amount, purchased_delta FROM credit_ledger WHERE deployment_id = $1 AND kind = 'deduct' ORDER BY id`,
      [t.deploymentId],
    );
    expect(ledger.map((l) => l.amount)).toEqual([-1, -25, -1]);
    const usage = await h.deps.db.query<{ metric: string; quantity: number; tool_name: string }>(
      `SELECT metric, quantity, tool_name FROM usage_records WHERE deployment_id = $1 ORDER BY "timestamp", quantity`,
      [t.deploymentId],
    );
    expect(usage.every((u) => u.metric === 'ai_tokens')).toBe(true);
    expect(usage.map((u) => u.quantity).reduce((a, b) => a + b, 0)).toBe(27);
    await expectLedgerConsistent(t);
  });

  it('rounds per call and never charges for nothing', () => {
    expect(creditsForTokens(0, 'premium')).toBe(0);
    expect(creditsForTokens(1, 'standard')).toBe(1);
    expect(creditsForTokens(1000, 'standard')).toBe(1);
    expect(creditsForTokens(1001, 'standard')).toBe(2);
    expect(creditsForTokens(334, 'advanced')).toBe(2);
    expect(creditsForTokens(100, 'premium')).toBe(1);
  });

  it('a call that outruns the purchased credits takes what is there and never goes below zero', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 3 });
    await account(t, 1000, 0);
    const r = await account(t, 5000, 0, 'o1'); // 50 credits due
    expect(r).toMatchObject({ creditsDue: 50, creditsCharged: 3 });
    expect(await purchased(t)).toBe(0);
    const rows = await h.deps.db.query<{ error: string | null; metadata: { credits_short: number } }>(
      `SELECT error, metadata FROM usage_records WHERE id = $1`,
      [r.usageId],
    );
    expect(rows[0]).toMatchObject({ error: 'insufficient_credits', metadata: { credits_short: 47 } });
    await expectLedgerConsistent(t);
  });

  it('the same request id is accounted once', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 10 });
    await account(t, 1000, 0);
    const first = await account(t, 2000, 0, 'gpt-4o-mini', 'resp_1');
    const again = await account(t, 2000, 0, 'gpt-4o-mini', 'resp_1');
    expect(first.replayed).toBe(false);
    expect(again).toMatchObject({ replayed: true, usageId: first.usageId, creditsCharged: 2, used: 3000 });
    expect(await purchased(t)).toBe(8);
  });

  it('refuses negative or fractional token counts with a 400 naming the field', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await expect(account(t, -1, 0)).rejects.toMatchObject({ code: 'VALIDATION_ERROR', fields: [{ field: 'inputTokens' }] });
    await expect(account(t, 0, 1.5)).rejects.toMatchObject({ code: 'VALIDATION_ERROR', fields: [{ field: 'outputTokens' }] });
    expect((await quota(t)).used).toBe(0);
  });
});

describe('refusal (429 AI_QUOTA_EXCEEDED)', () => {
  it('comes when the period’s tokens are used up and no purchased credits are left: x-should-retry false, Retry-After only within the hour before resets_at', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await available(t);
    await account(t, 999, 0);
    await available(t); // one token left
    await account(t, 1, 0);
    const err = await available(t).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    const appError = err as AppError;
    expect(appError.status).toBe(429);
    const resetsAt = (await quota(t)).resets_at;
    // Days before the reset: waiting cannot cure it, so no Retry-After (docs/ai-proxy.md, Refusals that waiting cannot cure).
    expect(appError.headers).toEqual({ 'x-should-retry': 'false' });
    expect(flatErrorBody(appError)).toEqual({
      error: 'quota_exceeded',
      code: 'AI_QUOTA_EXCEEDED',
      message: expect.stringContaining('resets at'),
      quota_exceeded: true,
      upgrade_url: 'http://creditgate.test/billing/upgrade',
      resets_at: resetsAt,
    });
    // Purchased credits keep AI usable past the limit.
    await grant(h, t.deploymentId, 1);
    await expect(available(t)).resolves.toBeUndefined();
  });

  it('an AI-disabled tier (sandbox) is refused as FEATURE_NOT_AVAILABLE, an unlimited one is always allowed', async () => {
    const sandbox = await createTenant(h, { tier: 'sandbox' });
    await expect(available(sandbox)).rejects.toMatchObject({ code: 'FEATURE_NOT_AVAILABLE', extra: { upgrade_url: 'http://creditgate.test/billing/upgrade' } });
    const enterprise = await createTenant(h, { tier: 'enterprise' });
    const r = await account(enterprise, 10_000_000, 0, 'o1');
    expect(r).toMatchObject({ limit: null, remaining: null, creditsCharged: 0, used: 10_000_000 });
    await expect(available(enterprise)).resolves.toBeUndefined();
  });
});

describe('overrides and resets', () => {
  it('an ai_tokens_limit override replaces the tier limit until it expires; usage keeps counting against the tier after', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const expiresAt = new Date(h.clock.now().getTime() + 60 * 60 * 1000).toISOString();
    await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { ai_tokens_limit: 2000, expires_at: expiresAt },
    });
    expect(await account(t, 1500, 0)).toMatchObject({ limit: 2000, remaining: 500, creditsCharged: 0 });
    h.clock.set(new Date(expiresAt).getTime() + 1000);
    expect(await quota(t)).toMatchObject({ used: 1500, limit: 1000, remaining: 0 });
    await expect(available(t)).rejects.toMatchObject({ code: 'AI_QUOTA_EXCEEDED' });
  });

  it('an operator reset sets AI usage to zero and is audited', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await account(t, 1000, 0);
    const res = await h.request({
      method: 'POST',
      url: `/api/v1/admin/deployments/${t.deploymentId}/usage/reset`,
      headers: adminHeaders(h),
      payload: { ai_tokens: true },
    });
    expect(res.statusCode).toBe(200);
    expect((await quota(t)).used).toBe(0);
    const audit = await h.deps.db.query(`SELECT 1 FROM audit_logs WHERE resource_id = $1 AND action = 'reset_usage'`, [t.deploymentId]);
    expect(audit).toHaveLength(1);
  });

  it('the period boundary resets AI usage exactly once, however many calls race over it; nothing rolls over', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 50 });
    await account(t, 900, 0);
    const { resets_at } = await quota(t);
    h.clock.set(new Date(resets_at).getTime() + 1000);
    const results = await Promise.all(Array.from({ length: 10 }, () => account(t, 10, 0)));
    expect(results.every((r) => r.creditsCharged === 0)).toBe(true);
    const q = await quota(t);
    expect(q).toMatchObject({ used: 100, limit: 1000, remaining: 900 });
    expect(new Date(q.resets_at).getTime()).toBeGreaterThan(new Date(resets_at).getTime());
    const resets = await h.deps.db.query(
      `SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind = 'period_reset' AND created_at >= $2`,
      [t.deploymentId, new Date(resets_at)],
    );
    expect(resets).toHaveLength(1);
    expect(await purchased(t)).toBe(50);
    await expectLedgerConsistent(t);
  });
});

describe('quota.threshold events (docs/limits.md, Quota alerts)', () => {
  it('fire at 80 % and 100 % of the AI token limit, once per threshold per period, into the outbox', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 100 });
    await account(t, 799, 0);
    expect(await events(t)).toEqual([]);
    await account(t, 1, 0); // 800 of 1,000: 80 %
    await account(t, 100, 0);
    await account(t, 150, 0); // 1,050: crosses 100 %
    await account(t, 500, 0); // nothing new
    const { resets_at } = await quota(t);
    const fired = await events(t);
    expect(fired).toEqual([
      {
        type: 'quota.threshold',
        organization_id: t.organizationId,
        data: { deployment_id: t.deploymentId, quota: 'ai_tokens', threshold: 80, used: 800, limit: 1000, period_end: resets_at },
      },
      {
        type: 'quota.threshold',
        organization_id: t.organizationId,
        data: { deployment_id: t.deploymentId, quota: 'ai_tokens', threshold: 100, used: 1050, limit: 1000, period_end: resets_at },
      },
    ]);
    // A reset in the same period and crossing again: still once per period.
    await h.request({
      method: 'POST',
      url: `/api/v1/admin/deployments/${t.deploymentId}/usage/reset`,
      headers: adminHeaders(h),
      payload: { ai_tokens: true },
    });
    await account(t, 1000, 0);
    expect(await events(t)).toHaveLength(2);
    // The next period fires again.
    h.clock.set(new Date(resets_at).getTime() + 1000);
    await account(t, 850, 0);
    const next = await events(t);
    expect(next).toHaveLength(3);
    expect(next[2]!.data).toMatchObject({ threshold: 80, used: 850 });
  });

  it('fire at 80 % and 100 % of monthly credits from the deduction itself; none for an unlimited tier', async () => {
    const t = await createTenant(h, { tier: 'trial', purchased: 20 }); // 100 monthly credits
    const record = () =>
      h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'search' } });
    for (let i = 0; i < 79; i++) expect(json(await record()).success).toBe(true);
    expect(await events(t)).toEqual([]);
    await record(); // 80 used
    for (let i = 0; i < 30; i++) await record(); // through 100 and into purchased credits
    const { resets_at } = await quota(t);
    const fired = await events(t);
    expect(fired.map((e) => e.data)).toEqual([
      { deployment_id: t.deploymentId, quota: 'monthly_credits', threshold: 80, used: 80, limit: 100, period_end: resets_at },
      { deployment_id: t.deploymentId, quota: 'monthly_credits', threshold: 100, used: 100, limit: 100, period_end: resets_at },
    ]);
    await expectLedgerConsistent(t);

    const enterprise = await createTenant(h, { tier: 'enterprise' });
    for (let i = 0; i < 3; i++) {
      await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(enterprise.apiKey), payload: { tool_name: 'search' } });
    }
    expect(await events(enterprise)).toEqual([]);
  });

  it('a lowered limit that leaves usage past a threshold fires it on the next use, once', async () => {
    const t = await createTenant(h, { tier: 'trial' }); // 100 monthly credits
    const record = () =>
      h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'search' } });
    for (let i = 0; i < 50; i++) await record();
    await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { monthly_credits: 60 },
    });
    expect(await events(t)).toEqual([]); // a limit change alone fires nothing
    await record(); // 51 of 60 = 85 %
    await record();
    expect((await events(t)).map((e) => e.data)).toEqual([
      expect.objectContaining({ quota: 'monthly_credits', threshold: 80, used: 51, limit: 60 }),
    ]);
  });
});
