import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConsoleService, createOrganizationInBrowser, PASSWORD, signUpInBrowser, startConsoleService } from './browser.js';

let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

describe('console sign-in (docs/console.md "Tokens")', () => {
  it('signs up, creates an organization, and keeps the session across a reload without any token in web storage', async () => {
    const { context, page } = await s.newPage();
    const email = await signUpInBrowser(page);
    const orgId = await createOrganizationInBrowser(page);
    expect(page.url()).toBe(`${s.baseUrl}/console/orgs/${orgId}`);

    // No token where an injected script could read it: web storage is empty, the cookie is HttpOnly.
    const storage = await page.evaluate(() => ({ local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie }));
    expect(storage).toEqual({ local: {}, session: {}, cookie: '' });
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === 'cg_console_refresh');
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/console/session' });

    // A reload trades the cookie for a new access token (rotation): still signed in.
    await page.reload();
    await page.getByRole('heading', { name: 'Acme Console', level: 1 }).waitFor();
    const rotated = (await context.cookies()).find((c) => c.name === 'cg_console_refresh');
    expect(rotated?.value).not.toBe(session?.value);

    // Sign out ends the session: a reload shows the sign-in form, and the old cookie no longer works.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to creditgate' }).waitFor();
    expect((await context.cookies()).find((c) => c.name === 'cg_console_refresh')).toBeUndefined();
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in to creditgate' }).waitFor();

    // Signing in again lands on the organization.
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Acme Console', level: 1 }).waitFor();
  });

  it('shows the sign-in error the API gives for a wrong password', async () => {
    const { page } = await s.newPage();
    await page.goto('/console/');
    await page.getByLabel('Email').fill('nobody@example.com');
    await page.getByLabel('Password').fill('wrong-password-123');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/UNAUTHORIZED/);
  });
});
