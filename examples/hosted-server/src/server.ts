/**
 * A hosted MCP server over Streamable HTTP (stateful sessions, plain node:http) whose tools are
 * metered per end user by creditgate in service mode: the shared service key plus the user of each
 * request, resolved to that user's organization's deployment once per session.
 *
 *   CREDITGATE_SERVICE_KEY=… CREDITGATE_URL=http://127.0.0.1:8080 npm start    # listens on :3000/mcp
 *
 * The user comes from a DEMO authentication (see demo-auth.ts). Real servers verify OAuth tokens.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { createMeter, type Meter, type MeteringOptions, withMetering } from '@creditgate/client/mcp';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { demoAuthenticate } from './demo-auth.js';
import { registerTools } from './tools.js';

export interface HostedServerOptions {
  /** 0 picks a free port. Default 3000. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** creditgate's MCP_SERVICE_KEY. */
  serviceKey: string;
  /** Where creditgate answers, e.g. http://127.0.0.1:8080. */
  baseUrl: string;
  /** More metering options (upgradeUrl, onOutage, onEvent, logger …). */
  metering?: Omit<MeteringOptions, 'apiKey' | 'serviceKey' | 'baseUrl' | 'client'>;
}

export interface HostedServer {
  /** The MCP endpoint, e.g. http://127.0.0.1:3000/mcp. */
  url: string;
  meter: Meter;
  /** Ends every session, stops listening and waits for the meter. */
  close(): Promise<void>;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  server: McpServer;
  /** The user who opened the session; every later request must be the same user. */
  userId: string | undefined;
  lastSeen: number;
}

const MAX_SESSIONS = 1_000;
const SESSION_IDLE_MS = 30 * 60_000;
const MAX_BODY_BYTES = 4 * 1024 * 1024;
const LOOPBACK_HOSTNAMES = new Set(['127.0.0.1', 'localhost', '[::1]']);

type AuthedRequest = IncomingMessage & { auth?: AuthInfo };

function sendError(res: ServerResponse, status: number, message: string, code = -32000, headers: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

type BodyResult = { ok: true; value: unknown } | { ok: false; status: number; code: number; message: string };

async function readJsonBody(req: IncomingMessage): Promise<BodyResult> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return { ok: false, status: 413, code: -32000, message: `request body over ${MAX_BODY_BYTES} bytes` };
    chunks.push(chunk);
  }
  try {
    return { ok: true, value: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown };
  } catch {
    return { ok: false, status: 400, code: -32700, message: 'Parse error: the body is not JSON' };
  }
}

export async function startHostedServer(options: HostedServerOptions): Promise<HostedServer> {
  const host = options.host ?? '127.0.0.1';
  // One Meter for every session: one creditgate client, one outbox, one deployment cache.
  const meter = createMeter({ serviceKey: options.serviceKey, baseUrl: options.baseUrl, ...options.metering });
  const sessions = new Map<string, Session>();

  function newSession(userId: string | undefined): Session {
    const server = new McpServer({ name: 'creditgate-example-hosted', version: '0.1.0' });
    withMetering(server, meter);
    registerTools(server);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      // Stored only once the initialize answer carries the id, so no request can race ahead of it.
      onsessioninitialized: (id) => {
        sessions.set(id, session);
      },
    });
    const session: Session = { server, transport, userId, lastSeen: Date.now() };
    transport.onclose = () => {
      const id = transport.sessionId;
      if (id) sessions.delete(id);
    };
    return session;
  }

  async function handle(req: AuthedRequest, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path !== '/mcp') return sendError(res, 404, 'Not found: the MCP endpoint is /mcp');
    // DNS rebinding guard: a server on loopback answers only to loopback host names.
    const hostname = (req.headers.host ?? '').replace(/:\d+$/, '');
    if (LOOPBACK_HOSTNAMES.has(host) && !LOOPBACK_HOSTNAMES.has(hostname)) return sendError(res, 403, `Invalid Host header: ${hostname}`);

    const auth = demoAuthenticate(req.headers.authorization);
    if (!auth.ok) return sendError(res, 401, auth.message, -32000, { 'www-authenticate': 'Bearer realm="creditgate-example"' });
    req.auth = auth.auth;
    const userId = auth.auth?.extra?.userId as string | undefined;

    let body: unknown;
    if (req.method === 'POST') {
      const read = await readJsonBody(req);
      if (!read.ok) return sendError(res, read.status, read.message, read.code);
      body = read.value;
    }

    const sessionId = req.headers['mcp-session-id'];
    if (typeof sessionId === 'string') {
      const session = sessions.get(sessionId);
      if (!session) return sendError(res, 404, 'Session not found', -32001);
      if (session.userId !== userId) return sendError(res, 403, 'This session belongs to another user');
      session.lastSeen = Date.now();
      return session.transport.handleRequest(req, res, body);
    }
    if (req.method === 'POST' && isInitializeRequest(body)) {
      if (sessions.size >= MAX_SESSIONS) return sendError(res, 503, 'Too many open sessions');
      const session = newSession(userId);
      await session.server.connect(session.transport);
      return session.transport.handleRequest(req, res, body);
    }
    return sendError(res, 400, 'Bad Request: no valid session id (start with initialize)');
  }

  const http = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      console.error('[hosted-server] request failed:', err);
      sendError(res, 500, 'Internal server error', -32603);
    });
  });
  const sweeper = setInterval(() => {
    const cutoff = Date.now() - SESSION_IDLE_MS;
    for (const session of sessions.values()) {
      if (session.lastSeen < cutoff) void session.server.close();
    }
  }, 60_000);
  sweeper.unref();

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? 3000, host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  const { port } = http.address() as AddressInfo;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}/mcp`,
    meter,
    close: async () => {
      clearInterval(sweeper);
      const stopped = new Promise<void>((resolve) => http.close(() => resolve()));
      await Promise.all([...sessions.values()].map((session) => session.server.close()));
      http.closeAllConnections();
      await stopped;
      await meter.close();
    },
  };
}

async function main(): Promise<void> {
  const serviceKey = process.env.CREDITGATE_SERVICE_KEY?.trim();
  if (!serviceKey) {
    console.error('[hosted-server] CREDITGATE_SERVICE_KEY is not set; not starting.');
    console.error('[hosted-server] It is creditgate\'s MCP_SERVICE_KEY (printed on its first start, kept in .creditgate/secrets.json).');
    process.exitCode = 1;
    return;
  }
  const baseUrl = process.env.CREDITGATE_URL ?? 'http://127.0.0.1:8080';
  const server = await startHostedServer({ serviceKey, baseUrl, port: Number(process.env.PORT ?? 3000), host: process.env.HOST ?? '127.0.0.1' });
  console.log(`[hosted-server] MCP endpoint ${server.url}, metered against ${baseUrl}`);
  console.log('[hosted-server] DEMO AUTH: send "Authorization: Bearer <creditgate user id>"; anyone can claim any id.');
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.log(`[hosted-server] ${signal}: closing sessions`);
      void server.close().then(() => process.exit(0));
    });
  }
}

// Started directly (`tsx src/server.ts`), not imported by a test.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(`[hosted-server] cannot start: ${err instanceof Error ? err.message : String(err)}`);
    process.exitCode = 1;
  });
}
