/**
 * The two runnable examples, end to end against a real creditgate: the stdio server as a real child
 * process behind a real MCP client, and the hosted server in-process over Streamable HTTP.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MeteringEvent } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostedServer, startHostedServer } from '../examples/hosted-server/src/server.js';
import { type LiveService, startLiveService } from '../packages/client/test/support.js';
import { adminHeaders, createTenant, type Tenant } from './harness.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const STDIO_SERVER = 'examples/stdio-server/src/server.ts';
/** Bound on anything a child process is waited for (tsx compiles on the first start). */
const CHILD_WAIT_MS = 20_000;

let live: LiveService;
let scratch: string;
/** Every child started, killed in afterAll whatever the tests did. */
const children = new Set<ChildProcess>();
const clients = new Set<Client>();

beforeAll(async () => {
  live = await startLiveService();
  scratch = await mkdtemp(join(tmpdir(), 'cg-examples-'));
});

afterAll(async () => {
  await Promise.all([...clients].map((client) => client.close().catch(() => undefined)));
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  await live?.close();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

async function balanceOf(tenant: Tenant): Promise<{ used: number; purchased: number; reserved: number }> {
  const res = await live.h.request({ method: 'GET', url: `/api/v1/admin/deployments/${tenant.deploymentId}`, headers: adminHeaders(live.h) });
  expect(res.statusCode).toBe(200);
  const { balance } = res.json() as { balance: { monthly_used: number; purchased: number; reserved: number } };
  return { used: balance.monthly_used, purchased: balance.purchased, reserved: balance.reserved };
}

interface UsageRow {
  tool_name: string;
  success: boolean;
  quantity: string;
  mcp_user_id: string | null;
}

function usageRows(tenant: Tenant): Promise<UsageRow[]> {
  return live.h.deps.db.query<UsageRow>(
    'SELECT tool_name, success, quantity::text AS quantity, mcp_user_id FROM usage_records WHERE deployment_id = $1 ORDER BY timestamp',
    [tenant.deploymentId],
  );
}

const text = (result: unknown): string => ((result as CallToolResult).content[0] as { text: string }).text;
const denialOf = (result: unknown) => (result as CallToolResult)._meta?.['io.creditgate/denial'] as { reason: string; message: string } | undefined;

interface StdioChild {
  client: Client;
  child: ChildProcess;
  stderr(): string;
  /** Closes the client (which ends the child's stdin) and says how the child ended. */
  close(): Promise<{ exitCode: number | null; signal: NodeJS.Signals | null; ms: number }>;
}

async function startStdioExample(apiKey: string): Promise<StdioChild> {
  const outbox = await mkdtemp(join(scratch, 'outbox-'));
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', STDIO_SERVER],
    cwd: repoRoot,
    env: { CREDITGATE_API_KEY: apiKey, CREDITGATE_URL: live.baseUrl, CREDITGATE_OUTBOX_DIR: outbox, HOME: scratch },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const client = new Client({ name: 'examples-test', version: '1.0.0' });
  clients.add(client);
  await client.connect(transport, { timeout: CHILD_WAIT_MS });
  // The SDK keeps the ChildProcess private; the test needs it for the exit code and the cleanup.
  const child = (transport as unknown as { _process?: ChildProcess })._process;
  if (!child) throw new Error('StdioClientTransport no longer exposes _process: update the test');
  children.add(child);
  const exited = new Promise<{ exitCode: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (exitCode, signal) => resolve({ exitCode, signal }));
  });
  return {
    client,
    child,
    stderr: () => stderr,
    close: async () => {
      const started = Date.now();
      // StdioClientTransport ends stdin, waits 2 s, then sends SIGTERM (and SIGKILL 2 s later).
      await client.close();
      clients.delete(client);
      const outcome = await exited;
      return { ...outcome, ms: Date.now() - started };
    },
  };
}

describe('examples/stdio-server, spawned as a real MCP server process', () => {
  it('lists its two tools, and an allowed call deducts its cost exactly once', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const s = await startStdioExample(tenant.apiKey);
    const { tools } = await s.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['summarize', 'translate']);

    const before = await balanceOf(tenant);
    const result = await s.client.callTool({ name: 'summarize', arguments: { text: 'One. Two! Three? Four.', sentences: 2 } });
    expect(result.isError).toBeFalsy();
    expect(text(result)).toContain('One. Two!');
    expect(result._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 1 });

    expect(await balanceOf(tenant)).toEqual({ ...before, used: before.used + 1, reserved: 0 });
    expect(await usageRows(tenant)).toEqual([{ tool_name: 'summarize', success: true, quantity: '1', mcp_user_id: null }]);
    await s.close();
  });

  it('a call retried with the same io.creditgate/idempotency-key runs twice but deducts once', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const s = await startStdioExample(tenant.apiKey);
    const call = { name: 'translate', arguments: { text: 'Hello world', to: 'fr' }, _meta: { 'io.creditgate/idempotency-key': 'retry-1' } };
    const first = await s.client.callTool(call);
    const second = await s.client.callTool(call);
    expect([text(first), text(second)]).toEqual(['Bonjour monde', 'Bonjour monde']);
    expect(second.isError).toBeFalsy();

    expect((await balanceOf(tenant)).used).toBe(1);
    expect(await usageRows(tenant)).toEqual([expect.objectContaining({ tool_name: 'translate', success: true, quantity: '1' })]);
    await s.close();
  });

  it("refuses a sandbox-tier organization's call with reason sandbox_tier and deducts nothing", async () => {
    const tenant = await createTenant(live.h, { tier: 'sandbox', purchased: 10 });
    const s = await startStdioExample(tenant.apiKey);
    const before = await balanceOf(tenant);
    const result = await s.client.callTool({ name: 'translate', arguments: { text: 'hello', to: 'de' } });
    expect(result.isError).toBe(true);
    expect(denialOf(result)).toMatchObject({ reason: 'sandbox_tier' });
    expect(text(result)).toContain('sandbox');

    expect(await balanceOf(tenant)).toEqual(before);
    expect(before.purchased).toBe(10);
    expect(await usageRows(tenant)).toEqual([]);
    await s.close();
  });

  it('exits by itself with code 0 when the client closes', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const s = await startStdioExample(tenant.apiKey);
    await s.client.listTools();
    const ended = await s.close();
    // Under 2 s: it left on the end of stdin, before the client's SIGTERM.
    expect(ended).toMatchObject({ exitCode: 0, signal: null });
    expect(ended.ms).toBeLessThan(2_000);
    expect(s.stderr()).toContain('client disconnected; shutting down');
  });

  it('refuses to start without CREDITGATE_API_KEY: a clear message on stderr, nothing on stdout, exit code 1', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', STDIO_SERVER], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH, HOME: scratch, CREDITGATE_URL: live.baseUrl },
      // stdin stays open: the process must leave on its own, not because its input ended.
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    children.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString('utf8');
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`still running after ${CHILD_WAIT_MS} ms; stderr: ${stderr}`)), CHILD_WAIT_MS);
      child.once('close', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
    expect(exitCode).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toContain('CREDITGATE_API_KEY is not set');
    expect(stderr).not.toMatch(/\n\s+at |Unhandled|Error:/);
  });
});

describe('examples/hosted-server, in-process over Streamable HTTP (service mode)', () => {
  let hosted: HostedServer;
  const events: MeteringEvent[] = [];
  beforeAll(async () => {
    hosted = await startHostedServer({
      port: 0,
      serviceKey: live.h.config.mcpServiceKey,
      baseUrl: live.baseUrl,
      metering: { onEvent: (event) => events.push(event) },
    });
  });
  afterAll(async () => {
    await Promise.all([...clients].map((client) => client.close().catch(() => undefined)));
    await hosted?.close();
  });

  async function connectAs(userId: string | undefined): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
    const transport = new StreamableHTTPClientTransport(new URL(hosted.url), {
      requestInit: userId === undefined ? {} : { headers: { authorization: `Bearer ${userId}` } },
    });
    const client = new Client({ name: 'examples-test', version: '1.0.0' });
    clients.add(client);
    await client.connect(transport, { timeout: CHILD_WAIT_MS });
    return { client, transport };
  }

  it("a signed-in user's call deducts once from their organization's deployment, with mcp_user_id", async () => {
    const tenant = await createTenant(live.h, { tier: 'launch' });
    const { client } = await connectAs(tenant.userId);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['draft_reply', 'search_docs']);

    const before = await balanceOf(tenant);
    const result = await client.callTool({ name: 'search_docs', arguments: { query: 'service key' } });
    expect(result.isError).toBeFalsy();
    expect((result.structuredContent as { results: Array<{ id: string }> }).results[0]).toMatchObject({ id: 'service-mode' });
    expect(result._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: 1 });

    expect(await balanceOf(tenant)).toEqual({ ...before, used: before.used + 1, reserved: 0 });
    expect(await usageRows(tenant)).toEqual([{ tool_name: 'search_docs', success: true, quantity: '1', mcp_user_id: tenant.userId }]);
    await client.close();
  });

  it('a call without Authorization is refused with reason no_user and nothing is checked or recorded', async () => {
    const seen = events.length;
    const { client } = await connectAs(undefined);
    for (const call of [
      { name: 'search_docs', arguments: { query: 'refunds' } },
      { name: 'draft_reply', arguments: { customer: 'Ada', message: 'Where is my invoice?' } },
    ]) {
      const result = await client.callTool(call);
      expect(result.isError).toBe(true);
      expect(denialOf(result)).toMatchObject({ reason: 'no_user' });
    }
    // Refused before any request to creditgate: no check, no reservation, no usage record.
    expect(events.slice(seen)).toEqual([
      { type: 'denied', tool: 'search_docs', reason: 'no_user' },
      { type: 'denied', tool: 'draft_reply', reason: 'no_user' },
    ]);
    await client.close();
  });

  it('a session answers only to the user who opened it; a malformed Authorization is 401', async () => {
    const owner = await createTenant(live.h, { tier: 'launch' });
    const other = await createTenant(live.h, { tier: 'launch' });
    const { client, transport } = await connectAs(owner.userId);
    const post = (authorization: string) =>
      fetch(hosted.url, {
        method: 'POST',
        headers: {
          authorization,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': transport.sessionId!,
          'mcp-protocol-version': '2025-06-18',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'tools/call', params: { name: 'draft_reply', arguments: { customer: 'x', message: 'y' } } }),
      });
    const hijack = await post(`Bearer ${other.userId}`);
    expect(hijack.status).toBe(403);
    const malformed = await post('Basic dXNlcjpwYXNz');
    expect(malformed.status).toBe(401);
    expect(malformed.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(await usageRows(other)).toEqual([]);
    expect(await usageRows(owner)).toEqual([]);
    await client.close();
  });
});
