import { type PaymentRequired, createClient } from '@creditgate/client';
import { META_DENIAL, META_PAYMENT_REQUIRED, type MeteringEvent, withMetering } from '@creditgate/client/mcp';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { createTenant, type Tenant } from '../../../test/harness.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { admin, balanceOf, text, usageRows } from './mcp-rig.js';
import { type LiveService, startLiveService } from './support.js';

/**
 * A refusal money could lift, through the official MCP SDK client (docs/client.md, "What the middleware
 * puts in _meta"): the tool error names the price, the balance and the top-up link (docs/billing.md,
 * "Top-up link"), or the budget and when it resets (docs/budgets.md), and carries the service's
 * `payment_required` as received. Billing is available because the service runs with a Stripe key (the
 * Stripe stand-in) and credit packs.
 */
let live: LiveService;
let stripe: StripeStandIn;
beforeAll(async () => {
  stripe = await startStripeStandIn();
  const small = stripe.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  live = await startLiveService({ stripeSecretKey: stripe.secretKey, stripeApiBase: stripe.url, creditPacks: { small: { credits: 1000, priceId: small } } });
});
afterAll(async () => {
  await live?.close();
  await stripe?.close();
});

interface CheckAnswer {
  allowed: boolean;
  reason: string | null;
  payment_required?: PaymentRequired;
}

/** A metered McpServer and an SDK client over the in-memory transport; `checks` keeps every check answer the service sent. */
async function connect(tenant: Tenant, options: { reserve?: boolean } = {}) {
  const server = new McpServer({ name: 'paying', version: '1.0.0' });
  const events: MeteringEvent[] = [];
  const checks: CheckAnswer[] = [];
  let runs = 0;
  const meter = withMetering(server, {
    apiKey: tenant.apiKey,
    baseUrl: live.baseUrl,
    retries: 0,
    outbox: false,
    pricing: false,
    ...(options.reserve === undefined ? {} : { reserve: options.reserve }),
    logger: { warn: () => {}, error: () => {} },
    onEvent: (event) => events.push(event),
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      if (new URL(String(input)).pathname.endsWith('/check-entitlement')) checks.push((await res.clone().json()) as CheckAnswer);
      return res;
    },
  });
  server.registerTool('search', { description: 'Search', inputSchema: { q: z.string() } }, async ({ q }) => {
    runs++;
    return { content: [{ type: 'text', text: `results for ${q}` }] };
  });
  const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: 'test-client', version: '1.0.0' });
  await Promise.all([server.connect(serverTransport), client.connect(clientTransport)]);
  return {
    client,
    events,
    checks,
    runs: () => runs,
    call: (q: string) => client.callTool({ name: 'search', arguments: { q } }) as Promise<CallToolResult>,
    close: async () => {
      await meter.close();
      await client.close();
      await server.close();
    },
  };
}

const lastRefusal = (checks: CheckAnswer[]) => {
  const refused = checks.filter((c) => !c.allowed);
  return refused[refused.length - 1]!;
};
const creditsOf = (n: number) => `${n} ${n === 1 ? 'credit' : 'credits'}`;

describe('a refusal for credits with billing available', () => {
  it('is a tool error naming the price, the balance and the top-up link, with payment_required in _meta as the service sent it', async () => {
    const tenant = await creditFixtures(() => live.h).tenantWith(0);
    // reserve: false is the plain check, which tells the balance.
    const c = await connect(tenant, { reserve: false });
    const result = await c.call('otters');
    expect(result.isError).toBe(true);

    const answer = lastRefusal(c.checks);
    expect(answer).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    const sent = answer.payment_required!;
    expect(sent).toEqual({ reason: 'insufficient_credits', credits_required: expect.any(Number), credits_available: 0, top_up_url: expect.stringContaining('/console/top-up/') });
    expect(result._meta?.[META_PAYMENT_REQUIRED]).toEqual(sent);
    expect(Object.keys(result._meta?.[META_PAYMENT_REQUIRED] as object).sort()).toEqual(Object.keys(sent).sort());

    const message = text(result);
    expect(message).toContain(`it costs ${creditsOf(sent.credits_required)}`);
    expect(message).toContain('the balance is 0 credits');
    expect(message).toContain(sent.top_up_url!);
    // The denial stays beside it, with the same sentence.
    expect(result._meta?.[META_DENIAL]).toMatchObject({ reason: 'insufficient_credits', tool_name: 'search', message });
    expect(result.structuredContent).toMatchObject({ error: 'creditgate_denied', reason: 'insufficient_credits' });

    // The link is the service's page that sells a credit pack, and it opens.
    const page = await live.h.request({ method: 'GET', url: new URL(sent.top_up_url!).pathname });
    expect(page.statusCode, page.body).toBe(200);
    expect(c.runs()).toBe(0);
    expect(await usageRows(live, tenant)).toEqual([]);
    await c.close();
  });

  it('with a reservation (the default) the balance is unknown to the refusal: the text says so', async () => {
    const tenant = await creditFixtures(() => live.h).tenantWith(0);
    const c = await connect(tenant);
    const result = await c.call('otters');
    const sent = lastRefusal(c.checks).payment_required!;
    expect(sent).toMatchObject({ reason: 'insufficient_credits', credits_available: null, top_up_url: expect.any(String) });
    expect(result._meta?.[META_PAYMENT_REQUIRED]).toEqual(sent);
    expect(text(result)).toContain('the balance is unlimited or unknown');
    expect(text(result)).toContain(sent.top_up_url!);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 0, reserved: 0 });
    await c.close();
  });

  it('without billing for the deployment the refusal names price and balance, with no link: the usual advice', async () => {
    const tenant = await creditFixtures(() => live.h).tenantWith(0);
    await admin(live, 'PUT', `/api/v1/admin/deployments/${tenant.deploymentId}/flags`, { billing_enabled: false });
    const c = await connect(tenant, { reserve: false });
    const result = await c.call('otters');
    expect(result.isError).toBe(true);
    const sent = lastRefusal(c.checks).payment_required!;
    expect(sent).toEqual({ reason: 'insufficient_credits', credits_required: 1, credits_available: 0 });
    expect(result._meta?.[META_PAYMENT_REQUIRED]).toEqual(sent);
    expect(text(result)).toBe(
      'Not enough credits to run "search": it costs 1 credit and the balance is 0 credits. Buy credits or wait for the monthly allocation to reset, then call the tool again.',
    );
    expect(text(result)).not.toContain('/console/top-up/');
    expect(result._meta?.[META_DENIAL]).toMatchObject({ reason: 'insufficient_credits' });
    await c.close();
  });
});

describe('a refusal by a budget', () => {
  it('names the budget and when it resets, with payment_required in _meta as the service sent it and no link', async () => {
    const tenant = await createTenant(live.h, { tier: 'launch', scopes: ['read', 'write', 'admin'] });
    const budget = await createClient({ apiKey: tenant.apiKey }, { baseUrl: live.baseUrl, retries: 0 }).budgets.create(tenant.organizationId, {
      scope: 'organization',
      limit_credits: 1,
      window: 'week',
    });
    const c = await connect(tenant);
    expect((await c.call('first')).isError).toBeFalsy();
    const result = await c.call('second');
    expect(result.isError).toBe(true);

    const sent = lastRefusal(c.checks).payment_required!;
    expect(sent).toMatchObject({ reason: 'budget_exceeded', budget_id: budget.id, resets_at: budget.resets_at });
    expect(sent).not.toHaveProperty('top_up_url');
    expect(result._meta?.[META_PAYMENT_REQUIRED]).toEqual(sent);

    const message = text(result);
    expect(message).toContain(`the spending budget ${budget.id}`);
    expect(message).toContain(`resets at ${budget.resets_at}`);
    expect(message).toContain(`it costs ${creditsOf(sent.credits_required)}`);
    expect(message).toContain('Buying credits does not lift a budget');
    expect(message).not.toContain('/console/top-up/');
    expect(result._meta?.[META_DENIAL]).toMatchObject({ reason: 'budget_exceeded', budget_id: budget.id, resets_at: budget.resets_at, message });
    expect(c.runs()).toBe(1);
    expect(await balanceOf(live, tenant)).toMatchObject({ used: 1, reserved: 0 });
    await c.close();
  });
});
