import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, type SignedInUser, serviceHeaders, signUp, unique } from '../harness.js';
import { audit, COLOUR_RULES, type Finding, settled, visit } from './axe.js';
import { browserTimeouts, type ConsoleService, orgPagePaths, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The console's layout and theme (docs/console.md "Layout" and "Theme"): no page scrolls sideways on
 * a phone (390 px) or a desktop (1440 px), with a 120-character organization name and the overview's
 * table shown; the navigation folds behind a Menu button on the phone; both themes pass axe; a
 * picked theme beats the system's and is applied again before the first paint after a reload.
 */
let s: ConsoleService;
let owner: SignedInUser & { organizationId: string };
let invitationToken: string;

/** 120 characters without a space: the longest word a page must hold without widening. */
const LONG_NAME = `Northwind${'Consolidated'.repeat(9)}Holdings`.padEnd(120, 'x').slice(0, 120);
const PHONE = { width: 390, height: 844 };
const DESKTOP = { width: 1440, height: 900 };
const PAGE_STEPS_TIMEOUT_MS = 300_000;

beforeAll(async () => {
  s = await startConsoleService();
  // An owner whose only organization has the long name, with something on every page: usage by
  // several tools (a wide table under the chart) and a long end-user id, a key, an invitation, a webhook.
  const user = await signUp(s.h);
  const created = await s.h.request({
    method: 'POST',
    url: '/organizations',
    headers: bearer(user.accessToken),
    payload: { name: LONG_NAME, slug: unique('layout').toLowerCase().replace(/[^a-z0-9-]/g, '-') },
  });
  expect(created.statusCode, created.body).toBe(201);
  const org = created.json().data as { id: string; deployment: { id: string } };
  owner = { ...user, organizationId: org.id };
  const auth = bearer(user.accessToken);
  await s.h.request({ method: 'POST', url: `/api/v1/admin/deployments/${org.deployment.id}/credits`, headers: adminHeaders(s.h), payload: { amount: 500, reason: 'layout' } });
  const tools = ['search_documentation_index', 'summarize_long_thread', 'translate_to_every_language', 'fetch_web_page', 'create_calendar_event', 'send_message'];
  for (const [i, tool] of tools.entries()) {
    const res = await s.h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(s.h),
      payload: { deployment_id: org.deployment.id, tool_name: tool, mcp_user_id: i === 0 ? `end-user-${'y'.repeat(100)}` : 'end-user-2' },
    });
    expect(res.statusCode, res.body).toBe(200);
  }
  // The operator's cost table and tool mappings with long names (other files of the worker add more).
  const longAction = `layout_${'a'.repeat(56)}`;
  await s.h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${longAction}`, headers: adminHeaders(s.h), payload: { credits: 3 } });
  await s.h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/layout_tool_${'t'.repeat(50)}`, headers: adminHeaders(s.h), payload: { action: longAction } });
  await s.h.request({ method: 'POST', url: `/organizations/${org.id}/api-keys`, headers: auth, payload: { name: `key-${'k'.repeat(80)}`, scopes: ['read'] } });
  const invite = await s.h.request({ method: 'POST', url: `/organizations/${org.id}/users`, headers: auth, payload: { email: `layout-${'i'.repeat(60)}@example.com`, role: 'viewer' } });
  invitationToken = (invite.json() as { data: { token: string } }).data.token;
  await s.h.request({
    method: 'POST',
    url: `/organizations/${org.id}/webhooks`,
    headers: auth,
    payload: { url: `https://hooks.example.com/${'path'.repeat(30)}`, events: ['api_key.created'] },
  });
});
afterAll(async () => {
  await s?.close();
});

const orgPages = () => orgPagePaths(owner.organizationId);
const signedOutPages = () => ['/console/', '/console/signup', `/console/invitations/${invitationToken}`, '/console/operator'];

/** A context signed in as the owner (at the desktop width, where the navigation shows), and one signed out. */
async function contexts(options: { bypassCSP?: boolean } = {}): Promise<{ page: Page; outside: Page; anonymous: BrowserContext }> {
  const { page } = await s.newPage(options);
  await signInInBrowser(page, owner);
  const { context: anonymous, page: outside } = await s.newPage(options);
  await anonymous.clearCookies();
  return { page, outside, anonymous };
}

/** The operator page unlocked, then each of its views in turn (`onView` after each is on screen). */
async function operatorViews(page: Page, onView: (view: string) => Promise<void>): Promise<void> {
  await page.goto('/console/operator');
  await page.getByLabel('Operator key').fill(s.h.config.adminApiKey);
  await page.getByRole('button', { name: 'Unlock' }).click();
  await page.getByLabel('Operator key').waitFor({ state: 'detached' });
  await onView('operator: organizations');
  await page.getByLabel('Search').fill(owner.email);
  await page.getByRole('button', { name: 'Search', exact: true }).click();
  await page.getByTestId('organization-results').getByRole('button').first().click();
  await page.getByRole('heading', { name: 'Deployments' }).waitFor();
  await onView('operator: an organization open');
  await page.getByRole('button', { name: 'Costs and tools' }).click();
  await page.getByRole('heading', { name: /cost/i }).first().waitFor();
  await onView('operator: costs and tools');
  await page.getByRole('button', { name: 'Mailbox' }).click();
  await page.getByRole('heading', { name: /mailbox/i }).first().waitFor();
  await onView('operator: mailbox');
}

interface Sideways {
  scrollWidth: number;
  clientWidth: number;
  innerWidth: number;
  /** Elements past the right edge that no scrolling or clipping box holds: what widens the page. */
  wide: string[];
}

/** How far the settled page reaches sideways. */
async function sideways(page: Page): Promise<Sideways> {
  await settled(page);
  return page.evaluate(() => {
    const innerWidth = window.innerWidth;
    const wide: string[] = [];
    for (const el of Array.from(document.body.querySelectorAll('*'))) {
      const right = el.getBoundingClientRect().right;
      if (right <= innerWidth + 0.5) continue;
      let held = false;
      for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== 'visible') held = true;
      }
      if (held) continue;
      const cls = typeof el.className === 'string' && el.className ? `.${el.className.trim().split(/\s+/).join('.')}` : '';
      wide.push(`${el.tagName.toLowerCase()}${cls} right=${Math.round(right)}`);
    }
    const root = document.documentElement;
    return { scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, innerWidth, wide: wide.slice(0, 6) };
  });
}

/** Record a page that scrolls sideways (wider than its viewport, scrollbar excluded). */
async function checkSideways(page: Page, name: string, found: Record<string, Sideways>): Promise<void> {
  const m = await sideways(page);
  expect(m.clientWidth).toBeLessThanOrEqual(m.innerWidth);
  if (m.scrollWidth > m.clientWidth) found[name] = m;
}

describe('console layout', () => {
  it('no page scrolls sideways at 390 and 1440 px, with a 120-character organization name and the overview table shown', { timeout: PAGE_STEPS_TIMEOUT_MS }, async () => {
    const { page, outside } = await contexts();
    const found: Record<string, Sideways> = {};
    for (const size of [PHONE, DESKTOP]) {
      await page.setViewportSize(size);
      await outside.setViewportSize(size);
      // Each size starts from a page load; the pages after it are reached in the console (visit).
      await page.goto(orgPages()[0]!);
      for (const path of orgPages()) {
        await visit(page, path);
        await checkSideways(page, `${path} @${size.width}`, found);
      }
      // The overview with its chart drawn, then with "Show as a table" open.
      await visit(page, orgPages()[0]!);
      await page.locator('[data-testid="usage-chart"][data-rendered="true"]').waitFor();
      await checkSideways(page, `overview, chart @${size.width}`, found);
      const chart = await page.getByTestId('usage-chart').evaluate((el) => ({ chart: el.getBoundingClientRect().width, canvas: el.querySelector('canvas')?.getBoundingClientRect().width ?? 0 }));
      expect(chart.canvas, 'the chart takes the width it has').toBeGreaterThan(chart.chart - 4);
      expect(chart.canvas).toBeLessThanOrEqual(chart.chart);
      await page.getByText('Show as a table').click();
      await page.getByRole('columnheader', { name: 'translate_to_every_language' }).waitFor();
      await checkSideways(page, `overview, table shown @${size.width}`, found);

      await outside.goto('about:blank');
      for (const path of signedOutPages()) {
        await visit(outside, path);
        await checkSideways(outside, `${path} (signed out) @${size.width}`, found);
      }
      await operatorViews(outside, (view) => checkSideways(outside, `${view} @${size.width}`, found));
    }
    expect(found).toEqual({});
  });

  it('the long organization name is cut with an ellipsis, whole in its title and its text', async () => {
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.setViewportSize(PHONE);
    // The switcher (a select) shows the name cut to its width; its title and its option carry it whole.
    await expect.poll(() => page.locator('.org-switch select').getAttribute('title')).toBe(LONG_NAME);
    await page.getByRole('button', { name: 'Menu' }).click();
    const name = page.locator('#org-nav .truncate');
    expect(await name.getAttribute('title')).toBe(LONG_NAME);
    expect(await name.textContent()).toBe(LONG_NAME);
    const box = await name.evaluate((el) => ({ overflow: getComputedStyle(el).textOverflow, scroll: el.scrollWidth, client: el.clientWidth }));
    expect(box.overflow).toBe('ellipsis');
    expect(box.scroll).toBeGreaterThan(box.client); // cut, not wrapped or widening
    // The navigation's accessible text has the whole name.
    expect(await page.getByRole('navigation', { name: 'Organization' }).getByText(LONG_NAME).count()).toBe(1);
  });

  it('at 390 px the navigation folds behind a Menu button that opens it, and Escape or a link closes it', async () => {
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    const nav = page.getByRole('navigation', { name: 'Organization' });
    const menu = page.getByRole('button', { name: 'Menu' });
    // On a desktop the navigation shows and there is no menu button.
    await page.setViewportSize(DESKTOP);
    expect(await nav.isVisible()).toBe(true);
    expect(await menu.isVisible()).toBe(false);

    await page.setViewportSize(PHONE);
    await expect.poll(() => nav.isVisible()).toBe(false);
    expect(await menu.getAttribute('aria-expanded')).toBe('false');
    expect(await menu.getAttribute('aria-controls')).toBe('org-nav');
    expect(await page.locator('#org-nav').getAttribute('aria-label')).toBe('Organization');

    // Open from the keyboard: focus moves to the navigation's current page.
    await menu.focus();
    await page.keyboard.press('Enter');
    await nav.waitFor();
    expect(await menu.getAttribute('aria-expanded')).toBe('true');
    await expect.poll(() => page.evaluate(() => document.activeElement?.closest('#org-nav') !== null)).toBe(true);
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Overview');
    await checkSidewaysNow(page);

    // Escape closes it and gives focus back to the button.
    await page.keyboard.press('Escape');
    await nav.waitFor({ state: 'hidden' });
    expect(await menu.getAttribute('aria-expanded')).toBe('false');
    expect(await page.evaluate(() => document.activeElement?.getAttribute('aria-controls'))).toBe('org-nav');

    // Following a link closes it, and focus goes to the page.
    await menu.click();
    await nav.getByRole('link', { name: 'Usage' }).click();
    await page.waitForURL(/\/usage$/);
    await nav.waitFor({ state: 'hidden' });
    expect(await menu.getAttribute('aria-expanded')).toBe('false');
    expect(await page.evaluate(() => document.activeElement?.tagName)).toBe('MAIN');
  });
});

/** The open menu does not widen the page either. */
async function checkSidewaysNow(page: Page): Promise<void> {
  const m = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
  expect(m.scroll).toBeLessThanOrEqual(m.client);
}

/** The page's background colour (the theme in force), as computed. */
const background = (page: Page) => page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
const LIGHT_BG = 'rgb(246, 247, 249)';
const DARK_BG = 'rgb(15, 17, 21)';

describe('console themes', () => {
  /**
   * The light theme at a desktop width is a11y.browser.test.ts's audit of every page, every rule. Here:
   * the phone width in the light theme, every rule (the folded navigation and its Menu button are
   * structure only the phone has); the dark theme at both widths, the colour rules (a theme changes
   * only colours, console/src/styles.css, so its structure is the light theme's).
   */
  it('every page passes axe in the light and the dark theme (prefers-color-scheme), at 390 and 1440 px', { timeout: PAGE_STEPS_TIMEOUT_MS }, async () => {
    const { page, outside } = await contexts({ bypassCSP: true });
    const found: Record<string, Finding[]> = {};
    const passes = [
      { colorScheme: 'light', size: PHONE, rules: undefined },
      { colorScheme: 'dark', size: DESKTOP, rules: COLOUR_RULES },
      { colorScheme: 'dark', size: PHONE, rules: COLOUR_RULES },
    ] as const;
    for (const { colorScheme, size, rules } of passes) {
      for (const p of [page, outside]) {
        await p.setViewportSize(size);
        await p.emulateMedia({ colorScheme });
      }
      const record = async (p: Page, name: string) => {
        expect(await background(p), name).toBe(colorScheme === 'dark' ? DARK_BG : LIGHT_BG);
        const violations = await audit(p, rules);
        if (violations.length > 0) found[`${name} (${colorScheme}, ${size.width} px)`] = violations;
      };
      // Each pass starts from a page load (no menu or table left open); the pages after it are reached
      // in the console (visit), axe staying injected.
      await page.goto(orgPages()[0]!);
      for (const path of orgPages()) {
        await visit(page, path);
        await record(page, path);
      }
      await visit(page, orgPages()[0]!);
      await page.locator('[data-testid="usage-chart"][data-rendered="true"]').waitFor();
      await page.getByText('Show as a table').click();
      await record(page, 'overview, table shown');
      if (size === PHONE) {
        await page.getByRole('button', { name: 'Menu' }).click();
        await record(page, 'overview, menu open');
      }
      await outside.goto('about:blank');
      for (const path of signedOutPages()) {
        await visit(outside, path);
        await record(outside, `${path} (signed out)`);
      }
      await operatorViews(outside, (view) => record(outside, view));
    }
    expect(found).toEqual({});
  });

  it('the theme switch beats the system preference, is the only thing stored, and is applied before the first paint after a reload', async () => {
    // The page's own CSP in force: the inline theme script must run by its hash.
    const { page } = await s.newPage();
    const refused: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) refused.push(m.text());
    });
    await page.emulateMedia({ colorScheme: 'dark' });
    await signInInBrowser(page, owner);
    expect(await background(page)).toBe(DARK_BG);
    const theme = page.getByLabel('Theme');
    expect(await theme.inputValue()).toBe('system');
    expect(await page.evaluate(() => ({ ...localStorage }))).toEqual({});

    await theme.selectOption('light');
    expect(await background(page)).toBe(LIGHT_BG);
    expect(await page.evaluate(() => ({ ...localStorage }))).toEqual({ 'cg-theme': 'light' });
    expect(await page.evaluate(() => ({ ...sessionStorage }))).toEqual({});

    // After a reload with the console's script refused, the page is light already: the inline script
    // in index.html applied the pick before anything else ran.
    await page.route('**/console/assets/*.js', (route) => route.abort());
    await page.reload();
    expect(await page.evaluate(() => document.documentElement.dataset.theme)).toBe('light');
    expect(await background(page)).toBe(LIGHT_BG);
    await page.unroute('**/console/assets/*.js');

    await page.reload();
    await page.getByRole('navigation', { name: 'Organization' }).waitFor();
    expect(await page.getByLabel('Theme').inputValue()).toBe('light');
    expect(await background(page)).toBe(LIGHT_BG);

    // Dark on a light system, then back to the system's.
    await page.emulateMedia({ colorScheme: 'light' });
    await page.getByLabel('Theme').selectOption('dark');
    expect(await background(page)).toBe(DARK_BG);
    await page.reload();
    await page.getByRole('navigation', { name: 'Organization' }).waitFor();
    expect(await background(page)).toBe(DARK_BG);
    await page.getByLabel('Theme').selectOption('system');
    expect(await background(page)).toBe(LIGHT_BG);
    expect(await page.evaluate(() => ({ ...localStorage }))).toEqual({});
    expect(refused).toEqual([]);
  });
});
