import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, json, setTierOverHttp, signUpWithOrganization } from '../harness.js';
import { type ConsoleService, browserTimeouts, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The overview's days are the browser's own (docs/usage-analytics.md, "Time zones"): the summary is asked
 * with the browser's zone, and a zone the service cannot bucket by (a half-hour offset) falls back to UTC.
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

async function overviewIn(timezoneId: string) {
  const owner = await signUpWithOrganization(s.h);
  await setTierOverHttp(s.h, owner.deploymentId, 'launch');
  const key = await createKeyOverHttp(s.h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write'] });
  const res = await s.h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: 'rag_query' } });
  expect(json(res), res.body).toMatchObject({ success: true });
  s.h.clock.advance(1000);
  const context = await s.browser.newContext({ baseURL: s.baseUrl, viewport: { width: 1280, height: 860 }, timezoneId });
  const page = await context.newPage();
  page.on('pageerror', (err) => {
    throw err;
  });
  await signInInBrowser(page, owner);
  await expect.poll(() => page.getByTestId('calls-total').textContent()).toBe('1');
  await page.getByText('Show as a table').click();
  const heading = (await page.locator('#per-day').textContent()) ?? '';
  const lastDay = (await page.locator('details table tbody tr').last().locator('th').textContent()) ?? '';
  const column = (await page.locator('details table thead th').first().textContent()) ?? '';
  await context.close();
  return { heading, lastDay, column };
}

const todayIn = (timeZone: string, at: Date) =>
  new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(at);

describe('the overview in the browser’s zone', () => {
  it('shows the days of a zone with whole-hour offsets, the last one being today there', async () => {
    const shown = await overviewIn('Pacific/Kiritimati');
    expect(shown.heading).toContain('Pacific/Kiritimati');
    expect(shown.column).toBe('Day (Pacific/Kiritimati)');
    expect(shown.lastDay).toBe(todayIn('Pacific/Kiritimati', s.h.clock.now()));
  });

  it('falls back to UTC days in a zone with a half-hour offset', async () => {
    const shown = await overviewIn('Asia/Kolkata');
    expect(shown.heading).toContain('UTC');
    expect(shown.column).toBe('Day (UTC)');
    expect(shown.lastDay).toBe(s.h.clock.now().toISOString().slice(0, 10));
  });
});
