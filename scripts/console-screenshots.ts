/**
 * The screenshots of docs/console/ (README "The console"): the service in this process on an in-memory
 * PGlite, a demo organization with 30 days of usage recorded through the API on a manual clock, and
 * Debian's Chromium taking each main page at 1280×800.
 *
 *   npx tsx scripts/console-screenshots.ts        (needs `npm run build:console` and /usr/bin/chromium)
 */
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { chromium, type Page } from 'playwright-core';
import { buildApp } from '../src/app.js';
import { DAY, HOUR, ManualClock } from '../src/clock.js';
import { testConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';

const OUT = fileURLToPath(new URL('../docs/console/', import.meta.url));
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
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
  for (let i = 0; i < 100 && (await page.getByText('Loading…').count()) > 0; i++) await page.waitForTimeout(50);
  await page.waitForTimeout(300); // the chart's first paint
}

async function main(): Promise<void> {
  const db = await openDatabase({ databaseUrl: 'memory://', dataDir: '' });
  await runMigrations(db);
  const now = new Date();
  const clock = new ManualClock(new Date(now.getTime() - 30 * DAY).toISOString());
  const config = testConfig({ logLevel: 'warn' });
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
    clock.advance(HOUR);

    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    const context = await browser.newContext({ baseURL: base, viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    await page.goto('/console/');
    await settle(page);
    await page.screenshot({ path: `${OUT}sign-in.png` });
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/console\/orgs\//);
    const shots: Array<[string, string]> = [
      ['overview', ''],
      ['usage', '/usage'],
      ['api-keys', '/api-keys'],
      ['deployments', '/deployments'],
      ['members', '/members'],
      ['audit', '/audit'],
    ];
    for (const [name, path] of shots) {
      await page.goto(`/console/orgs/${org.id}${path}`);
      await settle(page);
      await page.screenshot({ path: `${OUT}${name}.png` });
    }
    const operator = await context.newPage();
    await operator.goto('/console/operator');
    await operator.getByLabel('Operator key').fill(config.adminApiKey);
    await operator.getByLabel('Operator key').press('Enter');
    await operator.getByLabel('Operator key').waitFor({ state: 'detached' });
    await settle(operator);
    await operator.getByRole('button', { name: 'Acme Research' }).click();
    await operator.getByRole('heading', { name: /Acme Research/ }).first().waitFor();
    await settle(operator);
    await operator.screenshot({ path: `${OUT}operator.png` });
    await operator.getByRole('navigation', { name: 'Operator' }).getByRole('button', { name: 'Mailbox' }).click();
    await operator.getByRole('heading', { name: 'Mailbox' }).waitFor();
    await settle(operator);
    await operator.screenshot({ path: `${OUT}mailbox.png` });
    await browser.close();
    console.log(`screenshots written to ${OUT}`);
  } finally {
    await app.close();
    await db.close();
  }
}

await main();
