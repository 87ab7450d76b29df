import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { delta, scrape } from '../../../test/metrics.js';
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
  it('the send past the budget is 403 BUDGET_EXCEEDED with budgetId and resetsAt (camelCase, like every proxy body), x-should-retry: false; nothing sent or charged; the refusal is counted', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'deployment', deploymentId: t.deploymentId, limitCredits: 1, window: 'hour' });
    rx.script({ status: 200 });
    expect((await send(t)).statusCode).toBe(200);
    const received = rx.received.length;
    const before = await scrape(h);
    const refused = await send(t);
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_deduction_refusals_total', { source: 'webhook', reason: 'budget_exceeded' })).toBe(1);
    expect(refused.statusCode).toBe(403);
    expect(json(refused)).toMatchObject({ error: 'budget_exceeded', code: 'BUDGET_EXCEEDED', budgetId, resetsAt: expect.any(String) });
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

describe('the webhook proxy and end users', () => {
  it('X-End-User-Id names the end user of a send: each end user has its own window of an end-user budget', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const budgetId = await b.addBudget({ organizationId: t.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 1, window: 'day' });
    rx.script({ status: 200 });
    const sendAs = (user: string) =>
      h.request({
        method: 'POST',
        url: '/api/v1/proxy/webhooks/send',
        headers: { ...creds(t), 'x-end-user-id': user },
        payload: { url: rx.url, payload: { n: 1 } },
      });
    expect((await sendAs('alice')).statusCode).toBe(200);
    const refused = await sendAs('alice');
    expect(refused.statusCode).toBe(403);
    expect(json(refused)).toMatchObject({ code: 'BUDGET_EXCEEDED', budgetId });
    expect((await sendAs('bob')).statusCode).toBe(200);
    // A send without an end user is not under an end-user budget.
    expect((await send(t)).statusCode).toBe(200);
    expect((await b.windowsOf(budgetId)).map((w) => [w.subject, w.spent_credits])).toEqual([
      ['alice', 1],
      ['bob', 1],
    ]);
    const bad = await h.request({
      method: 'POST',
      url: '/api/v1/proxy/webhooks/send',
      headers: { ...creds(t), 'x-end-user-id': '*' },
      payload: { url: rx.url, payload: { n: 1 } },
    });
    expect(bad.statusCode).toBe(400);
    expect(json(bad)).toMatchObject({ code: 'INVALID_REQUEST', fields: [{ field: 'X-End-User-Id' }] });
  });
});
