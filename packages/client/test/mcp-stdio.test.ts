import { mkdtemp, readdir } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMeter, FileOutbox, type Meter, type MeteringEvent, meteredTool, withMetering } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { adminHeaders, createTenant, type Tenant } from '../../../test/harness.js';
import { type LiveService, type Relay, startLiveService, startRelay } from './support.js';

let live: LiveService;
/** Runs inside the search tool (a test's way to change the world while a tool runs). */
let toolHook: (() => void) | undefined;
/** When set, the search tool waits for it before answering. */
let gateForSearch: Promise<void> | undefined;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live.close();
});

interface Connected {
  client: Client;
  meter: Meter;
  events: MeteringEvent[];
  runs: { search: number; broken: number; refusing: number };
  close(): Promise<void>;
}

/** A real McpServer with metered tools, connected to a real MCP client over the in-memory transport. */
async function connect(tenant: Tenant, options: { baseUrl?: string; outbox?: string | false; onOutage?: 'fail_closed' | 'fail_open' } = {}): Promise<Connected> {
  const server = new McpServer({ name: 'test-server', version: '1.0.0' });
  const events: MeteringEvent[] = [];
  const meter = withMetering(server, {
    apiKey: tenant.apiKey,
    baseUrl: options.baseUrl ?? live.baseUrl,
    retries: 0,
    outbox: options.outbox ?? false,
    onOutage: options.onOutage,
    outboxIntervalMs: 60_000,
    logger: { warn: () => {}, error: () => {} },
    onEvent: (event) => events.push(event),
  });
  const runs = { search: 0, broken: 0, refusing: 0 };
  server.registerTool('search', { description: 'Search', inputSchema: { q: z.string() } }, async ({ q }) => {
    runs.search++;
    toolHook?.();
    await gateForSearch;
    return { content: [{ type: 'text', text: `results for ${q}` }] };
  });
  server.registerTool('broken', { description: 'Always throws' }, async () => {
    runs.broken++;
    throw new Error('upstream exploded');
  });
  server.registerTool('refusing', { description: 'Returns isError' }, async () => {
    runs.refusing++;
    return { isError: true, content: [{ type: 'text', text: 'bad input' }] };
  });
  const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: 'test-client', version: '1.0.0' });
  await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
  return {
    client,
    meter,
    events,
    runs,
    close: async () => {
      await meter.close();
      await client.close();
      await server.close();
    },
  };
}

async function admin(method: 'PUT' | 'GET', url: string, payload?: unknown) {
  const res = await live.h.request({ method, url, headers: adminHeaders(live.h), ...(payload ? { payload } : {}) });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Record<string, unknown>;
}

async function balanceOf(tenant: Tenant): Promise<{ purchased: number; used: number; reserved: number }> {
  const body = (await admin('GET', `/api/v1/admin/deployments/${tenant.deploymentId}`)) as {
    balance: { purchased: number; monthly_used: number; reserved: number };
  };
  return { purchased: body.balance.purchased, used: body.balance.monthly_used, reserved: body.balance.reserved };
}

async function invocation(tenant: Tenant, invocationId: string): Promise<{ status: string } | undefined> {
  const rows = await live.h.deps.db.query<{ status: string }>('SELECT status FROM invocations WHERE deployment_id = $1 AND invocation_id = $2', [
    tenant.deploymentId,
    invocationId,
  ]);
  return rows[0];
}

function lastInvocationId(events: MeteringEvent[]): string {
  const allowed = events.filter((e) => e.type === 'allowed');
  return (allowed[allowed.length - 1] as { invocationId: string }).invocationId;
}

const denial = (result: unknown) => (result as CallToolResult)._meta?.['io.creditgate/denial'] as { reason: string; message: string } | undefined;

async function usageRows(tenant: Tenant): Promise<Array<{ success: boolean; quantity: string; tool_name: string }>> {
  return live.h.deps.db.query(
    'SELECT success, quantity::text AS quantity, tool_name FROM usage_records WHERE deployment_id = $1 ORDER BY timestamp',
    [tenant.deploymentId],
  );
}

const text = (result: unknown) => ((result as CallToolResult).content[0] as { text: string }).text;

describe('withMetering in stdio mode (organization API key)', () => {
  it('an allowed call runs the tool and deducts its cost once', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(tenant);
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'otters' } });
    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe('results for otters');
    expect(result._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 1 });
    expect(c.runs.search).toBe(1);
    const rows = await usageRows(tenant);
    expect(rows).toEqual([expect.objectContaining({ success: true, quantity: '1', tool_name: 'search' })]);
    await c.close();
  });

  it('the tool is held its cost while it runs: the reservation becomes the deduction', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(tenant);
    let during: Promise<Awaited<ReturnType<typeof balanceOf>>> | undefined;
    toolHook = () => {
      during = balanceOf(tenant);
    };
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'held' } }).finally(() => {
      toolHook = undefined;
    });
    expect(result.isError).toBeFalsy();
    expect(await during).toMatchObject({ used: 0, reserved: 1 });
    expect(await balanceOf(tenant)).toMatchObject({ used: 1, reserved: 0 });
    expect((await invocation(tenant, lastInvocationId(c.events)))?.status).toBe('recorded');
    await c.close();
  });

  it.each([
    ['sandbox tier', 'sandbox_tier'],
    ['no credits left', 'insufficient_credits'],
    ['MCP turned off for the deployment', 'mcp_disabled'],
  ])('a denied call (%s) returns an error result with the reason, does not run the tool and deducts nothing', async (_label, reason) => {
    const tenant = await createTenant(live.h, { tier: reason === 'sandbox_tier' ? 'sandbox' : 'launch' });
    if (reason === 'insufficient_credits') {
      await admin('PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/overrides`, { monthly_credits: 0 });
    }
    if (reason === 'mcp_disabled') {
      await admin('PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/flags`, { mcp_enabled: false });
    }
    const c = await connect(tenant);
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'otters' } });
    expect(result.isError).toBe(true);
    expect(denial(result)).toMatchObject({ reason });
    expect(text(result)).toBe(denial(result)!.message);
    expect(result.structuredContent).toMatchObject({ error: 'creditgate_denied', reason });
    expect(c.runs.search).toBe(0);
    expect(await usageRows(tenant)).toEqual([]);
    expect(await balanceOf(tenant)).toMatchObject({ used: 0, reserved: 0, purchased: 0 });
    await c.close();
  });

  it.each([
    ['throws', 'broken'],
    ['returns isError', 'refusing'],
  ])('a tool that %s deducts nothing and releases its reservation', async (_label, tool) => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(tenant);
    const result = await c.client.callTool({ name: tool, arguments: {} });
    expect(result.isError).toBe(true);
    expect(text(result)).toBe(tool === 'broken' ? 'upstream exploded' : 'bad input');
    expect(c.runs[tool as 'broken' | 'refusing']).toBe(1);
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'released']);
    expect((await invocation(tenant, lastInvocationId(c.events)))?.status).toBe('released');
    expect(await balanceOf(tenant)).toMatchObject({ used: 0, reserved: 0 });
    expect(await usageRows(tenant)).toEqual([]);
    await c.close();
  });

  it('a retried tools/call with the same idempotency key deducts once', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(tenant);
    const call = () =>
      c.client.callTool({ name: 'search', arguments: { q: 'again' }, _meta: { 'io.creditgate/idempotency-key': 'retry-1' } });
    const first = await call();
    const second = await call();
    expect(first.isError).toBeFalsy();
    expect(second.isError).toBeFalsy();
    expect(text(second)).toBe('results for again');
    expect(c.runs.search).toBe(2);
    const ids = c.events.filter((e) => e.type === 'recorded').map((e) => (e as { invocationId: string }).invocationId);
    expect(new Set(ids).size).toBe(1);
    expect(await usageRows(tenant)).toEqual([expect.objectContaining({ success: true, quantity: '1' })]);
    expect(await balanceOf(tenant)).toMatchObject({ used: 1, reserved: 0 });
    // The key cannot buy a different call: other arguments are a new, charged call.
    await c.client.callTool({ name: 'search', arguments: { q: 'other' }, _meta: { 'io.creditgate/idempotency-key': 'retry-1' } });
    expect(await balanceOf(tenant)).toMatchObject({ used: 2 });
    await c.close();
  });

  it('a call cancelled by the client while the tool runs is released, not recorded', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const server = new McpServer({ name: 'cancel-server', version: '1.0.0' });
    const events: MeteringEvent[] = [];
    const meter = withMetering(server, { apiKey: tenant.apiKey, baseUrl: live.baseUrl, outbox: false, onEvent: (e) => events.push(e) });
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    server.registerTool('slow', { description: 'Waits for its cancellation' }, async (extra) => {
      started();
      await new Promise<void>((resolve) => extra.signal.addEventListener('abort', () => resolve(), { once: true }));
      return { content: [{ type: 'text', text: 'too late' }] };
    });
    const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: 'test-client', version: '1.0.0' });
    await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
    const controller = new AbortController();
    const call = client.callTool({ name: 'slow', arguments: {} }, undefined, { signal: controller.signal });
    await running;
    controller.abort();
    await expect(call).rejects.toThrow();
    await expect.poll(() => events.map((e) => e.type), { timeout: 5_000 }).toContain('released');
    expect(events.map((e) => e.type)).not.toContain('recorded');
    expect(await balanceOf(tenant)).toMatchObject({ used: 0, reserved: 0 });
    await meter.close();
    await client.close();
    await server.close();
  });

  it('close() lets a call in progress finish and record before it returns', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(tenant);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    toolHook = () => entered();
    gateForSearch = gate;
    const call = c.client.callTool({ name: 'search', arguments: { q: 'shutdown' } });
    await inside;
    const closing = c.meter.close({ timeoutMs: 10_000 });
    release();
    await closing;
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'recorded']);
    expect(await usageRows(tenant)).toHaveLength(1);
    await call;
    toolHook = undefined;
    gateForSearch = undefined;
    await c.close();
  });

  it('meters tools registered through the deprecated tool() too, and refuses to start after tools that would go unmetered', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const late = new McpServer({ name: 'late', version: '1.0.0' });
    late.registerTool('early', { description: 'registered first' }, async () => ({ content: [] }));
    expect(() => withMetering(late, { apiKey: tenant.apiKey, baseUrl: live.baseUrl, outbox: false })).toThrow(
      expect.objectContaining({ code: 'CONFIGURATION_ERROR', message: expect.stringContaining('early') }),
    );

    const server = new McpServer({ name: 'legacy', version: '1.0.0' });
    const meter = withMetering(server, { apiKey: tenant.apiKey, baseUrl: live.baseUrl, outbox: false });
    server.tool('legacy_echo', 'Echo through the deprecated API', { word: z.string() }, async ({ word }) => ({
      content: [{ type: 'text', text: word }],
    }));
    const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: 'test-client', version: '1.0.0' });
    await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
    const result = await client.callTool({ name: 'legacy_echo', arguments: { word: 'hi' } });
    expect(text(result)).toBe('hi');
    expect(result._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 1 });
    expect(await usageRows(tenant)).toEqual([expect.objectContaining({ success: true, tool_name: 'legacy_echo' })]);
    await meter.close();
    await client.close();
    await server.close();
  });

  it('an empty API key (an unset variable in a client config) stops withMetering with a clear message', () => {
    const server = new McpServer({ name: 'misconfigured', version: '1.0.0' });
    expect(() => withMetering(server, { apiKey: '', baseUrl: live.baseUrl })).toThrow(
      expect.objectContaining({ code: 'CONFIGURATION_ERROR', message: expect.stringContaining('apiKey') }),
    );
    expect(() => withMetering(server, { apiKey: 'cg_x', baseUrl: 'not a url' })).toThrow(expect.objectContaining({ code: 'CONFIGURATION_ERROR' }));
  });

  it('over the rate limit the call is refused with the wait, under either outage policy', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    // Each metered call is two requests (check, record).
    await admin('PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/overrides`, { api_rate_limit: 2 });
    const c = await connect(tenant, { onOutage: 'fail_open' });
    expect((await c.client.callTool({ name: 'search', arguments: { q: '1' } })).isError).toBeFalsy();
    const refused = await c.client.callTool({ name: 'search', arguments: { q: '2' } });
    expect(refused.isError).toBe(true);
    expect(denial(refused)).toMatchObject({ reason: 'rate_limited', retry_after_seconds: expect.any(Number) });
    expect(c.runs.search).toBe(1);
    expect(await balanceOf(tenant)).toMatchObject({ used: 1, reserved: 0 });
    await c.close();
  });
});

describe('meteredTool (explicit wrapping)', () => {
  it('meters one handler of a tool with an outputSchema; its denial keeps the reason in _meta only', async () => {
    const paid = await createTenant(live.h, { tier: 'launch' });
    const sandbox = await createTenant(live.h, { tier: 'sandbox' });
    const open = async (tenant: Tenant) => {
      const server = new McpServer({ name: 'explicit', version: '1.0.0' });
      const meter = createMeter({ apiKey: tenant.apiKey, baseUrl: live.baseUrl, outbox: false, logger: { warn: () => {}, error: () => {} } });
      server.registerTool(
        'count',
        { description: 'Counts letters', inputSchema: { word: z.string() }, outputSchema: { letters: z.number() } },
        meteredTool(meter, 'count', async ({ word }: { word: string }) => ({
          content: [{ type: 'text' as const, text: String(word.length) }],
          structuredContent: { letters: word.length },
        })),
      );
      server.registerTool('free', { description: 'Not metered' }, async () => ({ content: [{ type: 'text', text: 'free' }] }));
      const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
      const client = new Client({ name: 'test-client', version: '1.0.0' });
      await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
      const close = async () => {
        await meter.close();
        await client.close();
        await server.close();
      };
      return { client, close };
    };
    const ok = await open(paid);
    const counted = await ok.client.callTool({ name: 'count', arguments: { word: 'otter' } });
    expect(counted.structuredContent).toEqual({ letters: 5 });
    expect(await ok.client.callTool({ name: 'free', arguments: {} })).toMatchObject({ content: [{ text: 'free' }] });
    expect(await usageRows(paid)).toEqual([expect.objectContaining({ success: true, tool_name: 'count' })]);
    await ok.close();

    const denied = await open(sandbox);
    // The client validates structuredContent against the outputSchema, errors included: none is sent.
    const refused = await denied.client.callTool({ name: 'count', arguments: { word: 'otter' } });
    expect(refused.isError).toBe(true);
    expect(refused.structuredContent).toBeUndefined();
    expect(denial(refused)).toMatchObject({ reason: 'sandbox_tier' });
    await denied.close();
  });
});

describe('withMetering when the platform is unreachable', () => {
  it('fail_closed (default) refuses the call without running it', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    relay.down();
    const c = await connect(tenant, { baseUrl: relay.baseUrl });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'x' } });
    expect(result.isError).toBe(true);
    expect(denial(result)).toMatchObject({ reason: 'platform_unavailable' });
    expect(c.runs.search).toBe(0);
    await c.close();
    await relay.close();
  });

  it('an HTML page from a proxy in between, or nothing listening at the base URL, is an outage, not a crash', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const proxy = createHttpServer((_req, res) => {
      res.writeHead(502, { 'content-type': 'text/html' }).end('<html><body>Bad Gateway</body></html>');
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const { port } = proxy.address() as AddressInfo;
    for (const baseUrl of [`http://127.0.0.1:${port}`, 'http://127.0.0.1:9']) {
      const c = await connect(tenant, { baseUrl });
      const result = await c.client.callTool({ name: 'search', arguments: { q: 'x' } });
      expect(denial(result), baseUrl).toMatchObject({ reason: 'platform_unavailable' });
      expect(c.runs.search).toBe(0);
      await c.close();
    }
    await new Promise((resolve) => proxy.close(resolve));
  });

  it('a refused API key is reported as misconfigured metering, and the tool does not run', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect({ ...tenant, apiKey: `${tenant.apiKey.slice(0, -1)}x` });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'x' } });
    expect(denial(result)).toMatchObject({ reason: 'metering_misconfigured' });
    expect(c.runs.search).toBe(0);
    await c.close();
  });

  it('usage recorded while the platform was unreachable waits in the file outbox and is sent once when it is back', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    const c = await connect(tenant, { baseUrl: relay.baseUrl, outbox: dir });
    // The check gets through; the platform goes away while the tool runs.
    const server = c.meter;
    const result = await withRelayDownDuring(relay, () => c.client.callTool({ name: 'search', arguments: { q: 'offline' } }));
    expect(result.isError).toBeFalsy();
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'queued']);
    expect((await readdir(dir)).filter((n) => n.endsWith('.json'))).toHaveLength(1);
    expect(await usageRows(tenant)).toEqual([]);

    expect(await server.flushOutbox()).toEqual({ delivered: 0, failed: 0, remaining: 1 });
    relay.up();
    expect(await server.flushOutbox()).toEqual({ delivered: 1, failed: 0, remaining: 0 });
    expect(await server.flushOutbox()).toEqual({ delivered: 0, failed: 0, remaining: 0 });
    expect((await readdir(dir)).filter((n) => n.endsWith('.json'))).toHaveLength(0);
    expect(await usageRows(tenant)).toEqual([expect.objectContaining({ success: true, quantity: '1' })]);
    expect(await balanceOf(tenant)).toMatchObject({ used: 1, reserved: 0 });
    await c.close();
    await relay.close();
  });

  it('an outbox entry whose first send did arrive is not charged again (exactly once)', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    const c = await connect(tenant, { outbox: dir });
    await c.client.callTool({ name: 'search', arguments: { q: 'once' } });
    const recorded = c.events.find((e) => e.type === 'recorded') as { invocationId: string };
    // As if the answer to that record had been lost: the same usage waits in the outbox too.
    await new FileOutbox(dir).add({
      invocation_id: recorded.invocationId,
      mode: 'stdio',
      body: { tool_name: 'search', invocation_id: recorded.invocationId },
      created_at: new Date().toISOString(),
    });
    expect(await c.meter.flushOutbox()).toMatchObject({ delivered: 1, remaining: 0 });
    expect(await usageRows(tenant)).toHaveLength(1);
    expect(await balanceOf(tenant)).toMatchObject({ used: 1 });
    await c.close();
  });

  it('fail_open runs the tool unverified and records it when the platform is back', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    relay.down();
    const c = await connect(tenant, { baseUrl: relay.baseUrl, outbox: dir, onOutage: 'fail_open' });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'open' } });
    expect(result.isError).toBeFalsy();
    expect(c.runs.search).toBe(1);
    expect(c.events.map((e) => e.type)).toEqual(['unverified', 'queued']);
    relay.up();
    expect(await c.meter.flushOutbox()).toMatchObject({ delivered: 1, remaining: 0 });
    expect(await balanceOf(tenant)).toMatchObject({ used: 1, reserved: 0 });
    await c.close();
    await relay.close();
  });

  it('a new process on the same outbox directory sends what an earlier one left', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    await new FileOutbox(dir).add({
      invocation_id: 'left-behind-1',
      mode: 'stdio',
      body: { tool_name: 'search', invocation_id: 'left-behind-1', metadata: { note: 'from a crashed run' } },
      created_at: new Date().toISOString(),
    });
    const c = await connect(tenant, { outbox: dir });
    await expect.poll(() => usageRows(tenant), { timeout: 5_000 }).toHaveLength(1);
    await expect.poll(async () => (await readdir(dir)).filter((n) => n.endsWith('.json')), { timeout: 5_000 }).toEqual([]);
    await c.close();
  });
});

/** Runs a call whose check gets through and whose record does not: the relay goes down once the tool starts. */
async function withRelayDownDuring<T>(relay: Relay, call: () => Promise<T>): Promise<T> {
  toolHook = () => relay.down();
  try {
    return await call();
  } finally {
    toolHook = undefined;
  }
}
