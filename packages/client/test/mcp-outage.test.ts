import { mkdtemp, readdir } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileOutbox } from '@creditgate/client/mcp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, mistyped } from '../../../test/harness.js';
import { balanceOf, connect, denial, hooks, usageRows } from './mcp-rig.js';
import { type LiveService, type Relay, startLiveService, startRelay } from './support.js';

/** The middleware when creditgate cannot be reached or answers with something else: outage policies and the outbox. */
let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live.close();
});

describe('withMetering when the platform is unreachable', () => {
  it('fail_closed (default) refuses the call without running it', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    relay.down();
    const c = await connect(live, tenant, { baseUrl: relay.baseUrl });
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
      const c = await connect(live, tenant, { baseUrl });
      const result = await c.client.callTool({ name: 'search', arguments: { q: 'x' } });
      expect(denial(result), baseUrl).toMatchObject({ reason: 'platform_unavailable' });
      expect(c.runs.search).toBe(0);
      await c.close();
    }
    await new Promise((resolve) => proxy.close(resolve));
  });

  it('a refused API key is reported as misconfigured metering, and the tool does not run', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const c = await connect(live, { ...tenant, apiKey: mistyped(tenant.apiKey) });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'x' } });
    expect(denial(result)).toMatchObject({ reason: 'metering_misconfigured' });
    expect(c.runs.search).toBe(0);
    await c.close();
  });

  it('usage recorded while the platform was unreachable waits in the file outbox and is sent once when it is back', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    const c = await connect(live, tenant, { baseUrl: relay.baseUrl, outbox: dir });
    // The check gets through; the platform goes away while the tool runs.
    const server = c.meter;
    const result = await withRelayDownDuring(relay, () => c.client.callTool({ name: 'search', arguments: { q: 'offline' } }));
    expect(result.isError).toBeFalsy();
    expect(c.events.map((e) => e.type)).toEqual(['allowed', 'queued']);
    expect((await readdir(dir)).filter((n) => n.endsWith('.json'))).toHaveLength(1);
    expect(await usageRows(live, tenant)).toEqual([]);

    expect(await server.flushOutbox()).toEqual({ delivered: 0, failed: 0, remaining: 1 });
    relay.up();
    expect(await server.flushOutbox()).toEqual({ delivered: 1, failed: 0, remaining: 0 });
    expect(await server.flushOutbox()).toEqual({ delivered: 0, failed: 0, remaining: 0 });
    expect((await readdir(dir)).filter((n) => n.endsWith('.json'))).toHaveLength(0);
    expect(await usageRows(live, tenant)).toEqual([expect.objectContaining({ success: true, quantity: '1' })]);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1, reserved: 0 });
    await c.close();
    await relay.close();
  });

  it('an outbox entry whose first send did arrive is not charged again (exactly once)', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    const c = await connect(live, tenant, { outbox: dir });
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
    expect(await usageRows(live, tenant)).toHaveLength(1);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1 });
    await c.close();
  });

  it('fail_open runs the tool unverified and records it when the platform is back', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const relay = await startRelay(live.baseUrl);
    const dir = await mkdtemp(join(tmpdir(), 'cg-outbox-'));
    relay.down();
    const c = await connect(live, tenant, { baseUrl: relay.baseUrl, outbox: dir, onOutage: 'fail_open' });
    const result = await c.client.callTool({ name: 'search', arguments: { q: 'open' } });
    expect(result.isError).toBeFalsy();
    expect(c.runs.search).toBe(1);
    expect(c.events.map((e) => e.type)).toEqual(['unverified', 'queued']);
    relay.up();
    expect(await c.meter.flushOutbox()).toMatchObject({ delivered: 1, remaining: 0 });
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1, reserved: 0 });
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
    const c = await connect(live, tenant, { outbox: dir });
    await expect.poll(() => usageRows(live, tenant), { timeout: 5_000 }).toHaveLength(1);
    await expect.poll(async () => (await readdir(dir)).filter((n) => n.endsWith('.json')), { timeout: 5_000 }).toEqual([]);
    await c.close();
  });
});

/** Runs a call whose check gets through and whose record does not: the relay goes down once the tool starts. */
async function withRelayDownDuring<T>(relay: Relay, call: () => Promise<T>): Promise<T> {
  hooks.tool = () => relay.down();
  try {
    return await call();
  } finally {
    hooks.tool = undefined;
  }
}
