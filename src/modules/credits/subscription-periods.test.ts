import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY, addMonths } from '../../clock.js';
import { createHarness, createTenant, type Harness, json, type Tenant, unique } from '../../../test/harness.js';
import { accountAiTokens } from '../quotas/ai-tokens.js';

/**
 * docs/decisions.md, Period with a subscription: with a subscription, periods follow its billing cycle, not the deployment's anchor; when
 * the renewal has not been reported yet, the monthly anniversaries of its start carry on. AI usage
 * and the monthly allocation reset at those boundaries, once.
 */
let h: Harness;

beforeAll(async () => {
  h = await createHarness({}, '2026-01-15T12:00:00.000Z');
});
afterAll(async () => {
  await h.close();
});

const quota = async (t: Tenant) =>
  json<{ used: number; resets_at: string }>(
    await h.request({
      method: 'GET',
      url: '/api/v1/ai/quota',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
    }),
  );

async function subscribe(t: Tenant, start: Date, end: Date, status = 'active'): Promise<void> {
  await h.deps.db.query(
    `INSERT INTO subscriptions (organization_id, stripe_subscription_id, stripe_customer_id, status, current_period_start, current_period_end)
     VALUES ($1, $2, $3, $4, $5, $6)`,
    [t.organizationId, unique('sub'), unique('cus'), status, start, end],
  );
}

describe('periods with a subscription', () => {
  it('the next period is the subscription’s; past its unreported end, monthly anniversaries of its start', async () => {
    h.clock.set('2026-01-15T12:00:00.000Z');
    const t = await createTenant(h, { tier: 'trial' });
    const anchorEnd = addMonths(new Date('2026-01-15T12:00:00.000Z'), 1);
    expect((await quota(t)).resets_at).toBe(anchorEnd.toISOString());

    // Subscribed ten days in: its cycle runs Jan 25 → Feb 25.
    const subStart = new Date('2026-01-25T08:00:00.000Z');
    const subEnd = addMonths(subStart, 1);
    await subscribe(t, subStart, subEnd);
    const ctx = { ...h.ctx, actor: { type: 'system' as const } };
    await accountAiTokens(ctx, { id: t.deploymentId, organization_id: t.organizationId }, { inputTokens: 400, outputTokens: 0, model: 'gpt-4o-mini' });

    // The current period is not cut short; at its end the subscription's cycle takes over.
    h.clock.set(anchorEnd.getTime() + 1000);
    expect(await quota(t)).toMatchObject({ used: 0, resets_at: subEnd.toISOString() });
    await accountAiTokens(ctx, { id: t.deploymentId, organization_id: t.organizationId }, { inputTokens: 100, outputTokens: 0, model: 'gpt-4o-mini' });

    // The renewal was not reported: the next period is the anniversary of the subscription's start.
    h.clock.set(subEnd.getTime() + DAY);
    expect(await quota(t)).toMatchObject({ used: 0, resets_at: addMonths(subStart, 2).toISOString() });
    const resets = await h.deps.db.query<{ reason: string }>(
      `SELECT reason FROM credit_ledger WHERE deployment_id = $1 AND kind = 'period_reset' ORDER BY id`,
      [t.deploymentId],
    );
    expect(resets.map((r) => r.reason)).toEqual([
      'first period',
      `period ${subStart.toISOString()}`,
      `period ${subEnd.toISOString()}`,
    ]);
  });

  it('a canceled subscription does not set periods', async () => {
    h.clock.set('2026-03-10T00:00:00.000Z');
    const t = await createTenant(h, { tier: 'trial' });
    await subscribe(t, new Date('2026-03-01T00:00:00.000Z'), new Date('2026-03-20T00:00:00.000Z'), 'canceled');
    h.clock.set('2026-04-10T00:00:01.000Z');
    expect((await quota(t)).resets_at).toBe('2026-05-10T00:00:00.000Z');
  });
});
