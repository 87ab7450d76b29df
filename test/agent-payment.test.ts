/**
 * Paying from inside an agent, end to end: the stdio example server (examples/stdio-server) as a real
 * child process behind the official MCP SDK client, against a live creditgate whose billing is the
 * Stripe stand-in with one credit pack. The agent sees the prices in tools/list (docs/client.md,
 * "Prices in tools/list"), is refused for credits with a top-up link in the tool error (docs/client.md,
 * "What the middleware puts in _meta"; docs/metering.md, "Denials and what is recorded"), a person
 * follows the link and pays (docs/billing.md, "Top-up link"), and the retried call runs and is charged
 * once.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LiveService, startLiveService } from '../packages/client/test/support.js';
import { creditFixtures } from './credit-fixtures.js';
import { type StripeStandIn, startStripeStandIn } from './stripe-stand-in/server.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const STDIO_SERVER = 'examples/stdio-server/src/server.ts';
/** Bound on anything the child is waited for (tsx compiles on the first start). */
const CHILD_WAIT_MS = 20_000;
/** Where the harness's manual clock starts (test/harness.ts). */
const SERVICE_START = '2026-01-15T12:00:00.000Z';
const PACK = { name: 'small', credits: 1000 };

let live: LiveService;
let stripe: StripeStandIn;
let scratch: string;
const f = creditFixtures(() => live.h);
let client: Client | undefined;
let child: ChildProcess | undefined;

beforeAll(async () => {
  stripe = await startStripeStandIn({
    // The service's clock (the harness's manual clock, which starts at SERVICE_START), so the signatures'
    // 5-minute tolerance holds.
    now: () => (live ? live.h.clock.now() : new Date(SERVICE_START)),
    // Delivered over HTTP to the service's real listener (created below, before any event exists).
    deliver: async (payload, headers) => {
      const res = await fetch(`${live.baseUrl}/webhooks/stripe`, { method: 'POST', headers, body: payload });
      await res.arrayBuffer();
      return { status: res.status };
    },
  });
  const price = stripe.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  live = await startLiveService({
    stripeSecretKey: stripe.secretKey,
    stripeApiBase: stripe.url,
    stripeWebhookSecret: stripe.webhookSecret,
    creditPacks: { [PACK.name]: { credits: PACK.credits, priceId: price } },
  });
  scratch = await mkdtemp(join(tmpdir(), 'cg-agent-payment-'));
});

afterAll(async () => {
  await client?.close().catch(() => undefined);
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await live?.close();
  await stripe?.close();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

/** The stdio example as a real child process, with the official SDK client on its stdin/stdout. */
async function startStdioExample(apiKey: string): Promise<Client> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', STDIO_SERVER],
    cwd: repoRoot,
    env: { CREDITGATE_API_KEY: apiKey, CREDITGATE_URL: live.baseUrl, CREDITGATE_OUTBOX_DIR: join(scratch, 'outbox'), HOME: scratch },
    stderr: 'pipe',
  });
  client = new Client({ name: 'agent-payment-test', version: '1.0.0' });
  await client.connect(transport, { timeout: CHILD_WAIT_MS });
  // The SDK keeps the ChildProcess private; afterAll needs it to make sure the child is gone.
  child = (transport as unknown as { _process?: ChildProcess })._process;
  return client;
}

/** The top-up link is PUBLIC_BASE_URL/console/top-up/{token}; the test's service listens on a loopback port instead. */
const onLiveService = (topUpUrl: string) => `${live.baseUrl}${new URL(topUpUrl).pathname}`;
const text = (result: CallToolResult) => (result.content[0] as { text: string }).text;

describe('paying from inside an agent', () => {
  it('sees the price, is refused with a top-up link, the link sells a pack through Checkout, and the retried call is charged once', async () => {
    const tenant = await f.tenantWith(0);
    const agent = await startStdioExample(tenant.apiKey);

    // 1. The price of every metered tool, before any call.
    const { tools } = await agent.listTools();
    const pricing = Object.fromEntries(tools.map((tool) => [tool.name, tool._meta?.['io.creditgate/pricing']]));
    expect(pricing).toEqual({ summarize: { credits: 1, action: 'platform_basic' }, translate: { credits: 1, action: 'platform_basic' } });
    const cost = (pricing.translate as { credits: number }).credits;

    // 2. No credits: a tool error the model can read, with the service's payment_required in _meta.
    const call = { name: 'translate', arguments: { text: 'Thank you, good dog', to: 'es' } };
    const refused = (await agent.callTool(call)) as CallToolResult;
    expect(refused.isError).toBe(true);
    const paymentRequired = refused._meta?.['io.creditgate/payment_required'] as { reason: string; credits_required: number; credits_available: number | null; top_up_url?: string };
    expect(paymentRequired).toEqual({
      reason: 'insufficient_credits',
      credits_required: cost,
      // The example checks with a reservation: a refused one does not know the balance (docs/metering.md, Denials).
      credits_available: null,
      top_up_url: expect.stringMatching(new RegExp(`^${live.h.config.publicBaseUrl}/console/top-up/[A-Za-z0-9_-]{40,}$`)),
    });
    const topUpUrl = paymentRequired.top_up_url!;
    expect(text(refused)).toBe(
      `Not enough credits to run "translate": it costs 1 credit and the balance is unlimited or unknown. Buy credits at ${topUpUrl} (the link is valid for 30 minutes), then call the tool again.`,
    );
    expect(refused._meta?.['io.creditgate/denial']).toMatchObject({ reason: 'insufficient_credits', tool_name: 'translate' });
    expect(await f.balanceOf(tenant.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: 0, reserved: 0 });

    // 3. A person follows the link: the page lists the pack, its form makes a Checkout Session.
    const page = await fetch(onLiveService(topUpUrl));
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain(PACK.name);
    expect(html).toContain('$5.00');
    expect(html).toContain('<form method="post"');

    const bought = await fetch(onLiveService(topUpUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `pack=${PACK.name}`,
      redirect: 'manual',
    });
    expect(bought.status).toBe(303);
    const checkoutUrl = bought.headers.get('location')!;
    expect(checkoutUrl).toMatch(new RegExp(`^${stripe.url}/checkout/cs_test_`));
    // The stand-in's hosted Checkout page answers at that address.
    expect((await fetch(checkoutUrl)).status).toBe(200);
    const sessionId = new URL(checkoutUrl).pathname.split('/').pop()!;
    expect(stripe.state.checkoutSessions.get(sessionId)?.metadata).toMatchObject({ deployment_id: tenant.deploymentId, creditgate_pack: PACK.name });

    // 4. Paid in the stand-in; its signed events reach the service's webhook and grant the pack.
    stripe.completeCheckout(sessionId);
    const deliveries = await stripe.flush();
    expect(deliveries.length).toBeGreaterThan(0);
    for (const d of deliveries) expect(d.ok, `${d.type}: ${d.status} ${d.error ?? ''}`).toBe(true);
    expect(await f.balanceOf(tenant.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: PACK.credits, reserved: 0 });

    // 5. The agent calls again: the tool runs and is charged its price, once.
    const retried = (await agent.callTool(call)) as CallToolResult;
    expect(retried.isError).toBeFalsy();
    expect(text(retried)).toBe('Gracias tú, bueno perro');
    expect(retried._meta?.['io.creditgate/usage']).toMatchObject({ credits_used: cost, credits_remaining: PACK.credits - cost });

    expect(await f.balanceOf(tenant.deploymentId)).toEqual({ monthly_used: 0, purchased_balance: PACK.credits - cost, reserved: 0 });
    const usage = await live.h.deps.db.query<{ tool_name: string; success: boolean; quantity: string }>(
      'SELECT tool_name, success, quantity::text AS quantity FROM usage_records WHERE deployment_id = $1 ORDER BY timestamp',
      [tenant.deploymentId],
    );
    expect(usage).toEqual([{ tool_name: 'translate', success: true, quantity: String(cost) }]);
    const purchases = await live.h.deps.db.query<{ credits: number; granted: boolean }>(
      'SELECT credits, granted_at IS NOT NULL AS granted FROM credit_purchases WHERE deployment_id = $1',
      [tenant.deploymentId],
    );
    expect(purchases).toEqual([{ credits: PACK.credits, granted: true }]);
    await f.expectLedgerConsistent(tenant);
  });
});
