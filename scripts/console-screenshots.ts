/**
 * The screenshots of docs/console/ (README "The console"): the service in this process on an in-memory
 * PGlite, a demo organization with 30 days of usage recorded through the API on a manual clock, and
 * Debian's Chromium taking every page in both themes at two widths: `NAME.png` (light, 1440 px wide),
 * `NAME-dark.png`, `NAME-390.png` and `NAME-390-dark.png` (390 px, the whole page's height). Billing
 * sells through the Stripe stand-in (test/stripe-stand-in/, docs/billing.md "The stand-in") started
 * here, so the billing page shows its plans and packs with their prices.
 *
 *   npx tsx scripts/console-screenshots.ts        (needs `npm run build:console` and /usr/bin/chromium)
 *   SCREENSHOTS_DIR=/tmp/shots npx tsx scripts/console-screenshots.ts   (elsewhere than docs/console/)
 */
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { chromium, type Page } from 'playwright-core';
import { buildApp } from '../src/app.js';
import { DAY, HOUR, ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { startStripeStandIn } from '../test/stripe-stand-in/server.js';
import { ORG_PAGES } from '../console/src/org-pages.js';

const OUT = process.env.SCREENSHOTS_DIR ? `${process.env.SCREENSHOTS_DIR.replace(/\/$/, '')}/` : fileURLToPath(new URL('../docs/console/', import.meta.url));
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
/** Light and dark at 1440 px, then at 390 px (a phone): the suffix of each file. */
const VARIANTS: Array<{ suffix: string; width: number; height: number; scheme: 'light' | 'dark' }> = [
  { suffix: '', width: 1440, height: 900, scheme: 'light' },
  { suffix: '-dark', width: 1440, height: 900, scheme: 'dark' },
  { suffix: '-390', width: 390, height: 844, scheme: 'light' },
  { suffix: '-390-dark', width: 390, height: 844, scheme: 'dark' },
];

/** The page as it is now, in every variant. */
async function shoot(page: Page, name: string, reload: () => Promise<void>): Promise<void> {
  for (const v of VARIANTS) {
    await page.setViewportSize({ width: v.width, height: v.height });
    await page.emulateMedia({ colorScheme: v.scheme });
    await reload();
    await settle(page);
    await page.screenshot({ path: `${OUT}${name}${v.suffix}.png`, fullPage: v.width < 800 });
  }
}
const PASSWORD = 'violet-harbor-lantern-42';
const TOOLS: Array<[string, number]> = [
  ['search_docs', 9],
  ['summarize', 5],
  ['generate_report', 2],
  ['translate', 3],
  ['code_review', 1],
];

async function settle(page: Page): Promise<void> {
  await page.locator('h1').first().waitFor();
  for (let i = 0; i < 100 && (await page.locator('[aria-busy="true"]').count()) > 0; i++) await page.waitForTimeout(50);
  await page.waitForTimeout(300); // the chart's first paint
}

async function main(): Promise<void> {
  const db = await openDatabase({ databaseUrl: 'memory://', dataDir: '' });
  await runMigrations(db);
  const now = new Date();
  const clock = new ManualClock(new Date(now.getTime() - 30 * DAY).toISOString());
  // Stripe is the stand-in on a loopback port, on the demo's clock: two plans and two packs with prices.
  const stripe = await startStripeStandIn({ now: () => clock.now() });
  const plan = (name: string, cents: number) => stripe.createPrice({ productName: name, unitAmount: cents, interval: 'month' }).id;
  const pack = (name: string, cents: number) => stripe.createPrice({ productName: name, unitAmount: cents }).id;
  const config = testConfig({
    logLevel: 'warn',
    stripeSecretKey: stripe.secretKey,
    stripeApiBase: stripe.url,
    stripeWebhookSecret: stripe.webhookSecret,
    stripePriceTiers: { [plan('Launch', 4900)]: 'launch', [plan('Growth', 19_900)]: 'growth' },
    creditPacks: { small: { credits: 1000, priceId: pack('1,000 credits', 500) }, large: { credits: 10_000, priceId: pack('10,000 credits', 4000) } },
  });
  const app = await buildApp({ config, db, clock });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const call = async (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) => {
    const res = await app.inject({ method: method as 'POST', url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });
    if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`);
    return res.json();
  };
  try {
    const email = 'ada@acme.example';
    await call('POST', '/auth/signup', { email, password: PASSWORD, full_name: 'Ada Lovelace' });
    // Ada follows the verification link, read from the local mailbox (no SMTP here), as a new user would.
    const mail = await call('GET', `/api/v1/admin/mailbox?to=${encodeURIComponent(email)}`, undefined, { 'x-admin-key': config.adminApiKey });
    const verifyLink = new URL(mail.messages[0].links[0]);
    await call('POST', '/auth/verify-email', { token: new URLSearchParams(verifyLink.hash.slice(1)).get('token') });
    let bearer = { authorization: `Bearer ${(await call('POST', '/auth/login', { email, password: PASSWORD })).data.access_token}` };
    const org = (await call('POST', '/organizations', { name: 'Acme Research', slug: 'acme-research' }, bearer)).data;
    const admin = { 'x-admin-key': config.adminApiKey };
    await call('PUT', `/api/v1/admin/deployments/${org.deployment.id}`, { tier: 'growth' }, admin);
    await call('POST', `/api/v1/admin/deployments/${org.deployment.id}/credits`, { amount: 5000, reason: 'Launch promotion' }, admin);
    // The operator's price list: four of the demo's tools have an action of their own (the Prices page), the fifth is platform_basic.
    for (const [tool, action] of [['search_docs', 'rag_query'], ['summarize', 'generate'], ['generate_report', 'task_advanced'], ['code_review', 'crew_execute']]) {
      await call('PUT', `/api/v1/admin/tool-actions/${tool}`, { action }, admin);
    }
    const service = { 'x-mcp-service-key': config.mcpServiceKey };
    let n = 0;
    for (let day = 0; day < 30; day++) {
      const busy = 0.5 + 0.5 * Math.sin(day / 4) + day / 40;
      for (const [tool, weight] of TOOLS) {
        const calls = Math.round(weight * busy * 2);
        for (let i = 0; i < calls; i++) {
          await call('POST', '/api/v1/mcp/usage', { deployment_id: org.deployment.id, tool_name: tool, mcp_user_id: `customer-${(n++ * 7) % 23}` }, service);
        }
      }
      clock.advance(DAY);
    }
    clock.set(now.toISOString());
    bearer = { authorization: `Bearer ${(await call('POST', '/auth/login', { email, password: PASSWORD })).data.access_token}` };
    await call('POST', `/organizations/${org.id}/api-keys`, { name: 'Production MCP server', scopes: ['read', 'write'] }, bearer);
    await call('POST', `/organizations/${org.id}/api-keys`, { name: 'Analytics export', scopes: ['read'] }, bearer);
    await call('POST', `/organizations/${org.id}/users`, { email: 'grace@acme.example', role: 'admin' }, bearer);
    await call('POST', `/organizations/${org.id}/budgets`, { scope: 'organization', limit_credits: 2_000, window: 'month', mode: 'block' }, bearer);
    await call('POST', `/organizations/${org.id}/budgets`, { scope: 'end_user', end_user_id: '*', limit_credits: 50, window: 'day', mode: 'alert' }, bearer);
    // Today's calls after the budgets exist, so their bars show what they count.
    for (let i = 0; i < 24; i++) {
      await call('POST', '/api/v1/mcp/usage', { deployment_id: org.deployment.id, tool_name: TOOLS[i % TOOLS.length]![0], mcp_user_id: `customer-${i % 3}` }, service);
    }
    clock.advance(HOUR);

    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    const context = await browser.newContext({ baseURL: base, viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    await page.goto('/console/');
    await shoot(page, 'sign-in', async () => void (await page.reload()));
    await page.setViewportSize({ width: 1440, height: 900 });
    await page.emulateMedia({ colorScheme: 'light' });
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/console\/orgs\//);
    // Every organization page of the navigation (console/src/org-pages.ts), named by its path.
    const shots: Array<[string, string]> = ORG_PAGES.map(({ page }) => [page || 'overview', page ? `/${page}` : '']);
    for (const [name, path] of shots) {
      await shoot(page, name, async () => void (await page.goto(`/console/orgs/${org.id}${path}`)));
    }
    const operator = await context.newPage();
    // The operator key lives in the page's memory only: every load asks for it again.
    const operatorSignIn = async () => {
      await operator.goto('/console/operator');
      await operator.getByLabel('Operator key').fill(config.adminApiKey);
      await operator.getByLabel('Operator key').press('Enter');
      await operator.getByLabel('Operator key').waitFor({ state: 'detached' });
      await settle(operator);
    };
    // The operator's views are not addresses of their own: each variant opens them again.
    await shoot(operator, 'operator', async () => {
      await operatorSignIn();
      await operator.getByRole('button', { name: 'Acme Research' }).click();
      await operator.getByRole('heading', { name: /Acme Research/ }).first().waitFor();
    });
    await shoot(operator, 'mailbox', async () => {
      await operatorSignIn();
      await operator.getByRole('navigation', { name: 'Operator' }).getByRole('button', { name: 'Mailbox' }).click();
      await operator.getByRole('heading', { name: 'Mailbox' }).waitFor();
    });
    await browser.close();
    console.log(`screenshots written to ${OUT}`);
  } finally {
    await app.close();
    await db.close();
    await stripe.close();
  }
}

await main();
