/**
 * The console's browser tests (docs/console.md "Tests"): the real service on PGlite listening on a
 * loopback port, serving the built console (dist/console, made by `npm run build:console`, which
 * `npm test` runs first), driven by Debian's Chromium through playwright-core.
 */
import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { vi } from 'vitest';
import type { Config } from '../../src/config.js';
import { CONSOLE_DIR } from '../../src/modules/console/routes.js';
import { createHarness, type Harness, unique } from '../harness.js';
import { ORG_PAGES } from '../../console/src/org-pages.js';

/**
 * Bounds for the browser tests, above the suite's defaults: on a loaded 2-core CI machine (two Node
 * versions' worth of vitest workers and Chromium) one page step took longer than 15 s, and a test of
 * several pages longer than 30 s. They are bounds, not expectations: a passing step returns at once.
 */
const BROWSER_STEP_TIMEOUT_MS = 45_000;
const BROWSER_TEST_TIMEOUT_MS = 120_000;

/**
 * Call at the top level of every browser test file: vitest sets a test's timeout as the file is
 * collected and resets `vi.setConfig` after each file, and with `isolate: false` this module's own top
 * level runs only for the first browser file of a worker (the others kept the suite's 30 s).
 */
export function browserTimeouts(): void {
  vi.setConfig({ testTimeout: BROWSER_TEST_TIMEOUT_MS });
}

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * One Chromium per vitest worker: the browser files of a worker run one after another in one process
 * (`isolate: false`), each in contexts of its own (cookies, storage), which its `close()` closes. A
 * launch and the first page cost about a second and a half of CPU, once per file before. The browser
 * ends with the worker (Playwright closes what it launched when its process exits); one that crashed
 * or was closed is launched again.
 */
let launched: Promise<Browser> | undefined;

async function workerBrowser(): Promise<Browser> {
  const current = await launched?.catch(() => undefined);
  if (current?.isConnected()) return current;
  launched = chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  return launched;
}

export interface ConsoleService {
  h: Harness;
  baseUrl: string;
  browser: Browser;
  /** A fresh browser context (its own cookies) with a page open; `bypassCSP` only to inject a test tool (axe). */
  newPage(options?: { bypassCSP?: boolean }): Promise<{ context: BrowserContext; page: Page }>;
  close(): Promise<void>;
}

/**
 * The service on a loopback port with its clock at the real now (the browser's dates agree), and
 * Chromium. `port` fixes the port, for a test whose PUBLIC_BASE_URL must be the service's own address
 * (links in mail that the browser follows).
 */
export async function startConsoleService(overrides: Partial<Config> = {}, port = 0): Promise<ConsoleService> {
  if (!existsSync(join(CONSOLE_DIR, 'index.html'))) {
    throw new Error(`The console is not built (${CONSOLE_DIR}): run \`npm run build:console\` (npm test does)`);
  }
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium not found at ${CHROMIUM}: apt-get install chromium (.ci/run does), or set CHROMIUM_PATH`);
  }
  const h = await createHarness(overrides, new Date().toISOString());
  await h.app.listen({ port, host: '127.0.0.1' });
  const baseUrl = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  const browser = await workerBrowser();
  const contexts: BrowserContext[] = [];
  return {
    h,
    baseUrl,
    browser,
    async newPage(options = {}) {
      const context = await browser.newContext({ baseURL: baseUrl, viewport: { width: 1280, height: 860 }, bypassCSP: options.bypassCSP ?? false });
      context.setDefaultTimeout(BROWSER_STEP_TIMEOUT_MS);
      contexts.push(context);
      // A page error (an exception in the console's code) fails the test that caused it.
      const page = await context.newPage();
      page.on('pageerror', (err) => {
        throw err;
      });
      return { context, page };
    },
    async close() {
      // Every context of the file, also those it made on `browser` itself; the browser stays for the next file.
      for (const c of [...contexts, ...browser.contexts()]) await c.close().catch(() => undefined);
      await h.close();
    },
  };
}

export const PASSWORD = 'violet-harbor-lantern-42';

/** Sign up through the console's own form; lands on "New organization" (a new user has none). */
export async function signUpInBrowser(page: Page, name = 'Ada Console'): Promise<string> {
  const email = `${unique('console')}@example.com`;
  await page.goto('/console/signup');
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  // The context's step bound, not expect.poll's 1 s: the first sign-up of a process starts the password estimator's worker.
  await page.getByRole('heading', { name: 'New organization' }).waitFor();
  return email;
}

/** Create an organization through the form; returns its id (from the URL) once its overview shows. */
export async function createOrganizationInBrowser(page: Page, name = 'Acme Console'): Promise<string> {
  const slug = unique('acme').toLowerCase().replace(/[^a-z0-9-]/g, '-');
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Slug').fill(slug);
  await page.getByRole('button', { name: 'Create organization' }).click();
  await page.getByRole('button', { name: 'Done' }).click();
  await page.waitForURL(/\/console\/orgs\/[0-9a-f-]{36}$/);
  const id = /orgs\/([0-9a-f-]{36})/.exec(page.url())?.[1];
  if (!id) throw new Error(`no organization id in ${page.url()}`);
  await page.getByRole('heading', { name, level: 1 }).waitFor();
  return id;
}

/**
 * Sign a user made through the harness in: the console's sign-in call (`POST /console/session`, its
 * header, the user's password) made by the page's own request context, whose answer sets the refresh
 * cookie in the page's cookie jar as the form's call does; then the console loaded, and the wait until
 * it shows an organization. The form itself is sign-in.browser.test.ts's subject; going through it
 * here cost each test a page load (half a second).
 */
export async function signInInBrowser(page: Page, user: { email: string; password: string }): Promise<void> {
  const res = await page.request.post('/console/session', { headers: { 'x-creditgate-console': '1' }, data: { email: user.email, password: user.password } });
  if (!res.ok()) throw new Error(`console sign-in of ${user.email}: ${res.status()} ${await res.text()}`);
  await page.goto('/console/');
  await page.getByRole('navigation', { name: 'Organization' }).waitFor();
}

/** Every organization page's address (the navigation's list, console/src/org-pages.ts), and the new-organization form. */
export function orgPagePaths(organizationId: string): string[] {
  const org = `/console/orgs/${organizationId}`;
  return [...ORG_PAGES.map((p) => (p.page === '' ? org : `${org}/${p.page}`)), '/console/orgs/new'];
}
