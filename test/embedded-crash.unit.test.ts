import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { serveNodeFlags } from '../scripts/serve-node-flags.mjs';

/**
 * The embedded default keeps what it answered (docs/operations-memory.md, "Durability"): `serve` on
 * PGlite in DATA_DIR, record-usage under concurrent load, the process SIGKILLed with calls in
 * flight, then started again on the same DATA_DIR. Every deduction answered 200 is there (its usage
 * record, listed through the API) and the balance spent is the sum of the records; retrying every call
 * sent, answered or not, with its invocation id charges each id exactly once.
 */
const ROOT = process.cwd();
const LOOPS = 16;
const LOAD_MS = 2_000;
const MAX_ANSWERED = 3_000;
const children: ChildProcess[] = [];
const temporary: string[] = [];

afterAll(async () => {
  await Promise.all(children.map((child) => stop(child)));
  for (const dir of temporary) rmSync(dir, { recursive: true, force: true });
});

/** SIGKILL a child and resolve once it is gone (bounded: a child that never started is gone already). */
function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 10_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGKILL');
  });
}

interface Server {
  child: ChildProcess;
  base: string;
  output: () => string;
}

/** Start `serve` on the embedded database and resolve with its address once it listens (bounded wait). */
function startServer(env: Record<string, string>): Promise<Server> {
  return new Promise((resolve, reject) => {
    // Node itself, with tsx as its loader: the tsx wrapper would run the server as a grandchild that
    // the SIGKILL would not reach.
    // With the flags `npm start` gives Node (V8's heap settings), so the crash is tested as it would run.
    const child = spawn(process.execPath, [...serveNodeFlags(), '--import', 'tsx', join(ROOT, 'src', 'cli.ts'), 'serve'], {
      env: { ...process.env, NODE_ENV: 'development', LOG_LEVEL: 'info', PORT: '0', SMTP_URL: '', DATABASE_URL: '', REDIS_URL: '', ...env },
    });
    children.push(child);
    // Read every line the server writes (a full pipe would block it); keep the last part for errors.
    let out = '';
    let started = false;
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${out}`)), 60_000);
    const onData = (d: Buffer) => {
      out = (out + d.toString()).slice(-64 * 1024);
      const listening = started ? null : /creditgate listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (listening) {
        started = true;
        clearTimeout(timer);
        resolve({ child, base: listening[1]!, output: () => out });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (!started) reject(new Error(`server exited with ${code ?? signal}:\n${out}`));
    });
  });
}

interface Answer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

async function call(base: string, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

async function ok(base: string, method: string, path: string, headers: Record<string, string>, body?: unknown): Promise<Record<string, unknown>> {
  const answer = await call(base, method, path, headers, body);
  if (answer.status >= 300) throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body;
}

interface Balance {
  monthly_used: number;
  purchased: number;
  reserved: number;
}

interface UsageRecord {
  id: string;
  credits: number;
  success: boolean;
  invocation_id: string | null;
}

/** Credits spent so far: monthly used plus purchased credits gone since `start` (the deduction spends monthly first, then purchased). */
const spentSince = (start: Balance, now: Balance) => now.monthly_used - start.monthly_used + (start.purchased - now.purchased);

describe('the embedded database under SIGKILL', () => {
  it('keeps every deduction it answered, and retries charge each invocation id once', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cg-crash-'));
    temporary.push(dataDir);
    const secret = () => randomBytes(32).toString('base64url');
    const env = {
      DATA_DIR: dataDir,
      JWT_SECRET: secret(),
      MCP_SERVICE_KEY: secret(),
      ADMIN_API_KEY: secret(),
      ENCRYPTION_KEY: secret(),
      EMAIL_VERIFICATION: 'off',
    };
    const admin = { 'x-admin-key': env.ADMIN_API_KEY };
    const service = { 'x-mcp-service-key': env.MCP_SERVICE_KEY };

    // 1–2. A tenant: signup, organization, a tier with MCP and a minute limit the load cannot reach, credits granted.
    const first = await startServer(env);
    const stamp = `${Date.now()}-${randomBytes(3).toString('hex')}`;
    const signup = (await ok(first.base, 'POST', '/auth/signup', {}, { email: `crash-${stamp}@example.com`, password: 'violet-harbor-lantern-42', full_name: 'Crash' })) as {
      data: { access_token: string };
    };
    const bearer = { authorization: `Bearer ${signup.data.access_token}` };
    const org = ((await ok(first.base, 'POST', '/organizations', bearer, { name: 'Crash Org', slug: `crash-${stamp}` })) as { data: { id: string; deployment: { id: string } } }).data;
    const deploymentId = org.deployment.id;
    await ok(first.base, 'PUT', `/api/v1/admin/deployments/${deploymentId}`, admin, { tier: 'growth' });
    await ok(first.base, 'PUT', `/api/v1/admin/deployments/${deploymentId}/overrides`, admin, { api_rate_limit: 1_000_000_000 });
    const granted = (await ok(first.base, 'POST', `/api/v1/admin/deployments/${deploymentId}/credits`, admin, { amount: 1_000_000, reason: 'crash test' })) as unknown as {
      balance: Balance;
    };
    const start = granted.balance;

    // 3. Concurrent record-usage, each call with its own invocation id; SIGKILL after LOAD_MS or MAX_ANSWERED answers.
    const sent: string[] = [];
    const answered = new Map<string, { usageId: string; credits: number }>();
    let refusedBeforeKill = 0;
    let inFlight = 0;
    let inFlightAtKill = -1;
    let killed = false;
    const exited = new Promise<void>((resolve) => first.child.once('exit', () => resolve()));
    const kill = () => {
      if (killed) return;
      killed = true;
      inFlightAtKill = inFlight;
      first.child.kill('SIGKILL');
    };
    const killTimer = setTimeout(kill, LOAD_MS);
    let next = 0;
    await Promise.all(
      Array.from({ length: LOOPS }, async () => {
        while (!killed) {
          const invocationId = `crash-${stamp}-${next++}`;
          sent.push(invocationId);
          inFlight++;
          try {
            const answer = await call(first.base, 'POST', '/api/v1/mcp/usage', service, { deployment_id: deploymentId, tool_name: 'crash_tool', invocation_id: invocationId });
            const body = answer.body as { success?: boolean; usage_id?: string | null; credits_used?: number };
            if (answer.status === 200 && body.success === true && typeof body.usage_id === 'string') {
              answered.set(invocationId, { usageId: body.usage_id, credits: body.credits_used ?? 0 });
              if (answered.size >= MAX_ANSWERED) kill();
            } else if (!killed) refusedBeforeKill++;
          } catch {
            // In flight when the process died: no answer, which the retry below settles.
          } finally {
            inFlight--;
          }
        }
      }),
    );
    clearTimeout(killTimer);
    await exited;
    console.info(`crash test: ${sent.length} sent, ${answered.size} answered, ${inFlightAtKill} in flight at SIGKILL, ${refusedBeforeKill} refused before it`);
    expect(first.child.signalCode).toBe('SIGKILL');
    expect(answered.size).toBeGreaterThan(0);
    expect(inFlightAtKill).toBeGreaterThan(0);
    expect(refusedBeforeKill).toBe(0);

    // 4. Start again on the same DATA_DIR: every answered deduction is there, and the balance agrees with the records.
    const second = await startServer(env);
    const listRecords = async (): Promise<UsageRecord[]> => {
      const records: UsageRecord[] = [];
      let cursor: string | null = null;
      do {
        const query = new URLSearchParams({ deployment_id: deploymentId, limit: '100', ...(cursor ? { cursor } : {}) });
        const page = (await ok(second.base, 'GET', `/organizations/${org.id}/usage/records?${query}`, bearer)) as unknown as {
          data: UsageRecord[];
          meta: { next_cursor: string | null };
        };
        records.push(...page.data);
        cursor = page.meta.next_cursor;
      } while (cursor);
      return records;
    };
    const balance = async () => ((await ok(second.base, 'GET', `/api/v1/admin/deployments/${deploymentId}`, admin)) as unknown as { balance: Balance }).balance;
    const sum = (records: UsageRecord[]) => records.reduce((total, r) => total + r.credits, 0);

    const afterCrash = await listRecords();
    const byId = new Map(afterCrash.map((r) => [r.id, r]));
    const lost = [...answered].filter(([, a]) => !byId.has(a.usageId));
    expect(lost, `answered deductions missing after the restart: ${JSON.stringify(lost.slice(0, 20))}`).toEqual([]);
    for (const [invocationId, a] of answered) {
      expect(byId.get(a.usageId)).toMatchObject({ success: true, invocation_id: invocationId, credits: a.credits });
    }
    const sentIds = new Set(sent);
    expect(afterCrash.every((r) => r.success && r.invocation_id !== null && sentIds.has(r.invocation_id))).toBe(true);
    const balanceAfterCrash = await balance();
    expect(balanceAfterCrash.reserved).toBe(0);
    expect(spentSince(start, balanceAfterCrash)).toBe(sum(afterCrash));
    console.info(`crash test: ${afterCrash.length} records after the restart (${afterCrash.length - answered.size} committed but not answered)`);

    // Retry every call sent, answered or not, with its invocation id: the answered ones replay their record.
    const queue = [...sent];
    await Promise.all(
      Array.from({ length: LOOPS }, async () => {
        for (let invocationId = queue.pop(); invocationId !== undefined; invocationId = queue.pop()) {
          const answer = await call(second.base, 'POST', '/api/v1/mcp/usage', service, { deployment_id: deploymentId, tool_name: 'crash_tool', invocation_id: invocationId });
          expect(answer.status, JSON.stringify(answer.body)).toBe(200);
          expect(answer.body).toMatchObject({ success: true, invocation_id: invocationId });
          const original = answered.get(invocationId);
          if (original) {
            expect(answer.body.usage_id).toBe(original.usageId);
            expect(answer.headers.get('idempotent-replayed')).toBe('true');
          }
        }
      }),
    );

    const afterRetry = await listRecords();
    const perInvocation = new Map<string, number>();
    for (const r of afterRetry) perInvocation.set(r.invocation_id!, (perInvocation.get(r.invocation_id!) ?? 0) + 1);
    expect(afterRetry.every((r) => r.success)).toBe(true);
    expect([...perInvocation].filter(([, n]) => n !== 1)).toEqual([]);
    expect(new Set(perInvocation.keys())).toEqual(sentIds);
    const cost = [...answered.values()][0]!.credits;
    expect(cost).toBeGreaterThan(0);
    const balanceAfterRetry = await balance();
    expect(spentSince(start, balanceAfterRetry)).toBe(sum(afterRetry));
    expect(spentSince(start, balanceAfterRetry)).toBe(sentIds.size * cost);

    await stop(second.child);
  }, 180_000);
});
