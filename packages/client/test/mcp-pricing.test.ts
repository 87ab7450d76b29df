import { createMeter, type Meter, META_PRICING, meteredTool, PRICING_REVALIDATE_MS, withMetering, withPricing } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import * as z from 'zod';
import { createTenant, type Tenant, unique } from '../../../test/harness.js';
import { admin } from './mcp-rig.js';
import { type LiveService, type Relay, startLiveService, startRelay } from './support.js';

/**
 * Prices up front (docs/client.md, Prices in tools/list): the official MCP SDK client lists the tools
 * of a server wrapped by withMetering against a live creditgate, sees each metered tool's price in
 * `_meta["io.creditgate/pricing"]`, and is told with notifications/tools/list_changed when the
 * operator changes one. The middleware's clock is its `now` option; only setInterval (the background
 * revalidation's timer) is faked, so every request is a real one.
 */
let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live.close();
});
afterEach(() => {
  vi.useRealTimers();
});

const TICK_MS = 30_000;

interface Seen {
  path: string;
  status: number;
  ifNoneMatch: string | null;
  etag: string | null;
  bodyBytes: number;
}

/** A fetch that records every request to the cost table with its answer's status and body size. */
function recordingFetch(seen: Seen[]): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    const url = new URL(String(input instanceof Request ? input.url : input));
    if (url.pathname.endsWith('/credit-costs')) {
      const headers = new Headers(init?.headers);
      seen.push({
        path: url.pathname,
        status: response.status,
        ifNoneMatch: headers.get('if-none-match'),
        etag: response.headers.get('etag'),
        bodyBytes: (await response.clone().arrayBuffer()).byteLength,
      });
    }
    return response;
  };
}

interface Rig {
  client: Client;
  meter: Meter;
  clock: { now: number };
  seen: Seen[];
  notifications: number;
  list(): Promise<Record<string, Record<string, unknown> | undefined>>;
  close(): Promise<void>;
}

/** A server with a mapped tool, an unmapped one, an excluded one and one with its own _meta, wrapped by withMetering. */
async function rig(tenant: Tenant, tools: { mapped: string }, options: { baseUrl?: string; serviceKey?: boolean } = {}): Promise<Rig> {
  const clock = { now: Date.parse('2026-03-01T10:00:00Z') };
  const seen: Seen[] = [];
  const server = new McpServer({ name: 'priced-server', version: '1.0.0' });
  const meter = withMetering(server, {
    ...(options.serviceKey ? { serviceKey: live.h.config.mcpServiceKey } : { apiKey: tenant.apiKey }),
    baseUrl: options.baseUrl ?? live.baseUrl,
    retries: 0,
    outbox: false,
    exclude: ['free'],
    now: () => clock.now,
    fetch: recordingFetch(seen),
    logger: { warn: () => {}, error: () => {} },
  });
  const ok = async () => ({ content: [{ type: 'text' as const, text: 'ok' }] });
  server.registerTool(tools.mapped, { description: 'Mapped to an action of this test' }, ok);
  server.registerTool('search', { description: 'Not mapped: platform_basic', inputSchema: { q: z.string() } }, ok);
  server.registerTool('free', { description: 'Excluded: not metered' }, ok);
  server.registerTool('annotated', { description: 'Has its own _meta', _meta: { 'example.com/owner': 'docs team' } }, ok);
  const client = new Client({ name: 'pricing-client', version: '1.0.0' });
  const state = { notifications: 0 };
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    state.notifications++;
  });
  const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
  return {
    client,
    meter,
    clock,
    seen,
    get notifications() {
      return state.notifications;
    },
    async list() {
      const { tools: listed } = await client.listTools();
      return Object.fromEntries(listed.map((t) => [t.name, t._meta]));
    },
    async close() {
      await meter.close();
      await client.close();
      await server.close();
    },
  };
}

/** A fresh action at `credits` and a fresh tool mapped to it (the tables are shared by the run's tests). */
async function pricedTool(credits: number): Promise<{ action: string; tool: string }> {
  const action = unique('priced').toLowerCase();
  const tool = unique('priced-tool');
  await admin(live, 'PUT', `/api/v1/admin/credit-costs/${action}`, { credits });
  await admin(live, 'PUT', `/api/v1/admin/tool-actions/${tool}`, { action });
  return { action, tool };
}

async function eventually(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Lets the faked background timer fire once, `ms` of the middleware's clock later. */
function pass(r: Rig, ms: number): void {
  r.clock.now += ms;
  vi.advanceTimersByTime(TICK_MS);
}

describe('prices in tools/list', () => {
  it('every metered tool carries _meta["io.creditgate/pricing"] = {credits, action}; an excluded tool none; a tool\'s own _meta stays', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const { action, tool } = await pricedTool(4);
    for (const serviceKey of [false, true]) {
      const r = await rig(tenant, { mapped: tool }, { serviceKey });
      const listed = await r.list();
      expect(listed[tool], `serviceKey ${serviceKey}`).toEqual({ [META_PRICING]: { credits: 4, action } });
      expect(listed.search).toEqual({ [META_PRICING]: { credits: 1, action: 'platform_basic' } });
      expect(listed.free?.[META_PRICING]).toBeUndefined();
      expect(listed.annotated).toEqual({ 'example.com/owner': 'docs team', [META_PRICING]: { credits: 1, action: 'platform_basic' } });
      // The listing loaded the table once, unconditionally.
      expect(r.seen.map((s) => [s.status, s.ifNoneMatch])).toEqual([[200, null]]);
      // The price shown is the price charged.
      const called = await r.client.callTool({ name: tool, arguments: {} });
      if (!serviceKey) expect(called._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 4 });
      await r.close();
    }
  });

  it('a price the operator changes reaches the client after the 5-minute revalidation: notifications/tools/list_changed, then the new price', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const { action, tool } = await pricedTool(4);
    const r = await rig(tenant, { mapped: tool });
    expect((await r.list())[tool]).toEqual({ [META_PRICING]: { credits: 4, action } });
    const etag = r.seen[0]!.etag;
    expect(etag).toMatch(/^".+"$/);

    await admin(live, 'PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 9 });
    // Before the interval: neither a listing, a call nor the timer asks again.
    pass(r, PRICING_REVALIDATE_MS - 1_000);
    expect((await r.list())[tool]).toEqual({ [META_PRICING]: { credits: 4, action } });
    await r.client.callTool({ name: 'search', arguments: { q: 'x' } });
    expect(r.seen).toHaveLength(1);
    expect(r.notifications).toBe(0);

    // The interval has passed: the timer revalidates with If-None-Match and gets the new table.
    pass(r, 1_000);
    await eventually(() => r.notifications === 1, 'notifications/tools/list_changed');
    expect(r.seen[1]).toMatchObject({ status: 200, ifNoneMatch: etag });
    expect(r.seen[1]!.etag).not.toBe(etag);
    expect((await r.list())[tool]).toEqual({ [META_PRICING]: { credits: 9, action } });
    expect(r.seen).toHaveLength(2);
    expect((await r.client.callTool({ name: tool, arguments: {} }))._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 9 });

    // A change of a tool's mapping is a change of its price too; here a tool call finds it (no timer tick).
    await admin(live, 'PUT', `/api/v1/admin/tool-actions/${tool}`, { action: 'task_advanced' });
    r.clock.now += PRICING_REVALIDATE_MS;
    await r.client.callTool({ name: 'search', arguments: { q: 'y' } });
    await eventually(() => r.notifications === 2, 'the second notifications/tools/list_changed');
    expect((await r.list())[tool]).toEqual({ [META_PRICING]: { credits: 3, action: 'task_advanced' } });
    await r.close();
  });

  it('an unchanged table is a 304 that costs no body, and no notification', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const { action, tool } = await pricedTool(2);
    const r = await rig(tenant, { mapped: tool });
    await r.list();
    expect(r.seen[0]!.bodyBytes).toBeGreaterThan(100);
    for (let round = 1; round <= 2; round++) {
      pass(r, PRICING_REVALIDATE_MS);
      await eventually(() => r.seen.length === round + 1, `revalidation ${round}`);
      expect(r.seen[round]).toEqual({ path: '/api/v1/mcp/credit-costs', status: 304, ifNoneMatch: r.seen[0]!.etag, etag: r.seen[0]!.etag, bodyBytes: 0 });
    }
    // A listing after a 304 shows the prices kept.
    expect((await r.list())[tool]).toEqual({ [META_PRICING]: { credits: 2, action } });
    expect(r.seen).toHaveLength(3);
    expect(r.notifications).toBe(0);
    await r.close();
  });

  it('a platform that cannot be reached does not hold the listing: it goes out without prices, and the prices follow with list_changed', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const { action, tool } = await pricedTool(5);
    const relay: Relay = await startRelay(live.baseUrl);
    relay.down();
    const r = await rig(tenant, { mapped: tool }, { baseUrl: relay.baseUrl });
    const listed = await r.list();
    expect(listed[tool]?.[META_PRICING]).toBeUndefined();
    expect(listed.search?.[META_PRICING]).toBeUndefined();
    relay.up();
    pass(r, TICK_MS);
    await eventually(() => r.notifications === 1, 'notifications/tools/list_changed once the prices are known');
    expect((await r.list())[tool]).toEqual({ [META_PRICING]: { credits: 5, action } });
    await r.close();
    await relay.close();
  });

  it('meteredTool: withPricing prices the wrapped tools only; pricing: false shows none and asks nothing', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const { action, tool } = await pricedTool(6);
    for (const pricing of [true, false]) {
      const seen: Seen[] = [];
      const meter = createMeter({ apiKey: tenant.apiKey, baseUrl: live.baseUrl, retries: 0, outbox: false, pricing, fetch: recordingFetch(seen) });
      const server = new McpServer({ name: 'explicit', version: '1.0.0' }, { capabilities: { tools: {} } });
      withPricing(server, meter);
      const ok = async () => ({ content: [{ type: 'text' as const, text: 'ok' }] });
      server.registerTool(tool, {}, meteredTool(meter, tool, ok));
      server.registerTool('unwrapped', {}, ok);
      const client = new Client({ name: 'c', version: '1.0.0' });
      const [a, b] = InMemoryTransport.createLinkedPair();
      await Promise.all([server.connect(b), client.connect(a)]);
      const listed = Object.fromEntries((await client.listTools()).tools.map((t) => [t.name, t._meta?.[META_PRICING]]));
      expect(listed, `pricing ${pricing}`).toEqual({ [tool]: pricing ? { credits: 6, action } : undefined, unwrapped: undefined });
      expect(seen).toHaveLength(pricing ? 1 : 0);
      await meter.close();
      await client.close();
      await server.close();
    }
  });
});
