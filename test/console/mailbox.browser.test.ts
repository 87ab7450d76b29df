import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, json, signUpWithOrganization, unique } from '../harness.js';
import { audit } from './axe.js';
import { browserTimeouts, type ConsoleService, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The operator's mailbox at /console/operator/mailbox (docs/accounts.md "The local mailbox",
 * docs/console.md "Operator"): unlocked with the operator key (held in the tab's memory only), it
 * lists the local outbox; a mail sent by an action (an invitation) appears after Refresh, and Open
 * shows it whole with its link. Without SMTP_URL, as the test service runs.
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

async function unlockMailbox(page: Page, key: string): Promise<void> {
  await page.goto('/console/operator/mailbox');
  await page.getByRole('heading', { name: 'Operator mailbox', level: 1 }).waitFor();
  await page.getByLabel('Operator key').fill(key);
  await page.getByRole('button', { name: 'Unlock' }).click();
}

describe('console operator mailbox', () => {
  it('a wrong key is refused; an invitation mail appears after Refresh, opens whole with its link, and Lock forgets the key', async () => {
    const owner = await signUpWithOrganization(s.h);
    const invitee = `${unique('invitee')}@example.com`.toLowerCase();
    const { page } = await s.newPage({ bypassCSP: true });

    await unlockMailbox(page, 'not-the-operator-key-0123456789');
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/^Those credentials were not accepted\./);
    expect(await page.getByRole('heading', { name: 'Mailbox', level: 1, exact: true }).count()).toBe(0);

    await page.getByLabel('Operator key').fill(s.h.config.adminApiKey);
    await page.getByRole('button', { name: 'Unlock' }).click();
    await page.getByRole('heading', { name: 'Mailbox', level: 1, exact: true }).waitFor();
    await page.getByLabel('Recipient').fill(invitee);
    await page.getByRole('button', { name: 'Show', exact: true }).click();
    await page.getByRole('status').filter({ hasText: `No message to ${invitee}.` }).waitFor();

    // The action that sends a mail: the owner invites the address (through the API, as the Members page does).
    const invited = await s.h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/users`,
      headers: bearer(owner.accessToken),
      payload: { email: invitee, role: 'member' },
    });
    expect(invited.statusCode, invited.body).toBe(201);
    const acceptUrl = json<{ data: { accept_url: string; email_delivery: string } }>(invited).data.accept_url;

    await page.getByRole('button', { name: 'Refresh' }).click();
    const messages = page.getByTestId('mailbox-messages');
    await expect.poll(() => messages.locator('tbody tr').count()).toBe(1);
    const row = messages.locator('tbody tr').first();
    expect(await row.locator('td').first().textContent()).toBe(invitee);
    expect(await row.getByRole('link', { name: 'Open the invitation' }).getAttribute('href')).toBe(acceptUrl);
    // The token stays in the href: the address beside the link is shown without it.
    expect(await row.textContent()).not.toContain(acceptUrl);

    // Open: the message whole, focus on it, its link followable in a new tab without a referrer.
    await row.getByRole('button', { name: /^Open/ }).click();
    const opened = page.getByTestId('mail-open');
    await opened.waitFor();
    await expect.poll(() => page.evaluate(() => document.activeElement?.getAttribute('data-testid'))).toBe('mail-open');
    const subject = (await row.locator('td').nth(1).textContent()) ?? '';
    expect(await opened.getByRole('heading', { level: 2 }).textContent()).toBe(subject);
    const terms = await opened.locator('dl dt').allTextContents();
    const values = await opened.locator('dl dd').allTextContents();
    expect(Object.fromEntries(terms.map((t, i) => [t, values[i]]))).toMatchObject({ To: invitee, Kind: 'Invitation', Status: expect.stringMatching(/^In the outbox/) });
    const body = opened.getByTestId('mail-body');
    expect(await body.textContent()).toContain(acceptUrl);
    const link = body.getByRole('link', { name: acceptUrl });
    expect(await link.getAttribute('target')).toBe('_blank');
    expect(await link.getAttribute('rel')).toBe('noreferrer noopener');
    expect(await row.getAttribute('aria-current')).toBe('true');
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
    // No sideways scrolling on a phone (docs/console.md "Layout").
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await page.setViewportSize({ width: 1280, height: 860 });

    // Nothing of the key in storage or the URL; Lock forgets it.
    const storage = await page.evaluate(() => ({ local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie }));
    expect(JSON.stringify(storage)).not.toContain(s.h.config.adminApiKey);
    expect(page.url()).not.toContain(s.h.config.adminApiKey);
    await page.getByRole('button', { name: 'Close message' }).click();
    await opened.waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'Lock', exact: true }).click();
    await page.getByLabel('Operator key').waitFor();
    expect(await page.getByLabel('Operator key').inputValue()).toBe('');
  });
});
