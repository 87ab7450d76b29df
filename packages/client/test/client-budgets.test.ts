import { randomUUID } from 'node:crypto';
import { type Budget, budgetRefusal, type ClientOptions, type Credentials, CreditgateError, createClient } from '@creditgate/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { balanceOf, connect, denial, text } from './mcp-rig.js';
import { type LiveService, startLiveService } from './support.js';

/**
 * The client's budget calls (docs/budgets.md, API) and how it tells a budget's refusal apart
 * (docs/budgets.md, Enforcement), against a real creditgate: what a call did is read back from the
 * database, not taken from the client's own answer.
 */
let live: LiveService;
let rx: Receiver;
beforeAll(async () => {
  live = await startLiveService({ webhookAllowPrivateNetworks: true });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await live.close();
});

const client = (credentials: Credentials, options: Partial<ClientOptions> = {}) => createClient(credentials, { baseUrl: live.baseUrl, retries: 0, ...options });
/** A tenant whose API key may manage budgets (`admin`) and spend (`write`). */
const managing = () => createTenant(live.h, { tier: 'launch', scopes: ['read', 'write', 'admin'] });
const stdio = (t: Tenant, options: Partial<ClientOptions> = {}) => client({ apiKey: t.apiKey }, options);

const budgetRows = (organizationId: string) =>
  live.h.deps.db.query<{ id: string; scope: string; limit_credits: string | null; window_kind: string; mode: string }>(
    'SELECT id, scope, limit_credits::text AS limit_credits, window_kind, mode FROM budgets WHERE organization_id = $1 ORDER BY created_at',
    [organizationId],
  );

async function rejection(promise: Promise<unknown>): Promise<CreditgateError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CreditgateError);
  return err as CreditgateError;
}

describe('budgets: an organization API key lists, creates, reads, changes and deletes them', () => {
  it('every call with an admin key, each effect read back from the database', async () => {
    const t = await managing();
    const c = stdio(t);
    const created = await c.budgets.create(t.organizationId, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 500, window: 'day' });
    expect(created).toMatchObject({
      organization_id: t.organizationId,
      scope: 'deployment',
      deployment_id: t.deploymentId,
      limit_credits: 500,
      window: 'day',
      mode: 'block',
      alert_thresholds: [80, 100],
      spent_credits: 0,
      remaining_credits: 500,
      subjects: null,
    });
    expect(await budgetRows(t.organizationId)).toEqual([{ id: created.id, scope: 'deployment', limit_credits: '500', window_kind: 'day', mode: 'block' }]);

    const perTool = await c.budgets.create(t.organizationId, { scope: 'tool', tool_name: '*', limit_credits: 50, window: 'hour', mode: 'alert' });
    // Both made at one instant of the service's clock: oldest first, ties in no set order.
    expect((await c.budgets.list(t.organizationId)).map((b: Budget) => b.id).sort()).toEqual([created.id, perTool.id].sort());
    expect(await c.budgets.get(t.organizationId, perTool.id)).toMatchObject({ id: perTool.id, tool_name: '*', subjects: [] });

    const changed = await c.budgets.update(t.organizationId, created.id, { limit_credits: 800, mode: 'alert', alert_thresholds: [100, 50] });
    expect(changed).toMatchObject({ id: created.id, limit_credits: 800, mode: 'alert', alert_thresholds: [50, 100], remaining_credits: 800 });
    expect((await budgetRows(t.organizationId)).find((r) => r.id === created.id)).toMatchObject({ limit_credits: '800', mode: 'alert' });

    const deleted = await c.budgets.delete(t.organizationId, perTool.id);
    expect(deleted).toMatchObject({ id: perTool.id, scope: 'tool' });
    expect((await budgetRows(t.organizationId)).map((r) => r.id)).toEqual([created.id]);
    const gone = await rejection(c.budgets.get(t.organizationId, perTool.id));
    expect(gone).toMatchObject({ code: 'NOT_FOUND', status: 404, error: null, isTransient: false });
  });

  it('the envelope errors become CreditgateError: a read key is FORBIDDEN 403, a bad body VALIDATION_ERROR 400 naming the field, another organization NOT_FOUND 404', async () => {
    const t = await managing();
    const budget = await stdio(t).budgets.create(t.organizationId, { scope: 'organization', limit_credits: 10, window: 'month' });
    const reader = await createTenant(live.h, { tier: 'launch', scopes: ['read'] });
    const own = await stdio(reader).budgets.list(reader.organizationId);
    expect(own).toEqual([]);
    const refused = await rejection(stdio(reader).budgets.create(reader.organizationId, { scope: 'organization', limit_credits: 10, window: 'month' }));
    expect(refused).toMatchObject({ code: 'FORBIDDEN', status: 403, message: expect.stringContaining('admin') });
    expect(await budgetRows(reader.organizationId)).toEqual([]);

    const invalid = await rejection(stdio(t).budgets.create(t.organizationId, { scope: 'deployment', limit_credits: 10, window: 'day' }));
    expect(invalid).toMatchObject({ code: 'VALIDATION_ERROR', status: 400 });
    expect(invalid.fields?.map((f) => f.field)).toContain('deployment_id');
    const fixed = await rejection(stdio(t).budgets.update(t.organizationId, budget.id, { scope: 'tool' }));
    expect(fixed).toMatchObject({ code: 'VALIDATION_ERROR', status: 400 });
    expect(fixed.fields?.map((f) => f.field)).toContain('scope');

    // Another organization's budget through this key's organization, and another organization's path.
    const other = await managing();
    expect(await rejection(stdio(other).budgets.get(other.organizationId, budget.id))).toMatchObject({ code: 'NOT_FOUND', status: 404 });
    expect((await rejection(stdio(other).budgets.list(t.organizationId))).status).toBe(404);
    expect(await budgetRows(t.organizationId)).toEqual([expect.objectContaining({ id: budget.id, limit_credits: '10' })]);
  });

  it('without an API key the calls throw MISSING_CREDENTIALS and nothing is sent', async () => {
    const t = await managing();
    const d = client({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret });
    for (const call of [() => d.budgets.list(t.organizationId), () => d.budgets.create(t.organizationId, { scope: 'organization', limit_credits: 1, window: 'day' })]) {
      expect(await rejection(call())).toMatchObject({ code: 'MISSING_CREDENTIALS', status: null });
    }
    expect(await budgetRows(t.organizationId)).toEqual([]);
  });
});

describe('budget refusals', () => {
  it('check, record and webhook send each name the budget and when it resets; the send is refused once, nothing delivered', async () => {
    const t = await managing();
    const c = stdio(t);
    const budget = await c.budgets.create(t.organizationId, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 1, window: 'hour' });
    expect(await c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ success: true, credits_used: 1 });
    const expected = { budgetId: budget.id, resetsAt: budget.resets_at, creditsRequired: 1 };

    const check = await c.stdio.checkEntitlement({ tool_name: 'search' });
    expect(check).toMatchObject({ allowed: false, reason: 'budget_exceeded' });
    expect(check.payment_required).toMatchObject({ reason: 'budget_exceeded', budget_id: budget.id, resets_at: budget.resets_at, credits_required: 1 });
    expect(budgetRefusal(check)).toMatchObject(expected);

    const record = await c.stdio.recordUsage({ tool_name: 'search' });
    expect(record).toMatchObject({ success: false, error: 'budget_exceeded', credits_used: 0 });
    expect(budgetRefusal(record)).toMatchObject(expected);

    const path = `/hooks/${randomUUID()}`;
    const send = client({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret }, { retries: 2 }).webhooks.send({ url: `${rx.url}${path}`, payload: { n: 1 } });
    const err = await rejection(send);
    expect(err).toMatchObject({ code: 'BUDGET_EXCEEDED', status: 403, error: 'budget_exceeded', budgetId: budget.id, resetsAt: budget.resets_at });
    expect(err).toMatchObject({ isBudgetExceeded: true, isTransient: false, shouldRetry: false });
    expect(budgetRefusal(err)).toMatchObject({ budgetId: budget.id, resetsAt: budget.resets_at });
    expect(rx.received.filter((r) => r.path === path)).toEqual([]);
    expect(await balanceOf(live, t)).toMatchObject({ used: 1, reserved: 0 });

    // Other refusals and answers are not budget refusals.
    const sandbox = await createTenant(live.h, { tier: 'sandbox' });
    expect(budgetRefusal(await stdio(sandbox).stdio.checkEntitlement({ tool_name: 'search' }))).toBeUndefined();
    const poor = await rejection(client({ deploymentId: sandbox.deploymentId, deploymentSecret: sandbox.deploymentSecret }).webhooks.send({ url: `${rx.url}${path}`, payload: {} }));
    expect(poor).toMatchObject({ code: 'INSUFFICIENT_CREDITS', isBudgetExceeded: false });
    expect(budgetRefusal(poor)).toBeUndefined();
  });

  it('a budget denial is never cached, and a record refused by a budget drops the cached "allowed" of its scope', async () => {
    const t = await managing();
    const c = stdio(t); // caches on (the default)
    const budget = await c.budgets.create(t.organizationId, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 1, window: 'day' });
    expect(await c.stdio.checkEntitlement({ tool_name: 'search' })).toMatchObject({ allowed: true }); // kept
    expect(await c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ success: true });
    expect(await c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ success: false, error: 'budget_exceeded' });
    // The kept "allowed" went with the refused record: this check asks the service.
    expect(await c.stdio.checkEntitlement({ tool_name: 'search' })).toMatchObject({ allowed: false, reason: 'budget_exceeded' });
    // The denial was not kept: once the limit is raised, the next check (no forceRefresh) is allowed.
    await c.budgets.update(t.organizationId, budget.id, { limit_credits: 5 });
    expect(await c.stdio.checkEntitlement({ tool_name: 'search' })).toMatchObject({ allowed: true, reason: null });
  });

  it("checks are kept per end user: one end user over an end-user budget is refused, another is not, whatever the cache holds", async () => {
    const t = await managing();
    const c = stdio(t);
    await c.budgets.create(t.organizationId, { scope: 'end_user', end_user_id: '*', limit_credits: 1, window: 'day' });
    expect(await c.stdio.checkEntitlement({ tool_name: 'search', end_user_id: 'bob' })).toMatchObject({ allowed: true }); // kept for bob
    expect(await c.stdio.recordUsage({ tool_name: 'search', end_user_id: 'alice' })).toMatchObject({ success: true });
    expect(await c.stdio.checkEntitlement({ tool_name: 'search', end_user_id: 'alice' })).toMatchObject({ allowed: false, reason: 'budget_exceeded' });
    expect(await c.stdio.checkEntitlement({ tool_name: 'search', end_user_id: 'bob' })).toMatchObject({ allowed: true });
    expect(await c.stdio.checkEntitlement({ tool_name: 'search', end_user_id: 'alice' })).toMatchObject({ allowed: false, reason: 'budget_exceeded' });
  });

  it('the MCP middleware refuses a call over a budget with budget_id and resets_at beside the reason; the tool does not run, nothing is charged', async () => {
    const t = await managing();
    const budget = await stdio(t).budgets.create(t.organizationId, { scope: 'organization', limit_credits: 1, window: 'week' });
    const m = await connect(live, t);
    expect((await m.client.callTool({ name: 'search', arguments: { q: 'first' } })).isError).toBeFalsy();
    const refused = await m.client.callTool({ name: 'search', arguments: { q: 'second' } });
    expect(refused.isError).toBe(true);
    const info = denial(refused) as Record<string, unknown>;
    expect(info).toMatchObject({ reason: 'budget_exceeded', tool_name: 'search', budget_id: budget.id, resets_at: budget.resets_at });
    expect(info).not.toHaveProperty('upgrade_url');
    expect(text(refused)).toContain('Buying credits does not lift a budget');
    expect(refused.structuredContent).toMatchObject({ error: 'creditgate_denied', reason: 'budget_exceeded', budget_id: budget.id });
    expect(m.runs.search).toBe(1);
    expect(await balanceOf(live, t)).toMatchObject({ used: 1, reserved: 0 });
    await m.close();
  });
});
