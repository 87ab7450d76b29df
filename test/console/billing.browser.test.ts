import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUpAsMember, signUpWithOrganization } from '../harness.js';
import { type StripeStandIn, startStripeStandIn } from '../stripe-stand-in/server.js';
import { audit } from './axe.js';
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

/** What the stand-in charges for a price, as the console writes dollars: 4900 → "$49.00". */
const dollars = (priceId: string | undefined) => `$${(standIn.state.prices.get(priceId ?? '')!.unit_amount / 100).toFixed(2)}`;

/** Each plan card as shown: its heading, price and credits. */
async function plans(page: Page): Promise<Array<{ heading: string; price: string; credits: string; current: string | null }>> {
  const cards = page.getByTestId('plans').locator('li');
  const out = [];
  for (const card of await cards.all()) {
    out.push({
      heading: (await card.getByRole('heading').textContent()) ?? '',
      price: (await card.getByTestId('plan-price').textContent()) ?? '',
      credits: (await card.getByTestId('plan-credits').textContent()) ?? '',
      current: await card.getAttribute('aria-current'),
    });
  }
  return out;
}

/** The packs table as shown: one array of cell texts per row. */
async function packRows(page: Page): Promise<string[][]> {
  const rows = page.getByTestId('packs').locator('tbody tr');
  return Promise.all((await rows.all()).map((r) => r.locator('td').allTextContents()));
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
    // The plans and packs with the prices Stripe holds (the stand-in's), the tier's monthly credits.
    expect(dollars(price.launch)).toBe('$49.00');
    await expect.poll(() => plans(page)).toEqual([{ heading: 'launch ', price: `${dollars(price.launch)} / month`, credits: '2,000 credits a month', current: null }]);
    await expect.poll(() => packRows(page)).toEqual([['small', '1,000', `${dollars(price.small)}$0.005 a credit`, 'Buy small']]);
    expect(await page.getByRole('columnheader', { name: 'Price' }).count()).toBe(1);
    expect(await page.getByTestId('prices-unread').count()).toBe(0);

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
    // The plan in force is marked, and offers no second subscription.
    await expect.poll(() => plans(page)).toEqual([
      { heading: 'launch Current plan', price: `${dollars(price.launch)} / month`, credits: '2,000 credits a month', current: 'true' },
    ]);
    expect(await page.getByRole('button', { name: /^Subscribe/ }).count()).toBe(0);

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
    await expect.poll(() => packRows(page)).toEqual([['small', '1,000', `${dollars(price.small)}$0.005 a credit`]]);
    await expect.poll(() => plans(page)).toEqual([{ heading: 'launch ', price: `${dollars(price.launch)} / month`, credits: '2,000 credits a month', current: null }]);
    await page.getByText('Your role can see billing; owners and admins buy and manage it.').waitFor();
  });
});

describe('console billing page prices', () => {
  it('at 390 px the plans and the packs with their prices fit the screen (nothing scrolls sideways) and pass axe', async () => {
    const owner = await signUpWithOrganization(s.h);
    const { page } = await s.newPage({ bypassCSP: true });
    await signInInBrowser(page, owner);
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`/console/orgs/${owner.organizationId}/billing`);
    await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
    await expect.poll(() => packRows(page)).toEqual([['small', '1,000', `${dollars(price.small)}$0.005 a credit`, 'Buy small']]);
    await page.getByRole('button', { name: 'Subscribe: launch' }).waitFor();
    const widths = await page.evaluate(() => {
      const table = document.querySelector('[data-testid="packs"]')!.parentElement!;
      return { page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth, table: table.scrollWidth, box: table.clientWidth };
    });
    expect(widths.page).toBeLessThanOrEqual(widths.view);
    expect(widths.table).toBeLessThanOrEqual(widths.box);
    expect(await audit(page)).toEqual([]);
  });

  it('Stripe refusing the price reads: the catalog still shows, with — for the prices and a note', async () => {
    const owner = await signUpWithOrganization(s.h);
    s.h.clock.advance(10 * 60_000); // past the service's 5 minutes of kept prices
    standIn.failNext(2, { status: 500, path: /^\/v1\/prices\// });
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await openBilling(page);
    await page.getByTestId('prices-unread').waitFor();
    await expect.poll(() => plans(page)).toEqual([{ heading: 'launch ', price: '—', credits: '2,000 credits a month', current: null }]);
    await expect.poll(() => packRows(page)).toEqual([['small', '1,000', '—', 'Buy small']]);
    await page.getByRole('button', { name: 'Subscribe: launch' }).waitFor();
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
