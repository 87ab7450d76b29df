import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/**
 * The webhook proxy's charge under a budget (docs/budgets.md, Enforcement): a send that would cross a
 * block budget is 403 BUDGET_EXCEEDED naming the budget and when it resets, says it is not worth
 * retrying now, delivers nothing and charges nothing.
 */
let h: Harness;
let rx: Receiver;
beforeAll(async () => {
  // Real time as the start: receivers check signature timestamps against their own clock.
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 400 }, new Date().toISOString());
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});
const b = budgetFixtures(() => h);
const creds = (t: Tenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });
const send = (t: Tenant) =>
  h.request({ method: 'POST', url: '/api/v1/proxy/webhooks/send', headers: creds(t), payload: { url: rx.url, payload: { n: 1 } } });

describe('the webhook proxy under a budget', () => {
  it('the send past the budget is 403 BUDGET_EXCEEDED with budget_id and resets_at, x-should-retry: false; nothing sent or charged', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'deployment', deploymentId: t.deploymentId, limitCredits: 1, window: 'hour' });
    rx.script({ status: 200 });
    expect((await send(t)).statusCode).toBe(200);
    const received = rx.received.length;
    const refused = await send(t);
    expect(refused.statusCode).toBe(403);
    expect(json(refused)).toMatchObject({ error: 'budget_exceeded', code: 'BUDGET_EXCEEDED', budget_id: budgetId, resets_at: expect.any(String) });
    expect(refused.headers['x-should-retry']).toBe('false');
    expect(rx.received.length).toBe(received);
    const charged = await h.deps.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM usage_records WHERE deployment_id = $1 AND success AND metric = 'webhook_send'",
      [t.deploymentId],
    );
    expect(charged[0]!.n).toBe(1);
    expect((await b.windowsOf(budgetId)).map((w) => w.spent_credits)).toEqual([1]);
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});
