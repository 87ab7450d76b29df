import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, json, verifyEmailOf } from '../harness.js';
import { type ConsoleService, createOrganizationInBrowser, PASSWORD, signUpInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

type Member = { user_id: string; email: string; role: string };
type Invitation = { id: string; email: string; status: string };

/** The owner's API token (the console's own is out of reach in its module's memory), to check the server's state. */
async function tokenOf(email: string): Promise<string> {
  const res = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email, password: PASSWORD } });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: { access_token: string } }>(res).data.access_token;
}

async function membersOf(orgId: string, token: string): Promise<Member[]> {
  return json<{ data: Member[] }>(await s.h.request({ method: 'GET', url: `/organizations/${orgId}/users?limit=100`, headers: bearer(token) })).data;
}

async function invitationsOf(orgId: string, token: string): Promise<Invitation[]> {
  return json<{ data: Invitation[] }>(await s.h.request({ method: 'GET', url: `/organizations/${orgId}/invitations?limit=100`, headers: bearer(token) })).data;
}

describe('console members page', () => {
  it('an owner invites an address; the invitee opens the link, signs up, verifies, accepts and is a member', async () => {
    const owner = await s.newPage();
    const ownerEmail = await signUpInBrowser(owner.page);
    const orgId = await createOrganizationInBrowser(owner.page, 'Acme Members');
    await owner.page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Members' }).click();
    await owner.page.getByTestId(`member-${ownerEmail}`).getByText('(you)').waitFor();

    const invitee = `grace-${Date.now()}@example.com`;
    await owner.page.getByLabel('Email to invite').fill(invitee);
    await owner.page.getByLabel('Invite as').selectOption('member');
    await owner.page.getByRole('button', { name: 'Invite' }).click();
    const link = (await owner.page.getByTestId('secret-value').textContent()) ?? '';
    // accept_url is PUBLIC_BASE_URL/invitations/{token}; the console's page for it is /console/invitations/{token}.
    const token = /\/invitations\/(cginv_[0-9A-Za-z]+)$/.exec(link)?.[1];
    expect(token, link).toBeDefined();
    await owner.page.getByRole('button', { name: 'Done' }).click();
    await owner.page.getByTestId(`invitation-${invitee}`).waitFor();
    expect(await owner.page.content()).not.toContain(token);

    // A second browser (its own cookies) opens the invitation and signs up with the invited address.
    const guest = await s.newPage();
    await guest.page.goto(`/console/invitations/${token}`);
    await guest.page.getByRole('heading', { name: 'Join Acme Members', level: 1 }).waitFor();
    await guest.page.getByRole('button', { name: 'New here? Create an account with the invited address' }).click();
    expect(await guest.page.getByLabel('Email').inputValue()).toBe(invitee);
    await guest.page.getByLabel('Name').fill('Grace Invitee');
    await guest.page.getByLabel('Password').fill(PASSWORD);
    await guest.page.getByRole('button', { name: 'Create account' }).click();
    await guest.page.getByText(`Signed in as ${invitee}.`).waitFor();

    // Only a verified user accepts (docs/accounts.md, Email verification); the console shows the API's refusal in words.
    await guest.page.getByRole('button', { name: 'Accept invitation' }).click();
    await expect.poll(() => guest.page.getByRole('alert').textContent()).toMatch(/^You do not have permission to do that\. Verify your email/);
    expect(await guest.page.getByRole('alert').textContent()).not.toContain('FORBIDDEN');
    const guestLogin = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email: invitee, password: PASSWORD } });
    const guestId = json<{ data: { user: { id: string } } }>(guestLogin).data.user.id;
    await verifyEmailOf(s.h, guestId);

    await guest.page.getByRole('button', { name: 'Accept invitation' }).click();
    await guest.page.waitForURL(`**/console/orgs/${orgId}`);
    await guest.page.getByRole('heading', { name: 'Acme Members', level: 1 }).waitFor();
    await guest.page.getByRole('navigation', { name: 'Organization' }).getByText('Signed in as member', { exact: false }).waitFor();

    // The owner's list shows the new member and no pending invitation.
    await owner.page.reload();
    await owner.page.getByTestId(`member-${invitee}`).waitFor();
    expect(await owner.page.getByTestId(`member-${invitee}`).getByRole('combobox').inputValue()).toBe('member');
    await owner.page.getByText('No pending invitations.').waitFor();
    const ownerToken = await tokenOf(ownerEmail);
    expect((await membersOf(orgId, ownerToken)).find((m) => m.email === invitee)).toMatchObject({ user_id: guestId, role: 'member' });
    expect(await invitationsOf(orgId, ownerToken)).toEqual([]);
  });

  it("an owner changes a member's role, removes the member, and revokes an invitation; the owner's own row cannot be demoted by an admin", async () => {
    const owner = await s.newPage();
    const ownerEmail = await signUpInBrowser(owner.page);
    const orgId = await createOrganizationInBrowser(owner.page, 'Acme Roles');
    const ownerToken = await tokenOf(ownerEmail);
    // A second user, made an admin through the real invitation flow over the API.
    const second = await s.h.request({ method: 'POST', url: '/auth/signup', payload: { email: `ada-${Date.now()}@example.com`, password: PASSWORD } });
    const adminUser = json<{ data: { access_token: string; user: { id: string; email: string } } }>(second).data;
    await verifyEmailOf(s.h, adminUser.user.id);
    const invite = await s.h.request({
      method: 'POST',
      url: `/organizations/${orgId}/users`,
      headers: bearer(ownerToken),
      payload: { email: adminUser.user.email, role: 'member' },
    });
    const inviteToken = json<{ data: { token: string } }>(invite).data.token;
    expect((await s.h.request({ method: 'POST', url: `/invitations/${inviteToken}/accept`, headers: bearer(adminUser.access_token) })).statusCode).toBe(200);

    const page = owner.page;
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Members' }).click();
    const row = page.getByTestId(`member-${adminUser.user.email}`);
    await row.waitFor();
    // An owner may make owners: the option is offered. The button applies the select's choice.
    expect(await row.getByRole('option').allTextContents()).toEqual(['owner', 'admin', 'member', 'viewer']);
    expect(await row.getByRole('button', { name: 'Change role' }).isDisabled()).toBe(true);
    await row.getByRole('combobox', { name: `Role of ${adminUser.user.email}` }).selectOption('admin');
    await row.getByRole('button', { name: 'Change role' }).click();
    // The button is disabled while the change is in flight too: the saved role is what says it is done.
    await expect.poll(async () => (await membersOf(orgId, ownerToken)).find((m) => m.user_id === adminUser.user.id)?.role).toBe('admin');
    // Saved, the select shows the member's role: nothing left to apply.
    await expect.poll(() => row.getByRole('button', { name: 'Change role' }).isDisabled()).toBe(true);

    // The admin, in its own browser: the owner's row has no role select and no remove button (owners only act on owners).
    const adminPage = await s.newPage();
    await adminPage.page.goto('/console/');
    await adminPage.page.getByLabel('Email').fill(adminUser.user.email);
    await adminPage.page.getByLabel('Password').fill(PASSWORD);
    await adminPage.page.getByRole('button', { name: 'Sign in' }).click();
    await adminPage.page.waitForURL(`**/console/orgs/${orgId}`);
    await adminPage.page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Members' }).click();
    const ownerRow = adminPage.page.getByTestId(`member-${ownerEmail}`);
    await ownerRow.waitFor();
    expect(await ownerRow.getByRole('combobox').count()).toBe(0);
    expect(await ownerRow.getByRole('button').count()).toBe(0);
    expect(await ownerRow.textContent()).toContain('owner');
    // …and an admin is not offered the owner role for anyone.
    expect(await adminPage.page.getByTestId(`member-${adminUser.user.email}`).getByRole('option').allTextContents()).toEqual(['admin', 'member', 'viewer']);

    // Invite someone, then revoke the invitation in two steps.
    const later = `later-${Date.now()}@example.com`;
    await page.getByLabel('Email to invite').fill(later);
    await page.getByLabel('Invite as').selectOption('viewer');
    await page.getByRole('button', { name: 'Invite' }).click();
    await page.getByRole('button', { name: 'Done' }).click();
    const invitation = page.getByTestId(`invitation-${later}`);
    expect(await invitation.textContent()).toContain('viewer');
    await invitation.getByRole('button', { name: 'Revoke' }).click();
    await invitation.getByRole('button', { name: `Revoke the invitation of ${later}` }).click();
    await page.getByText('No pending invitations.').waitFor();
    expect(await invitationsOf(orgId, ownerToken)).toEqual([]);

    // Remove the admin in two steps; the server agrees.
    await row.getByRole('button', { name: 'Remove' }).click();
    await row.getByRole('button', { name: `Remove ${adminUser.user.email}` }).click();
    await expect.poll(() => row.count()).toBe(0);
    expect((await membersOf(orgId, ownerToken)).map((m) => m.email)).toEqual([ownerEmail]);
  });
});
