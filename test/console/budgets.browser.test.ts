import type { Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, json, serviceHeaders, setTierOverHttp, signUpAsMember, signUpWithOrganization } from '../harness.js';
import { audit } from './axe.js';
import { browserTimeouts, type ConsoleService, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The budgets page (docs/budgets.md, docs/console.md "Pages"): an owner creates budgets and sees each
 * with its spent bar and its window in the browser's own time; spending through the API moves the bar;
 * the API's 400 shows beside the field it names; edit and delete (with confirmation); a member reads
 * the budgets without any control to change them.
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

interface BudgetView {
  id: string;
  scope: string;
  limit_credits: number | null;
  spent_credits: number | null;
  window_start: string;
  resets_at: string;
}

const budgetsOf = async (token: string, organizationId: string) =>
  json<{ data: BudgetView[] }>(await s.h.request({ method: 'GET', url: `/organizations/${organizationId}/budgets`, headers: bearer(token) })).data;

/** Spend `times` credits through service usage (one credit a call), as the end user `mcpUserId` when given. */
async function spend(deploymentId: string, times: number, mcpUserId?: string): Promise<void> {
  for (let i = 0; i < times; i++) {
    const res = await s.h.request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: serviceHeaders(s.h),
      payload: { deployment_id: deploymentId, tool_name: 'console-budget-tool', ...(mcpUserId ? { mcp_user_id: mcpUserId } : {}) },
    });
    expect(json(res).success, res.body).toBe(true);
  }
}

const rowOf = (page: Page, caps: string): Locator => page.getByTestId('budgets').getByRole('row', { name: new RegExp(`^${caps}`) });
const meterOf = (row: Locator) => row.getByRole('meter', { name: 'credits spent' });

/** The browser's own rendering of a time, as the page writes it (form-fields.tsx LocalTime). */
const local = (page: Page, iso: string) => page.evaluate((t) => new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' }).format(new Date(t)), iso);

async function openBudgets(page: Page, organizationId: string): Promise<void> {
  await page.goto(`/console/orgs/${organizationId}/budgets`);
  await page.getByRole('heading', { name: 'Budgets', level: 1 }).waitFor();
}

describe('console budgets page', () => {
  it('creates budgets shown with their spent bars and windows, follows spending, shows the field the API refuses, edits and deletes; a member only reads', async () => {
    const owner = await signUpWithOrganization(s.h);
    await setTierOverHttp(s.h, owner.deploymentId, 'launch');
    const { page } = await s.newPage({ bypassCSP: true });
    await signInInBrowser(page, owner);
    await openBudgets(page, owner.organizationId);
    await page.getByText('No budgets yet.').waitFor();

    // No limit at all: the API's 400 names limit_credits, shown beside that field; nothing is written.
    await page.getByRole('button', { name: 'New budget' }).click();
    await page.getByRole('heading', { name: 'New budget' }).waitFor();
    await page.getByRole('button', { name: 'Create budget' }).click();
    const credits = page.getByLabel('Credit limit', { exact: true });
    await expect.poll(() => credits.getAttribute('aria-invalid')).toBe('true');
    const describedBy = (await credits.getAttribute('aria-describedby')) ?? '';
    const message = page.locator(`[id="${describedBy.split(' ').find((id) => id.endsWith('-error'))}"]`);
    expect(await message.textContent()).toMatch(/\S/);
    expect(await page.getByRole('alert').first().textContent()).toMatch(/^Some of what was entered is not valid\./);
    expect(await budgetsOf(owner.accessToken, owner.organizationId)).toEqual([]);

    // An organization budget of 100 credits a day, alerting at 50 and 100 %.
    await credits.fill('100');
    await page.getByLabel('Alert thresholds').fill('50, 100');
    await page.getByRole('button', { name: 'Create budget' }).click();
    await expect.poll(() => page.getByTestId('budget-notice').textContent()).toBe('Budget created for the whole organization.');
    const orgRow = rowOf(page, 'The whole organization');
    await expect.poll(() => meterOf(orgRow).getAttribute('aria-valuenow')).toBe('0');
    expect(await meterOf(orgRow).getAttribute('aria-valuemax')).toBe('100');
    expect(await orgRow.getByTestId('spent-credits').textContent()).toBe('0 of 100 credits · 100 left');
    expect(await orgRow.getByRole('cell').nth(0).textContent()).toMatch(/^Day \(UTC\)/);
    expect(await orgRow.getByRole('cell').nth(1).textContent()).toBe('Block');
    expect(await orgRow.getByRole('cell').nth(3).textContent()).toBe('50\u00a0%, 100\u00a0%');
    // The window: its start and its reset as the API answers them, written in the browser's zone.
    const [made] = await budgetsOf(owner.accessToken, owner.organizationId);
    expect(made).toMatchObject({ scope: 'organization', limit_credits: 100, spent_credits: 0 });
    const resets = orgRow.getByTestId('resets-at').locator('time');
    expect(await resets.getAttribute('datetime')).toBe(made!.resets_at);
    expect(await resets.textContent()).toBe(await local(page, made!.resets_at));
    expect(await orgRow.getByTestId('window-start').locator('time').getAttribute('datetime')).toBe(made!.window_start);

    // Each end user separately, alert only.
    await page.getByRole('button', { name: 'New budget' }).click();
    await page.getByLabel('What it caps').selectOption('end_user');
    await expect.poll(() => page.getByRole('checkbox', { name: /Each end user separately/ }).isChecked()).toBe(true);
    await page.getByLabel('Credit limit', { exact: true }).fill('10');
    await page.getByRole('radio', { name: /Alert only/ }).check();
    await page.getByRole('button', { name: 'Create budget' }).click();
    await expect.poll(() => page.getByTestId('budget-notice').textContent()).toBe('Budget created for each end user.');
    const eachRow = rowOf(page, 'Each end user');
    expect(await eachRow.getByRole('cell').nth(1).textContent()).toBe('Alert only');
    expect(await eachRow.getByText('No end user has spent in this window yet.').count()).toBe(1);

    // Spending through the API moves the bars: 7 credits, 3 of them by one end user.
    await spend(owner.deploymentId, 4);
    await spend(owner.deploymentId, 3, 'ada-end-user');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(() => meterOf(orgRow).getAttribute('aria-valuenow')).toBe('7');
    expect(await orgRow.getByTestId('spent-credits').textContent()).toBe('7 of 100 credits · 93 left');
    expect(await meterOf(eachRow).getAttribute('aria-valuenow')).toBe('3');
    await eachRow.getByText('1 end user in this window').click();
    expect(await eachRow.getByRole('row', { name: /ada-end-user/ }).getByRole('cell').allTextContents()).toEqual(['ada-end-user', '3']);

    // Edit: the limit goes to 200; the spent count stays.
    await orgRow.getByRole('button', { name: 'Edit' }).click();
    await page.getByRole('heading', { name: 'Edit the budget for the whole organization' }).waitFor();
    await page.getByLabel('Credit limit', { exact: true }).fill('200');
    await page.getByRole('button', { name: 'Save budget' }).click();
    await expect.poll(() => orgRow.getByTestId('spent-credits').textContent()).toBe('7 of 200 credits · 193 left');
    expect((await budgetsOf(owner.accessToken, owner.organizationId)).find((b) => b.scope === 'organization')?.limit_credits).toBe(200);

    // No serious or critical accessibility violation, with both budgets and the subjects shown.
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
    // No sideways scrolling on a phone (docs/console.md "Layout").
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await page.setViewportSize({ width: 1280, height: 860 });

    // A member reads the budgets and their bars, with no control to change them (the API refuses a member's write anyway).
    const member = await signUpAsMember(s.h, owner.organizationId, 'member');
    const { page: memberPage } = await s.newPage();
    await signInInBrowser(memberPage, member);
    await openBudgets(memberPage, owner.organizationId);
    await expect.poll(() => meterOf(rowOf(memberPage, 'The whole organization')).getAttribute('aria-valuenow')).toBe('7');
    await memberPage.getByText('Your role can see budgets; owners and admins create and change them.').waitFor();
    expect(await memberPage.getByRole('button', { name: 'New budget' }).count()).toBe(0);
    expect(await memberPage.getByRole('button', { name: 'Edit' }).count()).toBe(0);
    expect(await memberPage.getByRole('button', { name: 'Delete' }).count()).toBe(0);

    // Delete asks once more; then the budget is gone here and in the API.
    await eachRow.getByRole('button', { name: 'Delete' }).click();
    await eachRow.getByRole('button', { name: 'Delete budget' }).click();
    await expect.poll(() => page.getByTestId('budget-notice').textContent()).toBe('The budget for each end user is deleted.');
    await expect.poll(() => page.getByTestId('budgets').locator('tbody tr').count()).toBe(1);
    expect((await budgetsOf(owner.accessToken, owner.organizationId)).map((b) => b.scope)).toEqual(['organization']);
  });
});
