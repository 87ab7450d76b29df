/**
 * The Python client (packages/python) against a live creditgate: starts the service as the client's
 * own tests do, then runs `python3 -m unittest discover` with the base URL and keys in the
 * environment (the Python tests provision their tenants through the operator API). Also compiles
 * every file, and type-checks with `mypy --strict` where mypy is installed. Billing is available
 * (docs/billing.md, "Top-up link": a Stripe key, the Stripe stand-in's, and a credit pack), so refusals
 * for credits carry `payment_required` with a top-up link where a deployment's `billing_enabled` is on.
 */
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { type LiveService, startLiveService } from './support.js';

const repoRoot = fileURLToPath(new URL('../../..', import.meta.url));
const PYTHON = process.env.CG_PYTHON ?? 'python3';
/** Debian's python3-mypy runs under the system interpreter, which need not be the one on PATH. */
const MYPY_PYTHONS = [PYTHON, '/usr/bin/python3'];
const hasPython = spawnSync(PYTHON, ['--version']).status === 0;

interface Run {
  code: number | null;
  output: string;
}

/** Asynchronous on purpose: the service answering the Python tests runs in this process's event loop. */
function run(command: string, args: string[], env: Record<string, string> = {}, timeoutMs = 240_000): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: repoRoot, env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env } });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

describe('Python client (packages/python)', () => {
  // Not a skip: a machine without python3 would pass this suite without testing the client.
  it('python3 is there to test the client with', () => {
    expect(hasPython, `${PYTHON} --version failed: install python3 (3.10+), or point CG_PYTHON at one`).toBe(true);
  });

  let live: LiveService;
  let stripe: StripeStandIn;
  beforeAll(async () => {
    stripe = await startStripeStandIn();
    const small = stripe.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
    live = await startLiveService({
      webhookAllowPrivateNetworks: true,
      stripeSecretKey: stripe.secretKey,
      stripeApiBase: stripe.url,
      stripeWebhookSecret: stripe.webhookSecret,
      creditPacks: { small: { credits: 1000, priceId: small } },
    });
  });
  afterAll(async () => {
    await live?.close();
    await stripe?.close();
  });

  it('python3 -m unittest passes against the live service', { timeout: 300_000 }, async () => {
    const result = await run(PYTHON, ['-m', 'unittest', 'discover', '-s', 'packages/python/tests', '-t', 'packages/python/tests', '-v'], {
      CG_BASE_URL: live.baseUrl,
      CG_ADMIN_KEY: live.h.config.adminApiKey,
      CG_SERVICE_KEY: live.h.config.mcpServiceKey,
    });
    if (process.env.CG_PYTHON_VERBOSE) console.log(result.output);
    expect(result.code, result.output).toBe(0);
    // Live tests skip without the environment above: none may skip here.
    expect(result.output, result.output).not.toMatch(/skipped/);
    expect(result.output).toMatch(/\nOK\s*$/);
  });

  it('every file compiles', { timeout: 60_000 }, async () => {
    // Bytecode goes to a scratch prefix, not beside the sources.
    const result = await run(PYTHON, ['-m', 'compileall', '-q', '-f', 'packages/python/src', 'packages/python/tests'], {
      PYTHONPYCACHEPREFIX: '/tmp/creditgate-pycache',
    });
    expect(result.code, result.output).toBe(0);
  });

  const mypy = MYPY_PYTHONS.find((python) => spawnSync(python, ['-m', 'mypy', '--version']).status === 0);
  it.skipIf(!mypy)('mypy --strict finds nothing (checked as Python 3.10, the oldest supported)', { timeout: 120_000 }, async () => {
    const result = await run(mypy!, ['-m', 'mypy', '--strict', '--python-version', '3.10', '--no-incremental', '--cache-dir=/dev/null', 'packages/python/src/creditgate']);
    expect(result.code, result.output).toBe(0);
  });
});
