import { randomUUID } from 'node:crypto';
import { type ClientOptions, type Credentials, CreditgateError, createClient } from '@creditgate/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey, revokeApiKey } from '../../../src/modules/api-keys/service.js';
import { adminHeaders, createTenant, type Tenant, unique } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { type LiveService, startLiveService } from './support.js';

/**
 * Every method of the client against a real creditgate: what each call did is read back from the
 * database or the operator API, not taken from the client's own answer.
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

const client = (credentials: Credentials, options: Partial<ClientOptions> = {}) =>
  createClient(credentials, { baseUrl: live.baseUrl, retries: 0, ...options });
const stdio = (t: Tenant) => client({ apiKey: t.apiKey });
const service = () => client({ serviceKey: live.h.config.mcpServiceKey });
const deployment = (t: Tenant) => client({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret });

interface Balance {
  monthly_used: number;
  purchased: number;
  reserved: number;
  available: number;
}
async function balanceOf(t: Tenant): Promise<Balance> {
  const res = await live.h.request({ method: 'GET', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(live.h) });
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { balance: Balance }).balance;
}
const usageRows = (t: Tenant) =>
  live.h.deps.db.query<{ id: string; success: boolean; quantity: string; tool_name: string; mcp_user_id: string | null; invocation_id: string | null }>(
    'SELECT id, success, quantity::text AS quantity, tool_name, mcp_user_id, invocation_id FROM usage_records WHERE deployment_id = $1 ORDER BY timestamp',
    [t.deploymentId],
  );
/** A tool name mapped to `action` through the operator API. */
async function toolFor(action: string): Promise<string> {
  const tool = unique(`tool-${action}`);
  const res = await live.h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${tool}`, headers: adminHeaders(live.h), payload: { action } });
  expect(res.statusCode, res.body).toBe(200);
  return tool;
}
async function rejection(promise: Promise<unknown>): Promise<CreditgateError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CreditgateError);
  return err as CreditgateError;
}

describe('stdio mode (organization API key)', () => {
  it('check answers allowed with the cost, and a sandbox tier is denied without throwing', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const advanced = await toolFor('task_advanced');
    expect(await stdio(t).stdio.checkEntitlement({ tool_name: advanced })).toMatchObject({ allowed: true, credit_cost: 3, tier: 'launch', reason: null });
    const sandbox = await createTenant(live.h, { tier: 'sandbox' });
    expect(await stdio(sandbox).stdio.checkEntitlement({ tool_name: 'search' })).toMatchObject({ allowed: false, credit_cost: 0, reason: 'sandbox_tier' });
    expect(await usageRows(t)).toHaveLength(0);
  });

  it('record deducts; it generates an invocation_id, and a repeat with that id is replayed and deducts once', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const c = stdio(t);
    const first = await c.stdio.recordUsage({ tool_name: 'search', metadata: { q: 'otters' } });
    expect(first).toMatchObject({ success: true, credits_used: 1, credits_remaining: 1999, error: null, replayed: false });
    expect(first.invocation_id).toEqual(expect.any(String));
    expect(first.invocation_id!.length).toBeGreaterThan(0);
    const again = await c.stdio.recordUsage({ tool_name: 'search', metadata: { q: 'otters' }, invocation_id: first.invocation_id! });
    expect(again).toMatchObject({ success: true, credits_used: 1, usage_id: first.usage_id, replayed: true });
    const rows = await usageRows(t);
    expect(rows).toEqual([expect.objectContaining({ id: first.usage_id, success: true, quantity: '1', tool_name: 'search', invocation_id: first.invocation_id })]);
    expect(await balanceOf(t)).toMatchObject({ monthly_used: 1, available: 1999 });
    // Two records without an id are two calls.
    await c.stdio.recordUsage({ tool_name: 'search' });
    expect(await usageRows(t)).toHaveLength(2);
  });

  it('reserve holds the cost; releaseReservation gives it back; getInvocation follows reserved → released', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const c = stdio(t);
    const advanced = await toolFor('task_advanced');
    const id = `inv/${randomUUID()}?#%`; // path-unsafe characters: the client encodes them
    const held = await c.stdio.checkEntitlement({ tool_name: advanced, reserve: true, invocation_id: id });
    expect(held).toMatchObject({ allowed: true, credit_cost: 3, invocation_id: id });
    expect(Date.parse(held.reservation_expires_at!)).not.toBeNaN();
    expect(await c.getInvocation(id)).toMatchObject({ invocation_id: id, deployment_id: t.deploymentId, status: 'reserved', reserved_credits: 3, usage_id: null });
    expect(await balanceOf(t)).toMatchObject({ reserved: 3, available: 1997 });
    expect(await c.releaseReservation(id)).toEqual({ invocation_id: id, status: 'released', released_credits: 3 });
    expect(await c.getInvocation(id)).toMatchObject({ status: 'released', reserved_credits: 0, credits_used: 0 });
    expect(await balanceOf(t)).toMatchObject({ reserved: 0, monthly_used: 0, available: 2000 });
  });

  it('reserve → record is recorded; the service refunds (an organization key may not) and the invocation reads refunded', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const c = stdio(t);
    const advanced = await toolFor('task_advanced');
    const id = `inv-${randomUUID()}`;
    await c.stdio.checkEntitlement({ tool_name: advanced, reserve: true, invocation_id: id });
    const recorded = await c.stdio.recordUsage({ tool_name: advanced, invocation_id: id });
    expect(recorded).toMatchObject({ success: true, credits_used: 3, invocation_id: id });
    expect(await c.getInvocation(id)).toMatchObject({ status: 'recorded', usage_id: recorded.usage_id, credits_used: 3, reserved_credits: 0 });
    expect(await balanceOf(t)).toMatchObject({ reserved: 0, monthly_used: 3 });
    // Only the platform refunds (docs/metering.md, Refunds): the organization's own key is refused.
    expect(await rejection(c.refundUsage(recorded.usage_id!, { amount: 1, reason: 'slow answer' }))).toMatchObject({ code: 'FORBIDDEN', status: 403 });
    const partial = await service().refundUsage(recorded.usage_id!, { amount: 1, reason: 'slow answer' });
    expect(partial).toMatchObject({ usage_id: recorded.usage_id, credits_refunded: 1, credits_forfeited: 0, total_refunded: 1, credits_remaining: 1998 });
    // The service key refunds the rest; the same idempotency key twice refunds once.
    const key = randomUUID();
    const rest = await service().refundUsage(recorded.usage_id!, { reason: 'tool failed', idempotency_key: key });
    expect(rest).toMatchObject({ credits_refunded: 2, total_refunded: 3, credits_remaining: 2000 });
    expect(await service().refundUsage(recorded.usage_id!, { reason: 'tool failed', idempotency_key: key })).toMatchObject({ refund_id: rest.refund_id, total_refunded: 3 });
    expect(await c.getInvocation(id)).toMatchObject({ status: 'refunded', credits_refunded: 3 });
    expect(await balanceOf(t)).toMatchObject({ monthly_used: 0, available: 2000 });
  });
});

describe('service mode (X-MCP-Service-Key)', () => {
  it('resolveDeployment by user id and by external id; an unknown user is no_deployment_found', async () => {
    const externalId = unique('idp-user');
    const t = await createTenant(live.h, { tier: 'growth', externalId });
    const expected = { deployment_id: t.deploymentId, organization_id: t.organizationId, tier: 'growth', mcp_enabled: true, error: null };
    expect(await service().service.resolveDeployment(t.userId)).toEqual(expected);
    expect(await service().service.resolveDeployment(externalId)).toEqual(expected);
    expect(await service().service.resolveDeployment(unique('nobody'))).toEqual({
      deployment_id: null,
      organization_id: null,
      tier: null,
      mcp_enabled: false,
      error: 'no_deployment_found',
    });
  });

  it('checkEntitlement reports credits_available; recordUsage deducts with the mcp_user_id; getInvocation names the deployment', async () => {
    const t = await createTenant(live.h, { tier: 'launch', purchased: 10 });
    const s = service();
    const rag = await toolFor('rag_query');
    expect(await s.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: rag })).toEqual({
      allowed: true,
      tier: 'launch',
      credit_cost: 2,
      credits_available: 2010,
      reason: null,
    });
    const used = await s.service.recordUsage({ deployment_id: t.deploymentId, tool_name: rag, mcp_user_id: 'end-user-7' });
    expect(used).toMatchObject({ success: true, credits_used: 2, credits_remaining: 2008, error: null, replayed: false });
    expect(await usageRows(t)).toEqual([expect.objectContaining({ quantity: '2', tool_name: rag, mcp_user_id: 'end-user-7' })]);
    expect(await balanceOf(t)).toMatchObject({ monthly_used: 2, purchased: 10, available: 2008 });
    expect(await s.getInvocation(used.invocation_id!, { deploymentId: t.deploymentId })).toMatchObject({ status: 'recorded', deployment_id: t.deploymentId });
    const unknown = await s.service.checkEntitlement({ deployment_id: randomUUID(), tool_name: rag });
    expect(unknown).toMatchObject({ allowed: false, reason: 'deployment_not_found', credits_available: null });
  });

  it('creditCosts lists the ten default actions (docs/metering.md, Costs of tools)', async () => {
    const { costs } = await service().service.creditCosts();
    const defaults = [
      ['crew_execute', 5],
      ['generate', 3],
      ['platform_basic', 1],
      ['rag_ingest', 2],
      ['rag_query', 2],
      ['tao_analytics', 2],
      ['tao_evaluate', 3],
      ['tao_trace', 1],
      ['task_advanced', 3],
      ['task_basic', 1],
    ] as const;
    // Other test files of this worker share the database and may add actions: each default action is there once.
    for (const [action, credits] of defaults) {
      expect(costs.filter((c) => c.action === action), action).toEqual([{ action, credits, description: null }]);
    }
  });
});

describe('deployment credentials: entitlements, AI quota, webhook proxy', () => {
  it("entitlements.check is the tier's snapshot; ai.quota and webhooks.quota read the balance", async () => {
    const t = await createTenant(live.h, { tier: 'launch', purchased: 5 });
    const d = deployment(t);
    const snapshot = await d.entitlements.check();
    expect(snapshot).toMatchObject({
      status: 'active',
      tier: 'launch',
      features: { ai_enabled: true, billing_enabled: true, custom_domain: true, white_label: false, mcp_enabled: true, ai_monthly_limit: 10_000, api_rate_limit: 2_000, support_level: 'email' },
      quotas: { ai_tokens: { used: 0, limit: 10_000, remaining: 10_000 } },
      message: null,
      next_check_seconds: 300,
    });
    const { available } = await balanceOf(t);
    expect(available).toBe(2005);
    expect(await d.ai.quota()).toMatchObject({ tier: 'launch', used: 0, limit: 10_000, remaining: 10_000, credits_available: available, credits_per_standard: 1, credits_per_advanced: 3, credits_per_premium: 10 });
    expect(await d.webhooks.quota()).toMatchObject({ creditsAvailable: available, creditsPerWebhook: 1, webhooksAvailable: available });
  });

  it('webhooks.send delivers once and charges once even when replayed; deliveries and delivery read it back', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const d = deployment(t);
    rx.script({ status: 202, body: 'accepted' });
    const path = `/hooks/${randomUUID()}`;
    const input = { url: `${rx.url}${path}`, payload: { order: 42 }, event_type: 'order.paid', idempotency_key: randomUUID() };
    const sent = await d.webhooks.send(input);
    expect(sent).toMatchObject({ success: true, statusCode: 202, responseBody: 'accepted', error: null, creditsUsed: 1, creditsRemaining: 1999, attempts: 1, replayed: false });
    const again = await d.webhooks.send(input);
    expect(again).toMatchObject({ webhookId: sent.webhookId, success: true, replayed: true });
    const hits = rx.received.filter((r) => r.path === path);
    expect(hits).toHaveLength(1);
    expect(JSON.parse(hits[0]!.body.toString())).toEqual({ order: 42 });
    expect(await balanceOf(t)).toMatchObject({ available: 1999 });
    live.h.clock.advance(1_000); // newest first: the service's clock decides the order
    const second = await d.webhooks.send({ url: `${rx.url}${path}`, payload: { order: 43 } });
    const page1 = await d.webhooks.deliveries({ limit: 1 });
    expect(page1.data.map((x) => x.id)).toEqual([second.webhookId]);
    const page2 = await d.webhooks.deliveries({ limit: 1, cursor: page1.next_cursor! });
    expect(page2).toMatchObject({ data: [expect.objectContaining({ id: sent.webhookId })], next_cursor: null });
    expect(await d.webhooks.delivery(sent.webhookId)).toMatchObject({ id: sent.webhookId, status: 'delivered', status_code: 202, attempt_count: 1, event_type: 'order.paid', webhook_id: null });
  });
});

describe('errors', () => {
  it('webhooks.send without credits: INSUFFICIENT_CREDITS with creditsRequired and creditsAvailable, nothing sent', async () => {
    const t = await createTenant(live.h, { tier: 'sandbox' });
    const path = `/hooks/${randomUUID()}`;
    const err = await rejection(deployment(t).webhooks.send({ url: `${rx.url}${path}`, payload: {} }));
    expect(err).toMatchObject({ code: 'INSUFFICIENT_CREDITS', status: 403, error: 'insufficient_credits', creditsRequired: 1, creditsAvailable: 0 });
    expect(rx.received.filter((r) => r.path === path)).toHaveLength(0);
  });

  it('a revoked, unknown or malformed API key is UNAUTHORIZED 401', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const { apiKey, key } = await createApiKey(live.h.ctx, { organizationId: t.organizationId, name: 'soon revoked', scopes: ['read', 'write'] });
    expect((await client({ apiKey: key }).stdio.checkEntitlement({ tool_name: 'search' })).allowed).toBe(true);
    await revokeApiKey(live.h.ctx, t.organizationId, apiKey.id);
    const unknown = `cg_${'A'.repeat(36)}`;
    for (const bad of [key, unknown, 'cg_not-a-key']) {
      const err = await rejection(client({ apiKey: bad }).stdio.checkEntitlement({ tool_name: 'search' }));
      expect(err, bad).toMatchObject({ code: 'UNAUTHORIZED', status: 401, error: 'unauthorized' });
    }
  });

  it('a read-only key may check but not record: INSUFFICIENT_SCOPE 403, nothing deducted', async () => {
    const t = await createTenant(live.h, { tier: 'launch', scopes: ['read'] });
    expect((await stdio(t).stdio.checkEntitlement({ tool_name: 'search' })).allowed).toBe(true);
    const err = await rejection(stdio(t).stdio.recordUsage({ tool_name: 'search' }));
    expect(err).toMatchObject({ code: 'INSUFFICIENT_SCOPE', status: 403, error: 'forbidden' });
    expect(await usageRows(t)).toHaveLength(0);
    expect(await balanceOf(t)).toMatchObject({ monthly_used: 0 });
  });

  it('a wrong deployment secret is INVALID_DEPLOYMENT_CREDENTIALS 401, like an unknown deployment', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const other = await createTenant(live.h, { tier: 'launch' });
    for (const creds of [
      { deploymentId: t.deploymentId, deploymentSecret: other.deploymentSecret },
      { deploymentId: randomUUID(), deploymentSecret: t.deploymentSecret },
    ]) {
      const err = await rejection(client(creds).entitlements.check());
      expect(err).toMatchObject({ code: 'INVALID_DEPLOYMENT_CREDENTIALS', status: 401 });
    }
  });

  it('a method needing other credentials is MISSING_CREDENTIALS, and no request leaves the client', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    let requests = 0;
    const counting: typeof fetch = (input, init) => {
      requests++;
      return fetch(input, init);
    };
    const c = client({ apiKey: t.apiKey }, { fetch: counting });
    const d = client({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret }, { fetch: counting });
    const calls: Array<() => Promise<unknown>> = [
      () => c.service.resolveDeployment(t.userId),
      () => c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: 'search' }),
      () => c.service.recordUsage({ deployment_id: t.deploymentId, tool_name: 'search' }),
      () => c.service.creditCosts(),
      () => c.entitlements.check(),
      () => c.ai.quota(),
      () => c.webhooks.send({ url: rx.url, payload: {} }),
      () => d.stdio.checkEntitlement({ tool_name: 'search' }),
      () => d.stdio.recordUsage({ tool_name: 'search' }),
      () => d.getInvocation('x'),
    ];
    for (const call of calls) expect(await rejection(call())).toMatchObject({ code: 'MISSING_CREDENTIALS', status: null });
    expect(requests).toBe(0);
    expect(await usageRows(t)).toHaveLength(0);
  });

  it('an invalid body is INVALID_REQUEST 400 naming the field; nothing is recorded', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const err = await rejection(stdio(t).stdio.recordUsage({ tool_name: 't'.repeat(201) }));
    expect(err).toMatchObject({ code: 'INVALID_REQUEST', status: 400, error: 'invalid_request' });
    expect(err.fields?.length).toBeGreaterThan(0);
    expect(JSON.stringify(err.fields)).toContain('tool_name');
    const empty = await rejection(service().service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: '' }));
    expect(empty).toMatchObject({ code: 'INVALID_REQUEST', status: 400 });
    expect(await usageRows(t)).toHaveLength(0);
  });

  it("tenant isolation: org A's key cannot read or release org B's invocation (404), nor refund anything (403)", async () => {
    const a = await createTenant(live.h, { tier: 'launch' });
    const b = await createTenant(live.h, { tier: 'launch' });
    const reservedId = `inv-${randomUUID()}`;
    await stdio(b).stdio.checkEntitlement({ tool_name: 'search', reserve: true, invocation_id: reservedId });
    const recorded = await stdio(b).stdio.recordUsage({ tool_name: 'search' });
    for (const call of [
      () => stdio(a).getInvocation(reservedId),
      () => stdio(a).getInvocation(recorded.invocation_id!),
      () => stdio(a).releaseReservation(reservedId),
    ]) {
      expect(await rejection(call())).toMatchObject({ code: 'NOT_FOUND', status: 404 });
    }
    expect(await rejection(stdio(a).refundUsage(recorded.usage_id!, { reason: 'not mine' }))).toMatchObject({ code: 'FORBIDDEN', status: 403 });
    expect(await stdio(b).getInvocation(reservedId)).toMatchObject({ status: 'reserved', reserved_credits: 1 });
    expect(await balanceOf(b)).toMatchObject({ reserved: 1, monthly_used: 1 });
  });
});
