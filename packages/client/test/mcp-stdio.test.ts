import { createMeter, type MeteringEvent, meteredTool, withMetering } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { createTenant, type Tenant } from '../../../test/harness.js';
import { admin, balanceOf, connect, denial, hooks, invocation, lastInvocationId, text, usageRows } from './mcp-rig.js';
import { type LiveService, startLiveService } from './support.js';

let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live.close();
});

describe('withMetering in stdio mode (organization API key)', () => {
  it('an allowed call runs the tool and deducts its cost once', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'otters' } });
    expect(result.isError).toBeFalsy();
    expect(text(result)).toBe('results for otters');
    expect(result._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 1 });
    expect(c.runs.search).toBe(1);
    const rows = await usageRows(live, tenant);
    expect(rows).toEqual([expect.objectContaining({ success: true, quantity: '1', tool_name: 'search' })]);
    await c.close();
  });

  it('the tool is held its cost while it runs: the reservation becomes the deduction', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
    let during: Promise<Awaited<ReturnType<typeof balanceOf>>> | undefined;
    hooks.tool = () => {
      during = balanceOf(live, tenant);
    };
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'held' } }).finally(() => {
      hooks.tool = undefined;
    });
    expect(result.isError).toBeFalsy();
    expect(await during).toMatchObject({ used: 0, reserved: 1 });
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1, reserved: 0 });
    expect((await invocation(live, tenant, lastInvocationId(c.events)))?.status).toBe('recorded');
    await c.close();
  });

  it.each([
    ['sandbox tier', 'sandbox_tier'],
    ['no credits left', 'insufficient_credits'],
    ['MCP turned off for the deployment', 'mcp_disabled'],
  ])('a denied call (%s) returns an error result with the reason, does not run the tool and deducts nothing', async (_label, reason) => {
    const tenant = await createTenant(live.h, { tier: reason === 'sandbox_tier' ? 'sandbox' : 'launch' });
    if (reason === 'insufficient_credits') {
      await admin(live, 'PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/overrides`, { monthly_credits: 0 });
    }
    if (reason === 'mcp_disabled') {
      await admin(live, 'PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/flags`, { mcp_enabled: false });
    }
    const c = await connect(live, tenant);
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'otters' } });
    expect(result.isError).toBe(true);
    expect(denial(result)).toMatchObject({ reason });
    expect(text(result)).toBe(denial(result)!.message);
    expect(result.structuredContent).toMatchObject({ error: 'creditgate_denied', reason });
    expect(c.runs.search).toBe(0);
    expect(await usageRows(live, tenant)).toEqual([]);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 0, reserved: 0, purchased: 0 });
    await c.close();
  });

  it.each([
    ['throws', 'broken'],
    ['returns isError', 'refusing'],
  ])('a tool that %s deducts nothing and releases its reservation', async (_label, tool) => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
    const result = await c.client.callTool({ name: tool, arguments: {} });
    expect(result.isError).toBe(true);
    expect(text(result)).toBe(tool === 'broken' ? 'upstream exploded' : 'bad input');
    expect(c.runs[tool as 'broken' | 'refusing']).toBe(1);
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'released']);
    expect((await invocation(live, tenant, lastInvocationId(c.events)))?.status).toBe('released');
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 0, reserved: 0 });
    expect(await usageRows(live, tenant)).toEqual([]);
    await c.close();
  });

  it('a retried tools/call with the same idempotency key deducts once', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
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
    expect(await usageRows(live, tenant)).toEqual([expect.objectContaining({ success: true, quantity: '1' })]);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1, reserved: 0 });
    // The key cannot buy a different call: other arguments are a new, charged call.
    await c.client.callTool({ name: 'search', arguments: { q: 'other' }, _meta: { 'io.creditgate/idempotency-key': 'retry-1' } });
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 2 });
    await c.close();
  });

  it('an idempotency key cannot buy a call whose parsed arguments are not plain objects (a Date, a Set) with other values', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
    const key = { 'io.creditgate/idempotency-key': 'report-1' };
    const report = (args: Record<string, unknown>) => c.client.callTool({ name: 'report', arguments: args, _meta: key });
    expect(text(await report({ day: '2026-01-01' }))).toBe('report of 2026-01-01');
    expect(text(await report({ day: '2026-02-01' }))).toBe('report of 2026-02-01');
    // The same day again is a retry of a paid call: it deducts nothing more.
    expect(text(await report({ day: '2026-01-01' }))).toBe('report of 2026-01-01');
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 2, reserved: 0 });
    // A Set has no JSON form to name the call by: each call is a new one, charged.
    await report({ day: '2026-03-01', tags: ['a'] });
    await report({ day: '2026-03-01', tags: ['b'] });
    expect(c.runs.report).toBe(5);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 4, reserved: 0 });
    await c.close();
  });

  it('metadata the service would refuse (over 16 KiB, or not an object) is dropped, and the call is still charged', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    // A server that keeps each call's arguments with its usage; a caller sends a 20 KiB argument.
    const c = await connect(live, tenant, { metadata: ({ args }) => (args as { q: string }).q === 'list' ? (['not', 'an', 'object'] as never) : { args } });
    expect(text(await c.client.callTool({ name: 'search', arguments: { q: 'x'.repeat(20 * 1024) } }))).toContain('results for');
    expect(text(await c.client.callTool({ name: 'search', arguments: { q: 'list' } }))).toBe('results for list');
    expect(text(await c.client.callTool({ name: 'search', arguments: { q: 'small' } }))).toBe('results for small');
    expect(c.events.map((e) => e.type)).not.toContain('record_failed');
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 3, reserved: 0 });
    const kept = await live.h.deps.db.query<{ metadata: unknown }>('SELECT metadata FROM usage_records WHERE deployment_id = $1', [tenant.deploymentId]);
    expect(kept.map((r) => JSON.stringify(r.metadata)).sort()).toEqual(['null', 'null', JSON.stringify({ args: { q: 'small' } })]);
    await c.close();
  });

  it('a retry with the key of a call the platform refunded is a new call, charged (not a replay of the refunded one)', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
    const call = () => c.client.callTool({ name: 'search', arguments: { q: 'same' }, _meta: { 'io.creditgate/idempotency-key': 'refunded-1' } });
    await call();
    const [usage] = await live.h.deps.db.query<{ id: string }>('SELECT id FROM usage_records WHERE deployment_id = $1', [tenant.deploymentId]);
    const refunded = await live.h.request({
      method: 'POST',
      url: `/api/v1/mcp/usage/${usage!.id}/refund`,
      headers: { 'x-mcp-service-key': live.h.config.mcpServiceKey },
      payload: { reason: 'bad answer' },
    });
    expect(refunded.statusCode, refunded.body).toBe(200);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 0 });
    expect(text(await call())).toBe('results for same');
    expect(text(await call())).toBe('results for same');
    expect(c.runs.search).toBe(3);
    // Two runs after the refund, two charges; the refunded call stays refunded.
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 2, reserved: 0 });
    expect((await usageRows(live, tenant)).filter((r) => r.success)).toHaveLength(3);
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
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 0, reserved: 0 });
    await meter.close();
    await client.close();
    await server.close();
  });

  it('close() lets a call in progress finish and record before it returns', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, tenant);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    hooks.tool = () => entered();
    hooks.gate = gate;
    const call = c.client.callTool({ name: 'search', arguments: { q: 'shutdown' } });
    await inside;
    const closing = c.meter.close({ timeoutMs: 10_000 });
    release();
    await closing;
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'recorded']);
    expect(await usageRows(live, tenant)).toHaveLength(1);
    await call;
    hooks.tool = undefined;
    hooks.gate = undefined;
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
    expect(await usageRows(live, tenant)).toEqual([expect.objectContaining({ success: true, tool_name: 'legacy_echo' })]);
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
    await admin(live, 'PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/overrides`, { api_rate_limit: 2 });
    const c = await connect(live, tenant, { onOutage: 'fail_open' });
    expect((await c.client.callTool({ name: 'search', arguments: { q: '1' } })).isError).toBeFalsy();
    const refused = await c.client.callTool({ name: 'search', arguments: { q: '2' } });
    expect(refused.isError).toBe(true);
    expect(denial(refused)).toMatchObject({ reason: 'rate_limited', retry_after_seconds: expect.any(Number) });
    expect(c.runs.search).toBe(1);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1, reserved: 0 });
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
    expect(await usageRows(live, paid)).toEqual([expect.objectContaining({ success: true, tool_name: 'count' })]);
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

