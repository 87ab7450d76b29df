import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureCustomer } from '../../src/modules/billing/checkout.js';
import { startPackStandIn } from '../billing-fixtures.js';
import { bearer, json, setTierOverHttp, signUpAsMember, signUpWithOrganization } from '../harness.js';
import type { StripeStandIn } from '../stripe-stand-in/server.js';
import { audit } from './axe.js';
import { browserTimeouts, type ConsoleService, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The auto top-up page (docs/billing.md "Auto top-up") against the Stripe stand-in: turning it on
 * without a saved card is the API's 409, which the page explains in words with the way out (the
 * Billing page, the billing portal), and nothing changes; with a card it turns on, and it turns off
 * again. Without billing on the primary deployment the page says that instead; a member has no access.
 */
let s: ConsoleService | undefined;
let standIn: StripeStandIn;
beforeAll(async () => {
  const pack = await startPackStandIn(() => s?.h, new Date());
  standIn = pack.standIn;
  s = await startConsoleService(pack.config);
});
afterAll(async () => {
  await s?.close();
  await standIn?.close();
});

interface Setting {
  enabled: boolean;
  below_credits: number | null;
  pack: string | null;
  max_per_month: number | null;
}

const service = () => s!;
const settingOf = async (token: string, organizationId: string) =>
  json<{ data: Setting }>(await service().h.request({ method: 'GET', url: `/organizations/${organizationId}/auto-top-up`, headers: bearer(token) })).data;

async function openAutoTopUp(page: Page, organizationId: string): Promise<void> {
  await page.goto(`/console/orgs/${organizationId}/auto-top-up`);
  await page.getByRole('heading', { name: 'Auto top-up', level: 1 }).waitFor();
  await page.getByTestId('auto-top-up').waitFor();
}

/** The facts shown under "Now": term → value. */
async function facts(page: Page): Promise<Record<string, string>> {
  const dl = page.getByTestId('auto-top-up');
  const terms = await dl.locator('dt').allTextContents();
  const values = await dl.locator('dd').allTextContents();
  return Object.fromEntries(terms.map((t, i) => [t, values[i] ?? '']));
}

async function fill(page: Page, below: string, pack: string, perMonth: string): Promise<void> {
  await page.getByRole('checkbox', { name: /Buy a credit pack automatically/ }).check();
  await page.getByLabel('Below (available credits)').fill(below);
  await page.getByLabel('Pack', { exact: true }).selectOption(pack);
  await page.getByLabel('At most per month').fill(perMonth);
}

describe('console auto top-up page', () => {
  it('explains the 409 of a missing card with the way out and changes nothing; with a saved card it turns on and off', async () => {
    const owner = await signUpWithOrganization(service().h);
    await setTierOverHttp(service().h, owner.deploymentId, 'launch');
    const { page } = await service().newPage({ bypassCSP: true });
    await signInInBrowser(page, owner);
    await openAutoTopUp(page, owner.organizationId);
    expect(await facts(page)).toMatchObject({ 'Auto top-up': 'Off', Below: '—', Pack: '—', 'At most': '—' });

    // No saved card: 409 CONFLICT, details.missing [payment_method], in words, with the way out.
    await fill(page, '50', 'small', '3');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    const missing = page.getByTestId('auto-top-up-missing');
    await missing.waitFor();
    expect(await missing.getAttribute('role')).toBe('alert');
    expect(await missing.locator('[data-missing]').evaluateAll((items) => items.map((i) => i.getAttribute('data-missing')))).toEqual(['payment_method']);
    expect(await missing.textContent()).toContain('No saved card.');
    expect(await missing.textContent()).toContain('Nothing was changed.');
    expect(await missing.textContent()).not.toContain('CONFLICT');
    const toBilling = missing.getByRole('link', { name: 'Billing page' });
    expect(await toBilling.getAttribute('href')).toBe(`/console/orgs/${owner.organizationId}/billing`);
    expect(await missing.getByRole('button', { name: 'open the billing portal now' }).count()).toBe(1);
    expect(await settingOf(owner.accessToken, owner.organizationId)).toMatchObject({ enabled: false, below_credits: null });
    // The form keeps what was typed.
    expect(await page.getByLabel('Below (available credits)').inputValue()).toBe('50');
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
    // No sideways scrolling on a phone (docs/console.md "Layout").
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await page.setViewportSize({ width: 1280, height: 860 });

    // The link leads to the Billing page.
    await toBilling.click();
    await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/console/orgs/${owner.organizationId}/billing`);

    // A card saved (as the billing portal leaves it): now it turns on.
    standIn.savePaymentMethod(await ensureCustomer(service().h.ctx, owner.organizationId), { makeDefault: true });
    await openAutoTopUp(page, owner.organizationId);
    await fill(page, '50', 'small', '3');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await expect.poll(() => page.getByTestId('auto-top-up-notice').textContent()).toBe('Auto top-up is on.');
    await expect
      .poll(() => facts(page))
      .toMatchObject({ 'Auto top-up': 'On', Below: '50 available credits', Pack: 'small (1,000 credits)', 'At most': '3 a month', 'Failed in a row': '0' });
    expect(await settingOf(owner.accessToken, owner.organizationId)).toMatchObject({ enabled: true, below_credits: 50, pack: 'small', max_per_month: 3 });

    // Edit the line, then turn it off: the rest of the setting stays.
    await page.getByLabel('Below (available credits)').fill('80');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await expect.poll(() => facts(page)).toMatchObject({ 'Auto top-up': 'On', Below: '80 available credits' });
    await page.getByRole('button', { name: 'Turn off' }).click();
    await expect.poll(() => page.getByTestId('auto-top-up-notice').textContent()).toBe('Auto top-up is off.');
    await expect.poll(() => facts(page)).toMatchObject({ 'Auto top-up': 'Off', Below: '80 available credits' });
    expect(await settingOf(owner.accessToken, owner.organizationId)).toMatchObject({ enabled: false, below_credits: 80, pack: 'small', max_per_month: 3 });
  });

  it('without billing on the primary deployment says so; a member has no access', async () => {
    // A new organization's primary deployment is on the sandbox tier, which has no billing_enabled.
    const owner = await signUpWithOrganization(service().h);
    const { page } = await service().newPage();
    await signInInBrowser(page, owner);
    await openAutoTopUp(page, owner.organizationId);
    await fill(page, '10', 'large', '1');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    const missing = page.getByTestId('auto-top-up-missing');
    await missing.waitFor();
    expect(await missing.locator('[data-missing]').evaluateAll((items) => items.map((i) => i.getAttribute('data-missing')))).toEqual(['billing_available']);
    expect(await missing.textContent()).toContain('Billing is not available');
    expect(await missing.getByRole('link', { name: 'Billing page' }).getAttribute('href')).toBe(`/console/orgs/${owner.organizationId}/billing`);
    expect((await settingOf(owner.accessToken, owner.organizationId)).enabled).toBe(false);

    const member = await signUpAsMember(service().h, owner.organizationId, 'member');
    const { page: memberPage } = await service().newPage();
    await signInInBrowser(memberPage, member);
    await memberPage.goto(`/console/orgs/${owner.organizationId}/auto-top-up`);
    await memberPage.getByRole('heading', { name: 'No access to auto top-up' }).waitFor();
    expect(await memberPage.getByRole('button', { name: 'Save', exact: true }).count()).toBe(0);
  });
});
