import type { MeteringEvent } from '@creditgate/client/mcp';
import { withMetering } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { CallToolResult, JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { createTenant, signUpAsMember, type Tenant } from '../../../test/harness.js';
import { type LiveService, type Relay, startLiveService, startRelay } from './support.js';

let live: LiveService;
/** Runs inside the search tool: a test's way to change the world while a tool runs. */
let toolHook: (() => void) | undefined;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live.close();
});

/** The client side of an in-memory pair that presents the signed-in user, as an HTTP transport with OAuth would. */
class SignedInTransport extends InMemoryTransport {
  authInfo: AuthInfo | undefined;
  override send(message: JSONRPCMessage, options?: { relatedRequestId?: string | number; authInfo?: AuthInfo }): Promise<void> {
    return super.send(message, { ...options, ...(this.authInfo ? { authInfo: this.authInfo } : {}) });
  }
}

const asUser = (userId: string): AuthInfo => ({ token: 'opaque', clientId: 'test-client', scopes: [], extra: { userId } });

async function connect(options: { baseUrl?: string; userId?: string; onOutage?: 'fail_open' } = {}) {
  const server = new McpServer({ name: 'hosted', version: '1.0.0' });
  const events: MeteringEvent[] = [];
  const requests: string[] = [];
  const meter = withMetering(server, {
    serviceKey: live.h.config.mcpServiceKey,
    baseUrl: options.baseUrl ?? live.baseUrl,
    retries: 0,
    onOutage: options.onOutage,
    logger: { warn: () => {}, error: () => {} },
    onEvent: (event) => events.push(event),
    fetch: (input, init) => {
      requests.push(new URL(String(input)).pathname);
      return fetch(input, init);
    },
  });
  server.registerTool('search', { description: 'Search', inputSchema: { q: z.string() } }, async ({ q }) => {
    toolHook?.();
    return { content: [{ type: 'text', text: `results for ${q}` }] };
  });
  const serverTransport = new InMemoryTransport();
  const clientTransport = new SignedInTransport();
  (clientTransport as unknown as { _otherTransport: InMemoryTransport })._otherTransport = serverTransport;
  (serverTransport as unknown as { _otherTransport: InMemoryTransport })._otherTransport = clientTransport;
  if (options.userId) clientTransport.authInfo = asUser(options.userId);
  const client = new Client({ name: 'test-client', version: '1.0.0' });
  await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
  return {
    client,
    meter,
    events,
    requests,
    transport: clientTransport,
    close: async () => {
      await meter.close();
      await client.close();
      await server.close();
    },
  };
}

async function usageRows(tenant: Tenant) {
  return live.h.deps.db.query<{ success: boolean; quantity: string; mcp_user_id: string | null }>(
    'SELECT success, quantity::text AS quantity, mcp_user_id FROM usage_records WHERE deployment_id = $1 ORDER BY timestamp',
    [tenant.deploymentId],
  );
}

const budgets = budgetFixtures(() => live.h);

const denial = (result: unknown) => (result as CallToolResult)._meta?.['io.creditgate/denial'] as { reason: string } | undefined;

describe('withMetering in service mode (service key, user from authInfo)', () => {
  it("charges the user's organization once per call, resolving its deployment once per session", async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect({ userId: tenant.userId });
    const first = await c.client.callTool({ name: 'search', arguments: { q: 'a' } });
    const second = await c.client.callTool({ name: 'search', arguments: { q: 'b' } });
    expect(first.isError).toBeFalsy();
    expect(second.isError).toBeFalsy();
    expect(await usageRows(tenant)).toEqual([
      { success: true, quantity: '1', mcp_user_id: tenant.userId },
      { success: true, quantity: '1', mcp_user_id: tenant.userId },
    ]);
    expect(c.requests.filter((p) => p === '/api/v1/mcp/resolve-deployment')).toHaveLength(1);
    expect(c.requests.filter((p) => p === '/api/v1/mcp/usage')).toHaveLength(2);
    await c.close();
  });

  it('finds the user by the external id set for users who sign in elsewhere', async () => {
    const externalId = `auth0|${Date.now()}-${Math.random()}`;
    const tenant = await createTenant(live.h, { tier: 'growth', externalId });
    const c = await connect({ userId: externalId });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'ext' } });
    expect(result.isError).toBeFalsy();
    expect(await usageRows(tenant)).toEqual([expect.objectContaining({ success: true, mcp_user_id: externalId })]);
    await c.close();
  });

  it('a request without a user is refused (no_user) and nothing is asked of the platform', async () => {
    const c = await connect();
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'anon' } });
    expect(result.isError).toBe(true);
    expect(denial(result)).toMatchObject({ reason: 'no_user' });
    expect(c.requests).toEqual([]);
    await c.close();
  });

  it('a user without an organization gets no_deployment_found; a sandbox user gets sandbox_tier; neither is charged', async () => {
    const sandbox = await createTenant(live.h, { tier: 'sandbox' });
    const c = await connect({ userId: '00000000-0000-4000-8000-000000000000' });
    expect(denial(await c.client.callTool({ name: 'search', arguments: { q: 'x' } }))).toMatchObject({ reason: 'no_deployment_found' });
    c.transport.authInfo = asUser(sandbox.userId);
    expect(denial(await c.client.callTool({ name: 'search', arguments: { q: 'x' } }))).toMatchObject({ reason: 'sandbox_tier' });
    expect(await usageRows(sandbox)).toEqual([]);
    await c.close();
  });

  it('an end-user budget stops one heavy end user before the tool runs (the hold names the user); another end user still runs', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const other = await signUpAsMember(live.h, tenant.organizationId, 'member');
    // Each end user of the organization: 2 credits a day (search costs 1).
    await budgets.addBudget({ organizationId: tenant.organizationId, scope: 'end_user', endUserId: '*', limitCredits: 2, window: 'day' });
    let runs = 0;
    toolHook = () => runs++;
    try {
      const c = await connect({ userId: tenant.userId });
      const answers = [];
      for (let i = 0; i < 4; i++) answers.push(await c.client.callTool({ name: 'search', arguments: { q: `q${i}` } }));
      expect(runs).toBe(2);
      expect(answers.map((a) => denial(a)?.reason ?? 'ran')).toEqual(['ran', 'ran', 'budget_exceeded', 'budget_exceeded']);
      c.transport.authInfo = asUser(other.userId);
      expect((await c.client.callTool({ name: 'search', arguments: { q: 'theirs' } })).isError).toBeFalsy();
      expect(runs).toBe(3);
      expect((await usageRows(tenant)).map((r) => r.mcp_user_id)).toEqual([tenant.userId, tenant.userId, other.userId]);
      await c.close();
    } finally {
      toolHook = undefined;
    }
  });

  it("one user's idempotency key cannot replay another user's paid call", async () => {
    const a = await createTenant(live.h, { tier: 'launch' });
    const b = await createTenant(live.h, { tier: 'launch' });
    const c = await connect({ userId: a.userId });
    const call = () => c.client.callTool({ name: 'search', arguments: { q: 'same' }, _meta: { 'io.creditgate/idempotency-key': 'shared-key' } });
    await call();
    await call();
    c.transport.authInfo = asUser(b.userId);
    await call();
    expect(await usageRows(a)).toHaveLength(1);
    expect(await usageRows(b)).toHaveLength(1);
    await c.close();
  });

  it('keeps usage in memory through an outage and records it when the platform is back', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay: Relay = await startRelay(live.baseUrl);
    const c = await connect({ baseUrl: relay.baseUrl, userId: tenant.userId });
    expect((await c.client.callTool({ name: 'search', arguments: { q: 'warm' } })).isError).toBeFalsy();
    // The platform goes away while the next tool runs: its check got through, its record does not.
    c.events.length = 0;
    toolHook = () => relay.down();
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'offline' } }).finally(() => {
      toolHook = undefined;
    });
    const server = c.meter;
    expect(result.isError).toBeFalsy();
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'queued']);
    expect(await usageRows(tenant)).toHaveLength(1);
    relay.up();
    expect(await server.flushOutbox()).toMatchObject({ delivered: 1, remaining: 0 });
    expect(await usageRows(tenant)).toHaveLength(2);
    await c.close();
    await relay.close();
  });

  it('fail_open while even the user\'s deployment is unknown: the usage is resolved and recorded when the platform is back', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    relay.down();
    const c = await connect({ baseUrl: relay.baseUrl, userId: tenant.userId, onOutage: 'fail_open' });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'blind' } });
    expect(result.isError).toBeFalsy();
    expect(c.events.map((e) => e.type)).toEqual(['unverified', 'queued']);
    relay.up();
    expect(await c.meter.flushOutbox()).toMatchObject({ delivered: 1, remaining: 0 });
    expect(await usageRows(tenant)).toEqual([{ success: true, quantity: '1', mcp_user_id: tenant.userId }]);
    await c.close();
    await relay.close();
  });
});
