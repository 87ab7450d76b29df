import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signUpWithOrganization } from '../harness.js';
import { type ConsoleService, createOrganizationInBrowser, PASSWORD, signInInBrowser, signUpInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

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

  it('an expired access token is refreshed from the cookie once and the request retried, without the user noticing', async () => {
    const { context, page } = await s.newPage();
    await signUpInBrowser(page);
    await createOrganizationInBrowser(page, 'Expiry Org');
    const before = (await context.cookies()).find((c) => c.name === 'cg_console_refresh')?.value;
    // 16 minutes later by the service's clock: the access token in the page's memory has expired (15 min).
    s.h.clock.advance(16 * 60_000);
    const refreshes: string[] = [];
    const unauthorized: string[] = [];
    page.on('response', (res) => {
      if (res.url().endsWith('/console/session/refresh')) refreshes.push(String(res.status()));
      else if (res.status() === 401) unauthorized.push(res.url());
    });
    // A page change inside the app (no reload): its first API call gets 401, then one refresh, then the retry.
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Members' }).click();
    await page.getByRole('heading', { name: 'Members', level: 1 }).waitFor();
    await expect.poll(() => page.locator('[aria-busy="true"]').count()).toBe(0);
    expect(refreshes).toEqual(['200']);
    expect(unauthorized.length).toBeGreaterThan(0);
    expect(await page.getByRole('alert').count()).toBe(0);
    const after = (await context.cookies()).find((c) => c.name === 'cg_console_refresh')?.value;
    expect(after).toBeDefined();
    expect(after).not.toBe(before); // rotated, as every refresh rotates
  });

  it('"Sign out" after the tab sat idle past the access token ends the session: no cookie left, a reload shows the sign-in', async () => {
    const { context, page } = await s.newPage();
    const owner = await signUpWithOrganization(s.h);
    await signInInBrowser(page, owner);
    await page.getByRole('navigation', { name: 'Organization' }).waitFor();
    await page.waitForLoadState('networkidle');
    // 16 minutes by the service's clock: the access token in the page's memory has expired.
    s.h.clock.advance(16 * 60_000);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to creditgate' }).waitFor();
    expect((await context.cookies()).find((c) => c.name === 'cg_console_refresh')).toBeUndefined();
    // Whoever sits down next and reloads gets the sign-in, not the previous user's console.
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in to creditgate' }).waitFor();
    expect(await page.getByRole('navigation', { name: 'Organization' }).count()).toBe(0);
  });

  it('shows the sign-in error the API gives for a wrong password', async () => {
    const { page } = await s.newPage();
    await page.goto('/console/');
    await page.getByLabel('Email').fill('nobody@example.com');
    await page.getByLabel('Password').fill('wrong-password-123');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('Those credentials were not accepted. Wrong email or password.');
  });
});
