import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startStripeStandIn } from './stripe-stand-in/server.js';

/**
 * The service as a user starts it: `creditgate serve` on the embedded default, `creditgate demo`
 * against it, and the curl round trip the demo prints. Runs src/cli.ts through Node with tsx as its
 * loader (no build needed): the tsx wrapper would run each command as a grandchild, a quarter of a
 * second more per command, and one that the SIGKILL of afterAll does not reach.
 */
const NODE_TSX = ['--import', 'tsx'];
const CLI = join(process.cwd(), 'src', 'cli.ts');
const children: ChildProcess[] = [];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], env: Record<string, string>, timeoutMs = 30_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...NODE_TSX, CLI, ...args], { env: { ...process.env, NODE_ENV: 'development', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`timed out: ${args.join(' ')}\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Start `serve` and resolve once it listens (bounded wait). */
function startServer(env: Record<string, string>): Promise<{ child: ChildProcess; output: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...NODE_TSX, CLI, 'serve'], { env: { ...process.env, NODE_ENV: 'development', LOG_LEVEL: 'info', ...env } });
    children.push(child);
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${out}`)), 45_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      if (out.includes('creditgate listening')) {
        clearTimeout(timer);
        resolve({ child, output: () => out });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${out}`));
    });
  });
}

afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
});

describe('configuration is validated before anything starts', () => {
  it('exits naming the variable for a bad value', async () => {
    const res = await run(['serve'], { PORT: 'abc', DATA_DIR: mkdtempSync(join(tmpdir(), 'cg-cli-')) });
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/PORT/);
  });

  it('refuses to start in production without the secrets', async () => {
    const res = await run(['serve'], {
      NODE_ENV: 'production',
      DATA_DIR: mkdtempSync(join(tmpdir(), 'cg-cli-')),
      JWT_SECRET: '',
      MCP_SERVICE_KEY: '',
      ADMIN_API_KEY: '',
      ENCRYPTION_KEY: '',
    });
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/JWT_SECRET: is required when NODE_ENV=production/);
  });
});

describe('embedded quick start', () => {
  it('serves on PGlite, provisions a demo, meters its curl round trip, refuses a second process, drains on SIGTERM', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cg-cli-'));
    const server = await startServer({ DATA_DIR: dataDir, PORT: '0' });
    const base = /creditgate listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(server.output())![1]!;
    const env = { DATA_DIR: dataDir, CREDITGATE_URL: base };
    expect(server.output()).toMatch(/ADMIN_API_KEY=/);
    // The keys to call the service with are printed; the signing and encryption keys stay in the file (README, "Quick start").
    const stored = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as Record<string, string>;
    expect(server.output()).toContain(`MCP_SERVICE_KEY=${stored.MCP_SERVICE_KEY}`);
    expect(server.output()).not.toContain(stored.JWT_SECRET);
    expect(server.output()).not.toContain(stored.ENCRYPTION_KEY);
    expect(server.output()).toMatch(/embedded PGlite/);
    // Started without the start script's Node flags, serve set them itself (src/node-flags.ts).
    expect(server.output()).toMatch(/V8 flags set at start: --heap-growing-percent=50/);

    const second = await run(['serve'], { DATA_DIR: dataDir, PORT: '0' });
    expect(second.code).toBe(3);
    expect(second.stderr).toMatch(/in use by process/);

    const demo = await run(['demo'], env);
    expect(demo.code, demo.stderr).toBe(0);
    expect(demo.stdout).toContain('Billing: Stripe is not configured');
    const key = /API key:\s+(cg_[0-9A-Za-z]{36})/.exec(demo.stdout)?.[1];
    expect(key).toBeDefined();
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const check = await fetch(`${base}/api/v1/mcp/stdio/check-entitlement`, { method: 'POST', headers, body: '{"tool_name":"rag_query"}' });
    expect(await check.json()).toEqual({ allowed: true, credit_cost: 1, tier: 'launch', reason: null });
    const record = await fetch(`${base}/api/v1/mcp/stdio/record-usage`, { method: 'POST', headers, body: '{"tool_name":"rag_query","invocation_id":"demo-1"}' });
    expect(await record.json()).toMatchObject({ success: true, credits_used: 1, credits_remaining: 1999 });

    // Operator commands mirror the admin API against the running instance.
    const deploymentId = /deployment id:\s+([0-9a-f-]{36})/.exec(demo.stdout)![1]!;
    const tier = await run(['tier', deploymentId, 'growth'], env);
    expect(JSON.parse(tier.stdout)).toMatchObject({ tier: 'growth', balance: { monthly_allocation: 20_000, monthly_used: 1 } });
    const granted = await run(['grant', deploymentId, '250', 'goodwill'], env);
    expect(JSON.parse(granted.stdout).balance.purchased).toBe(250);
    const override = await run(['override', deploymentId, '--monthly-credits', '10'], env);
    expect(JSON.parse(override.stdout)).toMatchObject({ overrides: { monthly_credits: 10 }, balance: { monthly_remaining: 9 } });
    const cleared = await run(['clear-overrides', deploymentId], env);
    expect(JSON.parse(cleared.stdout).overrides.monthly_credits).toBeNull();
    const bad = await run(['tier', deploymentId, 'gold'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/tier 'gold' must be one of/);
    const missing = await run(['deployment', '00000000-0000-4000-8000-000000000000'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^creditgate: .* \[NOT_FOUND, HTTP 404\]\n$/);

    const exited = new Promise<number | null>((resolve) => server.child.on('exit', resolve));
    server.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(existsSync(join(dataDir, 'creditgate.lock'))).toBe(false);
  }, 120_000);
});

describe('selling with Stripe, as the README tells it', () => {
  it('with the stand-in: demo prints the purchase call; paying the Checkout page brings the credits', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cg-cli-stripe-'));
    let webhook = '';
    const standIn = await startStripeStandIn({
      delivery: 'auto',
      retryDelaysMs: [50, 100, 200],
      deliver: async (payload, headers) => {
        const res = await fetch(webhook, { method: 'POST', headers, body: payload });
        return { status: res.status };
      },
    });
    try {
      const pack = standIn.createPrice({ productName: 'Small pack', unitAmount: 500 });
      const server = await startServer({
        DATA_DIR: dataDir,
        PORT: '0',
        STRIPE_SECRET_KEY: standIn.secretKey,
        STRIPE_WEBHOOK_SECRET: standIn.webhookSecret,
        STRIPE_API_BASE: standIn.url,
        CREDIT_PACKS: `small=1000:${pack.id}`,
      });
      const base = /creditgate listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(server.output())![1]!;
      webhook = `${base}/webhooks/stripe`;
      const demo = await run(['demo'], { DATA_DIR: dataDir, CREDITGATE_URL: base });
      expect(demo.code, demo.stderr).toBe(0);
      expect(demo.stdout).toContain('Billing (Stripe): packs small (1000 credits)');
      const purchase = /curl -s (\S+\/api\/v1\/credits\/purchase) -H 'X-Deployment-ID: ([0-9a-f-]{36})' -H 'X-Deployment-Secret: (\S+)'/.exec(demo.stdout);
      expect(purchase, demo.stdout).not.toBeNull();
      const [, url, deploymentId, secret] = purchase as unknown as [string, string, string, string];
      const headers = { 'x-deployment-id': deploymentId, 'x-deployment-secret': secret, 'content-type': 'application/json' };
      const bought = (await (await fetch(url, { method: 'POST', headers, body: '{"pack":"small"}' })).json()) as { checkout_session_id: string };
      standIn.completeCheckout(bought.checkout_session_id);
      await standIn.idle();
      const quota = (await (await fetch(`${base}/api/v1/proxy/webhooks/quota`, { headers })).json()) as { creditsAvailable: number };
      // The demo deployment is on launch (2,000 a period); the pack adds 1,000 purchased credits.
      expect(quota.creditsAvailable).toBe(3000);
      const exited = new Promise<number | null>((resolve) => server.child.on('exit', resolve));
      server.child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      await standIn.close();
    }
  }, 120_000);
});
