import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, grant, json, setTierOverHttp, signUpWithOrganization } from '../harness.js';
import { type ConsoleService, browserTimeouts, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The overview's balance card (docs/usage-analytics.md, "Balance history"): what it shows is the API's
 * answer to the very request the page made, and that answer agrees with the ledger's own figures
 * (the credits granted less the credits the recorded calls used).
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

const ZONE = 'America/New_York';
const DAY = 24 * 3600 * 1000;

interface BalanceDay {
  day: string;
  balance: number | null;
  spent: number;
  refunded: number;
}
interface History {
  days: BalanceDay[];
  balance: number | null;
  burn_rate: number;
  runs_out_at: string | null;
  tz: string;
}

/** A page in `ZONE` on the service's (fake) clock, noting the balance history requests it makes. */
async function openPage(width = 1280): Promise<{ page: Page; asked: URL[]; close: () => Promise<void> }> {
  const context = await s.browser.newContext({ baseURL: s.baseUrl, viewport: { width, height: 900 }, timezoneId: ZONE });
  context.setDefaultTimeout(45_000);
  const page = await context.newPage();
  page.on('pageerror', (err) => {
    throw err;
  });
  await page.clock.setFixedTime(s.h.clock.now());
  const asked: URL[] = [];
  page.on('request', (r) => {
    const url = new URL(r.url());
    if (url.pathname.endsWith('/balance/history')) asked.push(url);
  });
  return { page, asked, close: () => context.close() };
}

async function sameAnswer(url: URL, token: string): Promise<History> {
  const res = await s.h.request({ method: 'GET', url: `${url.pathname}${url.search}`, headers: bearer(token) });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: History }>(res).data;
}

const localDay = (iso: string, tz: string) =>
  new Intl.DateTimeFormat('en-CA', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit' }).format(new Date(iso));

describe('the overview’s balance card', () => {
  it('shows the balance, burn rate and run-out day of the API’s answer, which the recorded calls explain', async () => {
    const owner = await signUpWithOrganization(s.h);
    await setTierOverHttp(s.h, owner.deploymentId, 'launch');
    await grant(s.h, owner.deploymentId, 5_000);
    const key = await createKeyOverHttp(s.h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write'] });
    const start = await sameAnswer(new URL(`${s.baseUrl}/organizations/${owner.organizationId}/balance/history`), key.key);
    const startBalance = start.balance!;
    expect(startBalance).toBeGreaterThan(5_000);
    let used = 0;
    const record = async () => {
      const res = await s.h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: 'rag_query' } });
      const body = json<{ success: boolean; credits_used: number }>(res);
      expect(body.success, res.body).toBe(true);
      used += body.credits_used;
    };
    // Three days ago two calls, today three: spending on two days of the last seven.
    await record();
    await record();
    s.h.clock.advance(3 * DAY);
    await record();
    await record();
    await record();
    s.h.clock.advance(1000);
    expect(used).toBeGreaterThan(0);

    const { page, asked, close } = await openPage();
    await signInInBrowser(page, owner);
    const card = page.getByTestId('balance-history');
    await card.getByTestId('balance-now').waitFor();
    const url = asked.at(-1)!;
    expect(url.searchParams.get('tz')).toBe(ZONE);
    const answer = await sameAnswer(url, key.key);

    // The answer is the ledger's: the balance before the calls less what they used, and the days' spending is the calls'.
    expect(answer.balance).toBe(startBalance - used);
    expect(answer.days.reduce((sum, d) => sum + d.spent, 0)).toBe(used);
    expect(answer.days.at(-1)!.balance).toBe(answer.balance);
    // Rounded to hundredths by the API.
    expect(answer.burn_rate).toBeCloseTo(used / 7, 2);
    expect(answer.runs_out_at).not.toBeNull();

    // The card shows that answer.
    expect(await card.getByTestId('balance-now').textContent()).toBe((startBalance - used).toLocaleString('en-US'));
    expect(await card.getByTestId('burn-rate').textContent()).toContain(
      `${answer.burn_rate.toLocaleString('en-US', { maximumFractionDigits: 1 })} credits a day`,
    );
    expect(await card.getByTestId('runs-out').textContent()).toBe(`At this rate, credits last until ${localDay(answer.runs_out_at!, ZONE)}.`);
    // One point of the sparkline per day with a balance, named for screen readers.
    const points = (await card.locator('svg.sparkline polyline').getAttribute('points'))!.trim().split(/\s+/);
    expect(points).toHaveLength(answer.days.filter((d) => d.balance !== null).length);
    expect(await card.locator('svg.sparkline').getAttribute('aria-label')).toBe(`Closing balance per day, ${answer.days.length} days (${ZONE})`);

    // 7 days: the card follows the range picker with a request of its own.
    const before = asked.length;
    await page.getByRole('button', { name: '7 days' }).click();
    await expect.poll(() => asked.length).toBeGreaterThan(before);
    const week = await sameAnswer(asked.at(-1)!, key.key);
    expect(week.days.length).toBeLessThan(answer.days.length);
    await expect
      .poll(async () => (await card.locator('svg.sparkline polyline').getAttribute('points'))!.trim().split(/\s+/).length)
      .toBe(week.days.filter((d) => d.balance !== null).length);
    await close();
  });

  it('says when nothing was spent lately, and when the allocation is unlimited', async () => {
    const idle = await signUpWithOrganization(s.h);
    await grant(s.h, idle.deploymentId, 300);
    let { page, close } = await openPage();
    await signInInBrowser(page, idle);
    await expect.poll(() => page.getByTestId('runs-out').textContent()).toBe('No spending in the last 7 days.');
    expect(await page.getByTestId('balance-now').textContent()).toBe('300');
    await close();

    const unlimited = await signUpWithOrganization(s.h);
    await setTierOverHttp(s.h, unlimited.deploymentId, 'enterprise');
    ({ page, close } = await openPage());
    await signInInBrowser(page, unlimited);
    await expect.poll(() => page.getByTestId('runs-out').textContent()).toBe('Unlimited monthly credits.');
    await close();
  });

  it('fits a 390 px screen', async () => {
    const owner = await signUpWithOrganization(s.h);
    await grant(s.h, owner.deploymentId, 1_234_567);
    const { page, close } = await openPage();
    await signInInBrowser(page, owner);
    await page.setViewportSize({ width: 390, height: 900 });
    await page.getByTestId('balance-now').waitFor();
    expect(await page.getByTestId('balance-now').textContent()).toBe('1,234,567');
    const box = (await page.getByTestId('balance-history').boundingBox())!;
    expect(box.x + box.width).toBeLessThanOrEqual(390);
    const m = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
    expect(m.scroll).toBeLessThanOrEqual(m.inner);
    await close();
  });
});
