import { createServer } from 'node:net';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, json, unique } from '../harness.js';
import { browserTimeouts, type ConsoleService, createOrganizationInBrowser, PASSWORD, signUpInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * A new user's first hour on a fresh install without SMTP (docs/console.md "Email verification" and
 * "Operator", Mailbox): every mail stays in the local outbox, and each link is read in the operator's
 * mailbox page and followed from there, as a recipient would from their mail. PUBLIC_BASE_URL is the
 * service's own address, so the mailed links lead back to it.
 */
let s: ConsoleService;

/** A loopback port free right now (the service listens on it next; PUBLIC_BASE_URL must name it before it starts). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

beforeAll(async () => {
  const port = await freePort();
  s = await startConsoleService({ publicBaseUrl: `http://127.0.0.1:${port}`, smtpUrl: undefined }, port);
});
afterAll(async () => {
  await s?.close();
});

/** The operator page of `context`, unlocked, on its Mailbox tab, showing the messages to `email`. */
async function openMailbox(context: BrowserContext, email: string): Promise<Page> {
  const page = await context.newPage();
  await page.goto('/console/operator');
  await page.getByLabel('Operator key').fill(s.h.config.adminApiKey);
  await page.getByRole('button', { name: 'Unlock' }).click();
  await page.getByRole('navigation', { name: 'Operator' }).getByRole('button', { name: 'Mailbox' }).click();
  await page.getByRole('heading', { name: 'Mailbox', level: 1 }).waitFor();
  await page.getByLabel('Recipient').fill(email);
  await page.getByRole('button', { name: 'Show', exact: true }).click();
  return page;
}

/** Follow the newest link named `name` of the mailbox (refreshed until one shows, bounded), in a new tab as the page opens it. */
async function follow(mailbox: Page, name: string): Promise<Page> {
  const link = mailbox.getByTestId('mailbox-messages').getByRole('link', { name });
  await expect
    .poll(async () => {
      if ((await link.count()) > 0) return true;
      await mailbox.getByRole('button', { name: 'Refresh' }).click();
      return false;
    })
    .toBe(true);
  // Newest first: the first is the latest mail.
  const [opened] = await Promise.all([mailbox.context().waitForEvent('page'), link.first().click()]);
  await opened.waitForLoadState();
  return opened;
}

/** Open the verification link from the mailbox; the service's page says the address is verified. */
async function verifyFromMailbox(mailbox: Page): Promise<void> {
  const verifyPage = await follow(mailbox, 'Open the verification link');
  await verifyPage.getByText('Your email address is verified.').waitFor();
  // The page took the token out of the address bar.
  expect(verifyPage.url()).not.toContain('token=');
  await verifyPage.close();
}

/** The console tab sees the verification: by focus or by "check again", the notice goes (bounded). */
async function noticeGone(page: Page): Promise<void> {
  const notice = page.getByRole('region', { name: 'Email verification' });
  await expect
    .poll(async () => {
      if ((await notice.count()) === 0) return true;
      await notice
        .getByRole('button', { name: 'I opened the link: check again' })
        .click({ timeout: 5_000 })
        .catch(() => undefined);
      return (await notice.count()) === 0;
    })
    .toBe(true);
}

describe('the first hour without SMTP', () => {
  it('sign up, verify from the mailbox, invite; the invitee follows the mailed links, verifies and accepts', async () => {
    // 1. A new user signs up in the console and is told the address is unverified.
    const owner = await s.newPage();
    const ownerEmail = await signUpInBrowser(owner.page, 'Ada First');
    const ownerNotice = owner.page.getByRole('region', { name: 'Email verification' });
    await ownerNotice.getByText(`Your email address ${ownerEmail} is not verified.`).waitFor();
    // Resending puts a fresh link in the outbox and says where it is.
    await ownerNotice.getByRole('button', { name: 'Resend verification link' }).click();
    await expect.poll(() => ownerNotice.getByRole('status').textContent()).toMatch(/local outbox .* Operator → Mailbox/);

    // 2. The operator's mailbox (its own browser) shows the links; following one verifies the address.
    const operator = await s.newPage();
    const ownerMail = await openMailbox(operator.context, ownerEmail);
    await expect.poll(() => ownerMail.getByTestId('mailbox-messages').getByRole('row').count()).toBe(3);
    await verifyFromMailbox(ownerMail);
    await noticeGone(owner.page);

    // 3. The owner makes an organization and invites a second address from the console.
    const orgName = 'First Hour Co';
    const orgId = await createOrganizationInBrowser(owner.page, orgName);
    await owner.page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Members' }).click();
    const invitee = `${unique('invitee')}@example.com`.toLowerCase();
    await owner.page.getByLabel('Email to invite').fill(invitee);
    await owner.page.getByLabel('Invite as').selectOption('member');
    await owner.page.getByRole('button', { name: 'Invite' }).click();
    await owner.page.getByRole('button', { name: 'Done' }).click();
    await owner.page.getByTestId(`invitation-${invitee}`).waitFor();

    // 4. The invitee (their own browser) reads their mail in the mailbox and opens the invitation.
    const guest = await s.newPage();
    const guestMail = await openMailbox(guest.context, invitee);
    const invitation = await follow(guestMail, 'Open the invitation');
    await invitation.waitForURL(/\/console\/invitations\/cginv_/);
    await invitation.getByRole('heading', { name: `Join ${orgName}`, level: 1 }).waitFor();
    await invitation.getByRole('button', { name: 'New here? Create an account with the invited address' }).click();
    expect(await invitation.getByLabel('Email').inputValue()).toBe(invitee);
    await invitation.getByLabel('Name').fill('Grace Second');
    await invitation.getByLabel('Password').fill(PASSWORD);
    await invitation.getByRole('button', { name: 'Create account' }).click();
    await invitation.getByText(`Signed in as ${invitee}.`).waitFor();
    await invitation.getByRole('region', { name: 'Email verification' }).waitFor();

    // 5. Their verification link arrives in the mailbox; they follow it, and then accept.
    await verifyFromMailbox(guestMail);
    await noticeGone(invitation);
    await invitation.getByRole('button', { name: 'Accept invitation' }).click();
    await invitation.waitForURL(`**/console/orgs/${orgId}`);
    await invitation.getByRole('heading', { name: orgName, level: 1 }).waitFor();
    await invitation.getByRole('navigation', { name: 'Organization' }).getByText('Signed in as member', { exact: false }).waitFor();

    // The server agrees: the invitee is a verified member.
    const login = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email: ownerEmail, password: PASSWORD } });
    const token = json<{ data: { access_token: string } }>(login).data.access_token;
    const members = json<{ data: Array<{ email: string; role: string }> }>(
      await s.h.request({ method: 'GET', url: `/organizations/${orgId}/users?limit=100`, headers: bearer(token) }),
    ).data;
    expect(members.find((m) => m.email === invitee)).toMatchObject({ role: 'member' });
    const guestLogin = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email: invitee, password: PASSWORD } });
    expect(json<{ data: { user: { email_verified: boolean } } }>(guestLogin).data.user.email_verified).toBe(true);
  });
});
