import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueAction } from '../admin-fixtures.js';
import { adminHeaders, serviceHeaders, signUpAsMember, signUpWithOrganization } from '../harness.js';
import { audit } from './axe.js';
import { browserTimeouts, type ConsoleService, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The prices page (docs/metering.md, Prices up front): the tools and credits the operator set, reached
 * from the navigation by any role; a failed load offers Retry; a long tool name does not widen the page
 * on a phone.
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

async function operatorPut(url: string, payload: Record<string, unknown>): Promise<void> {
  const res = await s.h.request({ method: 'PUT', url, headers: adminHeaders(s.h), payload });
  expect(res.statusCode, res.body).toBe(200);
}

const cellsOf = (page: Page, table: string, name: string) =>
  page.getByTestId(table).getByRole('row', { name: new RegExp(`^${name}`) }).locator('th, td').allTextContents();

describe('console prices page', () => {
  it('lists the tools and prices the operator set, reached from the navigation by a viewer; Retry after a failed load; no sideways scroll at 390 px', async () => {
    // The operator's table: a dear action with two tools, one of them with a long name, and platform_basic's price.
    const action = uniqueAction('console_price');
    const tool = `${action}_search`;
    const longTool = `${action}_${'x'.repeat(110)}`;
    await operatorPut(`/api/v1/admin/credit-costs/${action}`, { credits: 12500, description: 'Deep research across sources' });
    await operatorPut(`/api/v1/admin/tool-actions/${tool}`, { action });
    await operatorPut(`/api/v1/admin/tool-actions/${longTool}`, { action });
    const list = (await s.h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers: serviceHeaders(s.h) })).json() as {
      costs: Array<{ action: string; credits: number }>;
    };
    const basicCredits = list.costs.find((c) => c.action === 'platform_basic')?.credits;
    expect(basicCredits).toBeTypeOf('number');

    const owner = await signUpWithOrganization(s.h);
    const viewer = await signUpAsMember(s.h, owner.organizationId, 'viewer');
    const { page } = await s.newPage({ bypassCSP: true });
    await signInInBrowser(page, viewer);
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Prices' }).click();
    await page.getByRole('heading', { name: 'Prices', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/console/orgs/${owner.organizationId}/prices`);

    // Tool → action → credits per call, formatted; then the action with its description.
    await page.getByTestId('tool-prices').waitFor();
    expect(await cellsOf(page, 'tool-prices', tool)).toEqual([tool, action, '12,500']);
    expect(await cellsOf(page, 'tool-prices', longTool)).toEqual([longTool, action, '12,500']);
    expect(await cellsOf(page, 'action-prices', action)).toEqual([action, '12,500', 'Deep research across sources']);
    expect(await page.getByTestId('default-price').textContent()).toBe(
      `A tool not listed here is metered as platform_basic, at ${basicCredits} ${basicCredits === 1 ? 'credit' : 'credits'} per call.`,
    );

    // No serious or critical accessibility violation; a phone does not scroll sideways with the long tool name.
    expect(await audit(page)).toEqual([]);
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    const toolCell = page.getByTestId('tool-prices').getByRole('rowheader', { name: longTool });
    expect((await toolCell.boundingBox())!.width).toBeLessThan(390);
    await page.setViewportSize({ width: 1280, height: 860 });

    // A failed load says what failed and offers Retry, which loads the list.
    let fail = true;
    await page.route('**/credit-costs', (route) =>
      fail ? route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ success: false, error: { code: 'SERVICE_UNAVAILABLE', message: 'Try again' } }) }) : route.continue(),
    );
    await page.reload();
    await page.getByRole('heading', { name: 'Prices', level: 1 }).waitFor();
    await page.getByText('Could not load prices.').waitFor();
    fail = false;
    await page.getByRole('button', { name: 'Retry' }).click();
    await page.getByTestId('tool-prices').waitFor();
    expect(await cellsOf(page, 'tool-prices', tool)).toEqual([tool, action, '12,500']);
    expect(await page.getByText('Could not load prices.').count()).toBe(0);
  });
});
