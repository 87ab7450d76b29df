import { readFile } from 'node:fs/promises';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CSV_HEADER, type UsageRecordView } from '../../src/modules/usage/records.js';
import { parseCsv } from '../csv-reader.js';
import { bearer, createKeyOverHttp, json, setTierOverHttp, signUpWithOrganization } from '../harness.js';
import { type ConsoleService, signInInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});


/** The Tool column of the records table. */
const toolsShown = (page: Page) => page.getByTestId('usage-records').locator('tbody tr td:nth-child(2)').allTextContents();

describe('console usage explorer', () => {
  it('filters the records by tool, and downloads every matching record as CSV, following the export parts', async () => {
    const owner = await signUpWithOrganization(s.h);
    await setTierOverHttp(s.h, owner.deploymentId, 'launch');
    const key = await createKeyOverHttp(s.h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write'] });
    const calls = ['alpha', 'beta', 'alpha', 'gamma', 'alpha', 'beta', 'alpha', 'alpha'];
    for (const tool of calls) {
      const res = await s.h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: tool } });
      expect(json(res), res.body).toMatchObject({ success: true });
    }

    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Usage', level: 1 }).waitFor();
    await expect.poll(() => toolsShown(page)).toHaveLength(calls.length);

    // Filter by tool: only that tool's records.
    await page.getByLabel('Tool', { exact: true }).fill('alpha');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expect.poll(() => toolsShown(page)).toEqual(['alpha', 'alpha', 'alpha', 'alpha', 'alpha']);
    // Dates are UTC days, "To" included: today to today is everything of today.
    const today = s.h.clock.now().toISOString().slice(0, 10);
    await page.getByLabel('From', { exact: true }).fill(today);
    await page.getByLabel('To', { exact: true }).fill(today);
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expect.poll(() => toolsShown(page)).toHaveLength(5);

    // The API's own answer for the same filters, to compare the file with.
    const expected = json<{ data: UsageRecordView[] }>(
      await s.h.request({ method: 'GET', url: `/organizations/${owner.organizationId}/usage/records?tool_name=alpha&limit=100`, headers: bearer(owner.accessToken) }),
    ).data;
    expect(expected).toHaveLength(5);

    // Parts of two records, so the console must follow Link: rel="next" twice to hold all five.
    const csvRequests: string[] = [];
    await page.route('**/usage/records?**', async (route) => {
      const request = route.request();
      if (request.headers().accept !== 'text/csv') return route.continue();
      const url = new URL(request.url());
      url.searchParams.set('limit', '2');
      csvRequests.push(`${url.pathname}${url.search}`);
      return route.continue({ url: url.toString() });
    });
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download CSV' }).click()]);
    expect(download.suggestedFilename()).toMatch(/^usage-[a-z0-9-]+-\d{8}T\d{6}Z\.csv$/);
    const rows = parseCsv(await readFile((await download.path())!, 'utf8'));
    expect(rows[0]).toEqual([...CSV_HEADER]);
    const col = (name: (typeof CSV_HEADER)[number]) => CSV_HEADER.indexOf(name);
    expect(rows.slice(1).map((r) => ({ id: r[col('id')], tool: r[col('tool_name')], credits: Number(r[col('credits')]), success: r[col('success')] }))).toEqual(
      expected.map((r) => ({ id: r.id, tool: 'alpha', credits: r.credits, success: 'true' })),
    );
    expect(csvRequests).toHaveLength(3);
    expect(csvRequests.slice(1).every((u) => u.includes('cursor=') && u.includes('tool_name=alpha') && u.includes(`from=${today}`))).toBe(true);
    await expect.poll(() => page.getByTestId('csv-status').textContent()).toMatch(/^Downloaded 5 rows as usage-.*\.csv\.$/);

    // A filter nothing matches says so.
    await page.getByLabel('Tool', { exact: true }).fill('nope');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await page.getByTestId('no-records').waitFor();
  });

  it('shows the API’s error for a range it refuses', async () => {
    const owner = await signUpWithOrganization(s.h);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.goto(`/console/orgs/${owner.organizationId}/usage`);
    await page.getByRole('heading', { name: 'Usage', level: 1 }).waitFor();
    await page.getByLabel('From', { exact: true }).fill('2026-02-10');
    await page.getByLabel('To', { exact: true }).fill('2026-02-01');
    await page.getByRole('button', { name: 'Apply filters' }).click();
    await expect.poll(() => page.getByRole('alert').first().textContent()).toMatch(/^Could not load usage records\. Some of what was entered is not valid\./);
    expect(await page.getByRole('alert').first().textContent()).not.toContain('VALIDATION_ERROR');
  });
});
