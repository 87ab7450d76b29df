/**
 * The MCP side of the middleware's tests: a real McpServer with metered tools, connected to a real
 * MCP client over the in-memory transport, against a live creditgate; plus readings of what the
 * service recorded.
 */
import { type Meter, type MeteringEvent, type MeteringOptions, withMetering } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'vitest';
import * as z from 'zod';
import { adminHeaders, type Tenant } from '../../../test/harness.js';
import type { LiveService } from './support.js';

/** A test's ways into the search tool while it runs. */
export const hooks: {
  /** Runs inside the search tool (to change the world while a tool runs). */
  tool: (() => void) | undefined;
  /** When set, the search tool waits for it before answering. */
  gate: Promise<void> | undefined;
} = { tool: undefined, gate: undefined };

export interface Connected {
  client: Client;
  meter: Meter;
  events: MeteringEvent[];
  runs: { search: number; broken: number; refusing: number; report: number };
  close(): Promise<void>;
}

/** A real McpServer with metered tools, connected to a real MCP client over the in-memory transport. */
export async function connect(
  live: LiveService,
  tenant: Tenant,
  options: { baseUrl?: string; outbox?: string | false; onOutage?: 'fail_closed' | 'fail_open'; metadata?: MeteringOptions['metadata'] } = {},
): Promise<Connected> {
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
    ...(options.metadata ? { metadata: options.metadata } : {}),
  });
  const runs = { search: 0, broken: 0, refusing: 0, report: 0 };
  server.registerTool('search', { description: 'Search', inputSchema: { q: z.string() } }, async ({ q }) => {
    runs.search++;
    hooks.tool?.();
    await hooks.gate;
    return { content: [{ type: 'text', text: `results for ${q}` }] };
  });
  // Arguments a schema turns into objects that are not plain: a Date, and (when sent) a Set.
  server.registerTool(
    'report',
    { description: 'Report of a day', inputSchema: { day: z.coerce.date(), tags: z.array(z.string()).optional().transform((t) => (t ? new Set(t) : undefined)) } },
    async ({ day }) => {
      runs.report++;
      return { content: [{ type: 'text', text: `report of ${day.toISOString().slice(0, 10)}` }] };
    },
  );
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

export async function admin(live: LiveService, method: 'PUT' | 'GET', url: string, payload?: unknown) {
  const res = await live.h.request({ method, url, headers: adminHeaders(live.h), ...(payload ? { payload } : {}) });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Record<string, unknown>;
}

export async function balanceOf(live: LiveService, tenant: Tenant): Promise<{ purchased: number; used: number; reserved: number }> {
  const body = (await admin(live, 'GET', `/api/v1/admin/deployments/${tenant.deploymentId}`)) as {
    balance: { purchased: number; monthly_used: number; reserved: number };
  };
  return { purchased: body.balance.purchased, used: body.balance.monthly_used, reserved: body.balance.reserved };
}

export async function invocation(live: LiveService, tenant: Tenant, invocationId: string): Promise<{ status: string } | undefined> {
  const rows = await live.h.deps.db.query<{ status: string }>('SELECT status FROM invocations WHERE deployment_id = $1 AND invocation_id = $2', [
    tenant.deploymentId,
    invocationId,
  ]);
  return rows[0];
}

export function lastInvocationId(events: MeteringEvent[]): string {
  const allowed = events.filter((e) => e.type === 'allowed');
  return (allowed[allowed.length - 1] as { invocationId: string }).invocationId;
}

export const denial = (result: unknown) => (result as CallToolResult)._meta?.['io.creditgate/denial'] as { reason: string; message: string } | undefined;

export async function usageRows(live: LiveService, tenant: Tenant): Promise<Array<{ success: boolean; quantity: string; tool_name: string }>> {
  return live.h.deps.db.query(
    'SELECT success, quantity::text AS quantity, tool_name FROM usage_records WHERE deployment_id = $1 ORDER BY timestamp',
    [tenant.deploymentId],
  );
}

export const text = (result: unknown) => ((result as CallToolResult).content[0] as { text: string }).text;
