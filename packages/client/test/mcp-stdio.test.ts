import { mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withMetering, type Meter, type MeteringEvent } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { adminHeaders, createTenant, type Tenant } from '../../../test/harness.js';
import { type LiveService, startLiveService } from './support.js';

let live: LiveService;
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

async function balanceOf(tenant: Tenant): Promise<{ purchased: number; used: number; reserved: number }> {
  const res = await live.h.request({ method: 'GET', url: `/api/v1/admin/deployments/${tenant.deploymentId}`, headers: adminHeaders(live.h) });
  const body = res.json() as { balance: { purchased: number; monthly_used: number; reserved: number } };
  return { purchased: body.balance.purchased, used: body.balance.monthly_used, reserved: body.balance.reserved };
}

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
});
