/**
 * The MCP side of bench/mcp.ts, in the runner's process: a real McpServer with one tool that returns at
 * once, metered (or not) by withMetering, and a real MCP Client on the other end of an in-memory
 * transport pair (one session), driven by N concurrent callers in a closed loop for a fixed time.
 *
 * The middleware is imported from packages/client/src, not as `@creditgate/client/mcp`: under tsx that
 * specifier follows the root tsconfig.json's `paths` to src when the working directory is inside the
 * repository, and resolves to packages/client/dist (through the package's exports) from outside it. The
 * source is what the commit holds, with no build to forget; tsx compiles it to ES2022 as tsc would.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod';
import { META_USAGE, type MeteringOptions, withMetering } from '../../packages/client/src/mcp/index.js';
import { type CpuShare, cpuShare, cpuSnapshot } from './cpu.js';
import { type LatencySummary, round, Samples } from './stats.js';

export type Variant = 'unmetered' | 'stdio' | 'stdio-noreserve' | 'service';
export const VARIANTS: Variant[] = ['unmetered', 'stdio', 'stdio-noreserve', 'service'];

export interface McpTarget {
  baseUrl: string;
  apiKey: string;
  serviceKey: string;
  userId: string;
  tool: string;
  /** Stdio mode's file outbox (the default is ~/.creditgate/outbox/…; a temporary directory here). */
  outboxDir: string;
}

export interface McpMeasurement {
  variant: Variant;
  callers: number;
  seconds: number;
  /** Calls completed inside the window, per second. */
  callsPerSecond: number;
  /** Each call's time from callTool to its result, for calls completed inside the window (ms). */
  latency: LatencySummary;
  /** Every call, those that finished after the window included (the accounting counts them all). */
  calls: number;
  /** Results without isError; metered ones must carry `_meta['io.creditgate/usage']`. */
  successes: number;
  /** Metered results without isError and without the usage meta (ran, not recorded). */
  unrecorded: number;
  /** Results with isError (denials), and calls that threw. */
  refused: number;
  thrown: number;
  firstProblem?: string;
  /** HTTP requests the middleware made, by route, and per call. */
  requests: Record<string, number>;
  requestsPerCall: number;
  /** Middleware events by type, and what it logged. */
  events: Record<string, number>;
  logged: string[];
  /** CPU over the window (100 = one core): loadgen = this process (MCP client + server + middleware). */
  cpu: CpuShare;
}

const asUser = (userId: string): AuthInfo => ({ token: 'bench', clientId: 'bench-client', scopes: [], extra: { userId } });

/** `/api/v1/mcp/reservations/<id>/release` → `reservations/:id/release`. */
function routeOf(input: Parameters<typeof fetch>[0]): string {
  const url = typeof input === 'string' ? new URL(input) : input instanceof URL ? input : new URL(input.url);
  return url.pathname.replace('/api/v1/mcp/', '').replace(/^(reservations|invocations|usage)\/[^/]+/, '$1/:id');
}

/** What the middleware logged (the first 20 lines; any is a problem here). */
const note = (m: McpMeasurement, line: string) => {
  if (m.logged.length < 20) m.logged.push(line);
};

async function connect(variant: Variant, t: McpTarget, m: McpMeasurement) {
  const server = new McpServer({ name: 'bench-server', version: '1.0.0' });
  const common: MeteringOptions = {
    baseUrl: t.baseUrl,
    fetch: (input, init) => {
      const route = routeOf(input);
      m.requests[route] = (m.requests[route] ?? 0) + 1;
      return fetch(input, init);
    },
    logger: { warn: (s) => note(m, `warn: ${s}`), error: (s) => note(m, `error: ${s}`) },
    onEvent: (event) => {
      m.events[event.type] = (m.events[event.type] ?? 0) + 1;
    },
  };
  const meter =
    variant === 'unmetered'
      ? undefined
      : variant === 'service'
        ? withMetering(server, { ...common, serviceKey: t.serviceKey })
        : withMetering(server, { ...common, apiKey: t.apiKey, outbox: t.outboxDir, reserve: variant === 'stdio' });
  server.registerTool(t.tool, { description: 'Answers at once', inputSchema: { q: z.string() } }, async ({ q }) => ({
    content: [{ type: 'text', text: `ok ${q}` }],
  }));
  const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
  if (variant === 'service') {
    // What an HTTP transport with OAuth does: every request carries the signed-in user.
    const send = clientTransport.send.bind(clientTransport);
    const authInfo = asUser(t.userId);
    clientTransport.send = (message, options) => send(message, { ...options, authInfo });
  }
  const client = new Client({ name: 'bench-client', version: '1.0.0' });
  await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
  return {
    client,
    close: async () => {
      await meter?.close();
      await client.close();
      await server.close();
    },
  };
}

/**
 * `callers` concurrent loops on one session, each starting its next call when the last returns, until
 * the window closes; calls in flight then finish (counted, not timed). Each loop reads the clock itself:
 * an unmetered call is all promise jobs, so a timer would not fire until the loops stop.
 */
export async function measureMcp(variant: Variant, callers: number, seconds: number, t: McpTarget, serverPid: number): Promise<McpMeasurement> {
  const m: McpMeasurement = {
    variant,
    callers,
    seconds,
    callsPerSecond: 0,
    latency: new Samples().summary(),
    calls: 0,
    successes: 0,
    unrecorded: 0,
    refused: 0,
    thrown: 0,
    requests: {},
    requestsPerCall: 0,
    events: {},
    logged: [],
    cpu: { loadgen: 0, server: 0, postgres: 0, machine: 0 },
  };
  const conn = await connect(variant, t, m);
  const samples = new Samples();
  const cpuFrom = cpuSnapshot(serverPid);
  const end = performance.now() + seconds * 1000;
  let cpuTo: ReturnType<typeof cpuSnapshot> | undefined;
  const caller = async (n: number) => {
    for (let i = 0; ; i++) {
      const started = performance.now();
      if (started >= end) break;
      try {
        const result = (await conn.client.callTool({ name: t.tool, arguments: { q: `${n}-${i}` } })) as CallToolResult;
        if (result.isError) {
          m.refused++;
          m.firstProblem ??= JSON.stringify(result).slice(0, 300);
        } else if (variant !== 'unmetered' && !result._meta?.[META_USAGE]) m.unrecorded++;
        else m.successes++;
      } catch (err) {
        m.thrown++;
        m.firstProblem ??= String(err);
      }
      m.calls++;
      const done = performance.now();
      if (done <= end) samples.push(done - started);
      else cpuTo ??= cpuSnapshot(serverPid);
    }
    cpuTo ??= cpuSnapshot(serverPid);
  };
  await Promise.all(Array.from({ length: callers }, (_, n) => caller(n)));
  m.cpu = cpuShare(cpuFrom, cpuTo ?? cpuSnapshot(serverPid));
  await conn.close();
  m.callsPerSecond = round(samples.count / seconds, 0);
  m.latency = samples.summary();
  const requests = Object.values(m.requests).reduce((a, b) => a + b, 0);
  m.requestsPerCall = round(m.calls > 0 ? requests / m.calls : 0, 3);
  return m;
}
