import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUpAsMember, signUpWithOrganization } from '../harness.js';
import { type StripeStandIn, startStripeStandIn } from '../stripe-stand-in/server.js';
import { type ConsoleService, signInInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

/**
 * The billing page against the Stripe stand-in (docs/billing.md): a subscription bought through the
 * stand-in's Checkout page shows with its invoice; "Buy" leads to the pack's Checkout and, paid, the
 * credits reach the overview; the portal opens; a member sees billing without its controls. And the
 * same page on an installation without Stripe.
 */
let s: ConsoleService;
let bare: ConsoleService;
let standIn: StripeStandIn;
const price: Record<string, string> = {};

beforeAll(async () => {
  standIn = await startStripeStandIn({
    now: () => (s ? s.h.clock.now() : new Date()),
    deliver: async (payload, headers) => ({ status: (await s.h.request({ method: 'POST', url: '/webhooks/stripe', headers, payload })).statusCode }),
  });
  price.launch = standIn.createPrice({ productName: 'Launch', unitAmount: 4900, interval: 'month' }).id;
  price.small = standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  s = await startConsoleService({
    stripeSecretKey: standIn.secretKey,
    stripeApiBase: standIn.url,
    stripeWebhookSecret: standIn.webhookSecret,
    stripePriceTiers: { [price.launch]: 'launch' },
    creditPacks: { small: { credits: 1000, priceId: price.small } },
  });
  bare = await startConsoleService();
});
afterAll(async () => {
  await bare?.close();
  await s?.close();
  await standIn?.close();
});


async function openBilling(page: Page): Promise<void> {
  await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Billing' }).click();
  await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
}

/** The subscription facts as shown: term → value. */
async function facts(page: Page): Promise<Record<string, string>> {
  const dl = page.getByTestId('subscription');
  const terms = await dl.locator('dt').allTextContents();
  const values = await dl.locator('dd').allTextContents();
  return Object.fromEntries(terms.map((t, i) => [t, values[i] ?? '']));
}

async function flushAll(): Promise<void> {
  for (const r of await standIn.flush()) expect(r.ok, `${r.type}: ${r.status} ${r.error ?? ''}`).toBe(true);
}

describe('console billing page', () => {
  it('subscribes through Checkout, shows the subscription and its invoice, buys a pack whose credits reach the overview, opens the portal', async () => {
    const owner = await signUpWithOrganization(s.h);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await openBilling(page);
    await expect.poll(() => facts(page)).toEqual({ Plan: 'free', Status: 'No subscription' });
    await page.getByText('No invoices yet.').waitFor();

    // Subscribe: the browser goes to the stand-in's Checkout page for the session the API made.
    await page.getByRole('button', { name: 'Subscribe: launch' }).click();
    await page.waitForURL(`${standIn.url}/checkout/**`);
    const subscribeSession = [...standIn.state.checkoutSessions.values()].find((c) => c.metadata?.organization_id === owner.organizationId && c.mode === 'subscription')!;
    expect(page.url()).toBe(subscribeSession.url);
    await page.getByRole('button', { name: 'Pay', exact: true }).click();
    await page.waitForURL(`${s.baseUrl}/console/orgs/${owner.organizationId}/billing?checkout=subscribed`);
    await page.getByRole('status').filter({ hasText: 'Payment sent to Stripe' }).waitFor();
    // Stripe's events reach the service; a reload shows the subscription and its paid invoice.
    await flushAll();
    await page.reload();
    await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
    const subscription = [...standIn.state.subscriptions.values()].find((x) => x.metadata?.organization_id === owner.organizationId)!;
    const periodEnd = new Date(subscription.items.data[0]!.current_period_end * 1000).toISOString();
    await expect.poll(() => facts(page)).toEqual({
      Plan: 'pro',
      Status: 'active',
      Price: `launch (${price.launch})`,
      'Current period ends': `${periodEnd.slice(0, 16).replace('T', ' ')} UTC`,
    });
    const invoice = [...standIn.state.invoices.values()].find((i) => i.customer === subscription.customer)!;
    const invoiceRow = page.getByTestId('invoices').locator('tbody tr');
    await expect.poll(() => invoiceRow.count()).toBe(1);
    const [, , amount, paid, status] = await invoiceRow.locator('td').allTextContents();
    expect([amount, paid, status]).toEqual(['$49.00', '$49.00', 'paid']);
    expect(await invoiceRow.getByRole('link', { name: /View invoice/ }).getAttribute('href')).toBe(invoice.hosted_invoice_url);

    // Buy a pack: to its Checkout, paid, back; the credits show on the overview once Stripe's event is in.
    await page.getByRole('button', { name: 'Buy small' }).click();
    await page.waitForURL(`${standIn.url}/checkout/**`);
    const packSession = [...standIn.state.checkoutSessions.values()].find((c) => c.url === page.url())!;
    expect(packSession.metadata).toMatchObject({ organization_id: owner.organizationId, deployment_id: owner.deploymentId, creditgate_pack: 'small' });
    await page.getByRole('button', { name: 'Pay', exact: true }).click();
    await page.waitForURL(`${s.baseUrl}/console/orgs/${owner.organizationId}/billing?checkout=paid`);
    await flushAll();
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Overview' }).click();
    await expect.poll(() => page.getByTestId('card-purchased').locator('.value').textContent()).toBe('1,000');

    // The billing portal: the stand-in's portal page for this organization's customer.
    await openBilling(page);
    await page.getByRole('button', { name: 'Open billing portal' }).click();
    await page.waitForURL(`${standIn.url}/portal/**`);
    const portal = [...standIn.state.portalSessions.values()].find((p) => p.url === page.url())!;
    expect(portal).toMatchObject({ customer: subscription.customer, return_url: `${s.baseUrl}/console/orgs/${owner.organizationId}/billing` });
    await page.getByRole('heading', { name: 'Your subscriptions' }).waitFor();
  });

  it('a member sees billing without its controls', async () => {
    const owner = await signUpWithOrganization(s.h);
    const member = await signUpAsMember(s.h, owner.organizationId, 'member');
    const { page } = await s.newPage();
    await signInInBrowser(page, member);
    await page.goto(`/console/orgs/${owner.organizationId}/billing`);
    await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
    await page.getByTestId('packs').waitFor();
    expect(await page.getByRole('button', { name: /^(Buy|Subscribe|Open billing portal)/ }).count()).toBe(0);
    await page.getByText('Your role can see billing; owners and admins buy and manage it.').waitFor();
  });
});

describe('console billing page without Stripe', () => {
  it('says Stripe is not configured and offers nothing to buy', async () => {
    const owner = await signUpWithOrganization(bare.h);
    const { page } = await bare.newPage();
    await signInInBrowser(page, owner);
    await openBilling(page);
    await expect.poll(() => page.getByTestId('billing-not-configured').textContent()).toMatch(/^Stripe is not configured on this installation/);
    await expect.poll(() => facts(page)).toEqual({ Plan: 'free', Status: 'No subscription' });
    expect(await page.getByRole('button', { name: 'Open billing portal' }).isDisabled()).toBe(true);
    expect(await page.getByRole('button', { name: /^(Buy|Subscribe)/ }).count()).toBe(0);
    await page.getByText('No credit packs are on sale (CREDIT_PACKS).').waitFor();
  });
});
