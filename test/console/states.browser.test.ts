import { randomUUID } from 'node:crypto';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_MESSAGES } from '../../console/src/api-errors.js';
import { envelopeErrorBody, ERROR_STATUS, ServiceUnavailableError } from '../../src/errors.js';
import { bearer, signUpAsMember, signUpWithOrganization } from '../harness.js';
import { type Receiver, startReceiver } from '../receiver.js';
import { audit } from './axe.js';
import { browserTimeouts, type ConsoleService, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The console's states (console/src/ui.tsx): a failed load in words with Retry, skeletons while
 * loading, failure shown as failure, counts in the singular, and the not-found page.
 */
let s: ConsoleService;
let rx: Receiver;
beforeAll(async () => {
  s = await startConsoleService({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 2000 });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx?.close();
  await s?.close();
});

/** No code of the service's list (FORBIDDEN, NOT_FOUND, …) in what the page says. */
async function expectNoRawCode(page: Page): Promise<void> {
  const text = (await page.locator('body').textContent()) ?? '';
  for (const code of [...Object.keys(ERROR_STATUS), 'HTTP_']) expect(text, `"${code}" shown in:\n${text}`).not.toContain(code);
}

describe('console loading and error states', () => {
  it('a failed load says why in words and offers Retry; Retry shows the skeleton, then the data once the API answers', async () => {
    const owner = await signUpWithOrganization(s.h);
    const made = await s.h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/api-keys`,
      headers: bearer(owner.accessToken),
      payload: { name: 'only key', scopes: ['read'] },
    });
    expect(made.statusCode, made.body).toBe(201);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);

    // The service is unavailable for the list of keys (the answer its own builder writes), then answers slowly.
    const keysPath = `/organizations/${owner.organizationId}/api-keys`;
    let mode: 'fail' | 'hold' = 'fail';
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    await page.route(
      (url) => url.pathname === keysPath,
      async (route) => {
        if (route.request().method() !== 'GET') return route.continue();
        if (mode === 'fail') {
          return route.fulfill({
            status: 503,
            contentType: 'application/json; charset=utf-8',
            body: JSON.stringify(envelopeErrorBody(new ServiceUnavailableError(), new Date())),
          });
        }
        await released;
        return route.continue();
      },
    );

    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'API keys' }).click();
    await page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor();
    const failed = page.getByRole('alert').filter({ hasText: 'Could not load API keys.' });
    await failed.waitFor();
    expect(await failed.textContent()).toContain(ERROR_MESSAGES.SERVICE_UNAVAILABLE);
    await expectNoRawCode(page);
    expect(await page.getByTestId(/^key-/).count()).toBe(0);

    // Retry: a skeleton (aria-busy, "Loading API keys…" for screen readers) while the answer is on its way.
    mode = 'hold';
    await failed.getByRole('button', { name: 'Retry' }).click();
    const skeleton = page.locator('[aria-busy="true"]').filter({ hasText: 'Loading API keys…' });
    await skeleton.waitFor();
    expect(await skeleton.getByRole('status').textContent()).toBe('Loading API keys…');
    release();
    await page.getByRole('row', { name: /only key/ }).waitFor();
    await skeleton.waitFor({ state: 'detached' });
    expect(await page.getByRole('alert').count()).toBe(0);

    // One key: "1 key shown", not "1 keys shown".
    await page.getByText('1 key shown (all)', { exact: true }).waitFor();
    expect(await page.locator('main').textContent()).not.toContain('1 keys');
  });

  it("an organization that does not exist, or is not the user's, is a not-found page with a link back", async () => {
    const owner = await signUpWithOrganization(s.h);
    const stranger = await signUpWithOrganization(s.h);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);

    // A malformed id is refused before the organization is looked up: the page names nothing then.
    for (const [orgId, heading] of [
      [randomUUID(), 'Organization not found'],
      [stranger.organizationId, 'Organization not found'],
      ['not-an-id', /not found$/i],
    ] as const) {
      await page.goto(`/console/orgs/${orgId}/api-keys`);
      const notFound = page.getByTestId('state-page');
      await notFound.getByRole('heading', { name: heading, level: 1 }).waitFor();
      if (heading === 'Organization not found') expect(await notFound.textContent()).toContain('does not exist, or your account is not a member of it');
      expect(await page.getByRole('main').count()).toBe(1);
      await expectNoRawCode(page);
      expect(await page.locator('body').textContent()).not.toContain('{');
    }

    await page.getByRole('link', { name: 'Go to the console home' }).click();
    await page.waitForURL(new RegExp(`/console/orgs/${owner.organizationId}$`));
    await page.getByRole('navigation', { name: 'Organization' }).waitFor();
  });

  it('an address the console has no page for is the not-found page, whose link leads back', async () => {
    const owner = await signUpWithOrganization(s.h);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);

    // Inside an organization: back to its overview.
    await page.goto(`/console/orgs/${owner.organizationId}/no-such-page`);
    await page.getByRole('heading', { name: 'Page not found', level: 1 }).waitFor();
    await expectNoRawCode(page);
    await page.getByTestId('state-page').getByRole('link', { name: 'Back to the overview' }).click();
    await page.waitForURL(new RegExp(`/console/orgs/${owner.organizationId}$`));
    await page.getByTestId('card-monthly').waitFor();

    // Outside any organization: back to the console's home.
    await page.goto('/console/no-such-page');
    await page.getByRole('heading', { name: 'Page not found', level: 1 }).waitFor();
    await page.getByTestId('state-page').getByRole('link', { name: 'Go to the console home' }).click();
    await page.waitForURL(new RegExp(`/console/orgs/${owner.organizationId}$`));
  });

  it("a page the role cannot read says so in words, with a link back", async () => {
    const owner = await signUpWithOrganization(s.h);
    const member = await signUpAsMember(s.h, owner.organizationId, 'member');
    const { page } = await s.newPage();
    await signInInBrowser(page, member);
    await page.goto(`/console/orgs/${owner.organizationId}/audit`);
    const state = page.getByTestId('state-page');
    await state.getByRole('heading', { name: 'No access to the audit log', level: 1 }).waitFor();
    expect(await state.textContent()).toContain('is member, which cannot see the audit log');
    expect(await page.locator('body').textContent()).not.toContain('audit.read');
    await state.getByRole('link', { name: 'Back to the overview' }).click();
    await page.waitForURL(new RegExp(`/console/orgs/${owner.organizationId}$`));
  });
});

/** The shared audit (test/console/axe.ts), as one line per violation: its rule and where. */
async function axeViolations(page: Page): Promise<string[]> {
  return (await audit(page)).map((f) => `${f.id}: ${f.targets.join(', ')}`);
}

describe('console outcomes and controls', () => {
  it('the failed load, the not-found page and a failed test send pass axe in the light and the dark theme', async () => {
    const owner = await signUpWithOrganization(s.h);
    const url = `${rx.url}/states-axe`;
    const created = await s.h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/webhooks`,
      headers: bearer(owner.accessToken),
      payload: { url, events: ['api_key.created'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { page } = await s.newPage({ bypassCSP: true });
    await signInInBrowser(page, owner);
    await page.route(
      (u) => u.pathname === `/organizations/${owner.organizationId}/api-keys`,
      (route) =>
        route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify(envelopeErrorBody(new ServiceUnavailableError(), new Date())) }),
    );
    const found: Record<string, string[]> = {};
    for (const colorScheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme });
      await page.goto(`/console/orgs/${owner.organizationId}/api-keys`);
      await page.getByRole('button', { name: 'Retry' }).waitFor();
      found[`failed load (${colorScheme})`] = await axeViolations(page);

      await page.goto(`/console/orgs/${randomUUID()}`);
      await page.getByRole('heading', { name: 'Organization not found' }).waitFor();
      found[`not found (${colorScheme})`] = await axeViolations(page);

      await page.goto(`/console/orgs/${owner.organizationId}/webhooks`);
      rx.script({ status: 500 });
      await page.getByTestId('webhooks').getByRole('button', { name: 'Test send' }).click();
      await page.getByTestId('webhook-notice').filter({ hasText: 'Test send failed' }).waitFor();
      await expect.poll(() => page.locator('[aria-busy="true"]').count()).toBe(0);
      found[`failed test send (${colorScheme})`] = await axeViolations(page);
    }
    expect(Object.fromEntries(Object.entries(found).filter(([, v]) => v.length > 0))).toEqual({});
  });

  it('a failed webhook test send is shown as a failure (words, alert role, failure style), a delivered one as a success', async () => {
    const owner = await signUpWithOrganization(s.h);
    const url = `${rx.url}/states-hook`;
    const created = await s.h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/webhooks`,
      headers: bearer(owner.accessToken),
      payload: { url, events: ['api_key.created'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.goto(`/console/orgs/${owner.organizationId}/webhooks`);
    const row = page.getByTestId('webhooks').getByRole('row', { name: new RegExp(url) });
    await row.waitFor();

    rx.script({ status: 503, body: 'down for maintenance' });
    await row.getByRole('button', { name: 'Test send' }).click();
    const notice = page.getByTestId('webhook-notice');
    await expect.poll(() => notice.textContent()).toBe(`Test send failed: ${url} answered HTTP 503.`);
    expect(await notice.getAttribute('role')).toBe('alert');
    expect(await notice.getAttribute('class')).toContain('state-failure');
    const colours = async () => notice.evaluate((el) => getComputedStyle(el).color);
    const failureColour = await colours();
    await expectNoRawCode(page);

    rx.script({ status: 200, body: 'ok' });
    await row.getByRole('button', { name: 'Test send' }).click();
    await expect.poll(() => notice.textContent()).toBe(`Test sent to ${url}: delivered, HTTP 200.`);
    expect(await notice.getAttribute('role')).toBe('status');
    expect(await notice.getAttribute('class')).toContain('state-success');
    expect(await colours()).not.toBe(failureColour);
  });

  it('checkboxes keep their size when their label wraps (a narrow screen)', async () => {
    const owner = await signUpWithOrganization(s.h);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.setViewportSize({ width: 360, height: 800 });
    for (const path of ['webhooks', 'api-keys']) {
      await page.goto(`/console/orgs/${owner.organizationId}/${path}`);
      const boxes = page.getByRole('checkbox');
      await boxes.first().waitFor();
      const sizes = await boxes.evaluateAll((els) => els.map((el) => el.getBoundingClientRect()).map((r) => [Math.round(r.width), Math.round(r.height)]));
      expect(sizes.length).toBeGreaterThan(1);
      for (const [w, h] of sizes) {
        expect(w).toBeGreaterThanOrEqual(13);
        expect(w).toBe(h);
      }
    }
  });
});
