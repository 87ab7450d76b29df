import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, unique } from '../harness.js';
import { type ConsoleService, createOrganizationInBrowser, PASSWORD, signUpInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

/** The operator page (docs/console.md "Operator"): the operator key in this tab's memory, and the operator API behind it. */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

const DAY = 86_400_000;

/** Open /console/operator and unlock it with `key`. */
async function unlock(page: Page, key: string): Promise<void> {
  await page.goto('/console/operator');
  await page.getByLabel('Operator key').fill(key);
  await page.getByRole('button', { name: 'Unlock' }).click();
}

async function unlocked(page: Page): Promise<void> {
  await unlock(page, s.h.config.adminApiKey);
  await page.getByRole('button', { name: 'Lock', exact: true }).waitFor();
}

/** Search for `q` and open the one organization found. */
async function openOrganization(page: Page, q: string, name: string): Promise<void> {
  await page.getByLabel('Search').fill(q);
  await page.getByRole('button', { name: 'Search', exact: true }).click();
  const results = page.getByTestId('organization-results');
  await expect.poll(() => results.getByRole('row').count()).toBe(2);
  await results.getByRole('button', { name }).click();
  await page.getByRole('heading', { name, level: 2 }).waitFor();
}

const cardValue = (page: Page, id: string) => page.getByTestId(`card-${id}`).locator('.value').textContent();

async function slugOf(organizationId: string): Promise<string> {
  const rows = await s.h.deps.db.query<{ slug: string }>('SELECT slug FROM organizations WHERE id = $1', [organizationId]);
  return rows[0]!.slug;
}

describe('operator page: the key', () => {
  it('shows the 401 the API gives for a wrong key in words; the right key unlocks, stays out of storage and the URL, and Lock forgets it', async () => {
    const { page } = await s.newPage();
    await unlock(page, 'not-the-operator-key-0123456789');
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/^Those credentials were not accepted\./);
    expect(await page.getByRole('alert').getAttribute('data-code')).toBe('UNAUTHORIZED');
    expect(await page.getByRole('alert').textContent()).not.toContain('UNAUTHORIZED');
    expect(await page.getByRole('button', { name: 'Lock', exact: true }).count()).toBe(0);

    await page.getByLabel('Operator key').fill(s.h.config.adminApiKey);
    await page.getByRole('button', { name: 'Unlock' }).click();
    await page.getByRole('heading', { name: 'Find an organization' }).waitFor();
    const storage = await page.evaluate(() => ({ local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie }));
    expect(storage).toEqual({ local: {}, session: {}, cookie: '' });
    expect(page.url()).toBe(`${s.baseUrl}/console/operator`);
    expect(await page.content()).not.toContain(s.h.config.adminApiKey);

    await page.getByRole('button', { name: 'Lock', exact: true }).click();
    await page.getByLabel('Operator key').waitFor();
    expect(await page.getByLabel('Operator key').inputValue()).toBe('');
    // A reload forgets it too: the page asks again.
    await unlocked(page);
    await page.reload();
    await page.getByLabel('Operator key').waitFor();
  });
});

describe('operator page: an organization', () => {
  it('finds the organization by its slug, grants credits with a reason and changes the tier; the customer sees both and the audit has the grant', async () => {
    // The customer, in their own browser context.
    const customer = await s.newPage();
    const email = await signUpInBrowser(customer.page);
    const orgId = await createOrganizationInBrowser(customer.page, 'Granted Org');
    await expect.poll(() => cardValue(customer.page, 'purchased')).toBe('0');
    const header = customer.page.locator('.page-header');
    await header.getByText('tier sandbox', { exact: true }).waitFor();

    // The operator, in another.
    const { page } = await s.newPage();
    await unlocked(page);
    await openOrganization(page, await slugOf(orgId), 'Granted Org');
    const detail = page.getByTestId('organization-detail');
    await expect.poll(() => detail.getByTestId('deployment-tier').textContent()).toBe('sandbox');
    const deploymentId = (await s.h.deps.db.query<{ id: string }>('SELECT id FROM deployments WHERE organization_id = $1', [orgId]))[0]!.id;

    // The reason is required: without it the browser does not send the grant.
    await detail.getByLabel('Amount').fill('500');
    await detail.getByRole('button', { name: 'Apply credits' }).click();
    expect(await detail.getByLabel('Reason').evaluate((el) => (el as HTMLInputElement).validity.valueMissing)).toBe(true);
    const ledger = () => s.h.deps.db.query("SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind = 'grant'", [deploymentId]);
    expect(await ledger()).toEqual([]);

    const reason = `Goodwill ${unique('grant')}`;
    await detail.getByLabel('Reason').fill(reason);
    await detail.getByRole('button', { name: 'Apply credits' }).click();
    await expect.poll(() => detail.getByRole('status').first().textContent()).toMatch(/Granted 500 credits: purchased credits of .* are now 500\./);
    await expect.poll(() => detail.getByTestId('deployment-purchased').textContent()).toBe('500');
    expect(await detail.getByLabel('Reason').inputValue()).toBe('');

    // The customer's overview, reloaded: the purchased credits grew by 500.
    await customer.page.reload();
    await expect.poll(() => cardValue(customer.page, 'purchased')).toBe('500');

    // The owner's audit log has the operator's grant, with its amount and reason.
    const login = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email, password: PASSWORD } });
    expect(login.statusCode, login.body).toBe(200);
    const token = (login.json().data as { access_token: string }).access_token;
    const audit = await s.h.request({ method: 'GET', url: `/organizations/${orgId}/audit-logs?action=grant_credits`, headers: bearer(token) });
    expect(audit.statusCode, audit.body).toBe(200);
    expect(audit.json().data).toEqual([
      expect.objectContaining({
        actor: 'operator',
        action: 'grant_credits',
        resource_type: 'deployment',
        resource_id: deploymentId,
        metadata: { amount: 500, reason },
      }),
    ]);

    // The tier: sandbox → growth, in the operator's view at once and on the customer's overview after a reload.
    await detail.getByLabel(/^Tier/).selectOption('growth');
    await detail.getByRole('button', { name: 'Save tier and status' }).click();
    await expect.poll(() => detail.getByTestId('deployment-tier').textContent()).toBe('growth');
    await detail.getByText(/is now growth, active\./).waitFor();
    await expect.poll(() => page.getByTestId('organization-results').getByRole('cell', { name: 'growth' }).count()).toBe(1);
    await customer.page.reload();
    await header.getByText('tier growth', { exact: true }).waitFor();
    await expect.poll(() => cardValue(customer.page, 'monthly')).toBe('0 / 20,000');
  });

  it('sets overrides with an expiry and clears them; sets the plan; shows the API’s refusal with its code', async () => {
    const customer = await s.newPage();
    await signUpInBrowser(customer.page);
    const orgId = await createOrganizationInBrowser(customer.page, 'Override Org');
    const deploymentId = (await s.h.deps.db.query<{ id: string }>('SELECT id FROM deployments WHERE organization_id = $1', [orgId]))[0]!.id;
    const view = async () => (await s.h.request({ method: 'GET', url: `/api/v1/admin/deployments/${deploymentId}`, headers: adminHeaders(s.h) })).json();

    const { page } = await s.newPage();
    await unlocked(page);
    // By the deployment id this time.
    await openOrganization(page, deploymentId, 'Override Org');
    const detail = page.getByTestId('organization-detail');

    const expiry = new Date(Date.now() + 30 * DAY);
    expiry.setUTCMilliseconds(0);
    await detail.getByLabel('Monthly credits').fill('750');
    await detail.getByLabel('Overrides expire at (UTC, optional)').fill(expiry.toISOString().slice(0, 19));
    await detail.getByRole('button', { name: 'Set overrides' }).click();
    await detail.getByText(/Overrides of .*: 750 credits a period until/).waitFor();
    expect((await view()).overrides).toEqual({ monthly_credits: 750, api_rate_limit: null, ai_tokens_limit: null, expires_at: expiry.toISOString() });
    await customer.page.reload();
    await expect.poll(() => cardValue(customer.page, 'monthly')).toBe('0 / 750');

    // A refusal comes back in words, naming the field the API names (the code stays out of the text).
    await detail.getByLabel('Amount').fill('-1');
    await detail.getByLabel('Reason').fill('take one');
    await detail.getByRole('button', { name: 'Apply credits' }).click();
    await expect.poll(() => detail.getByRole('alert').textContent()).toMatch(/^Some of what was entered is not valid\..*amount/);
    expect(await detail.getByRole('alert').getAttribute('data-code')).toBe('INVALID_REQUEST');

    await detail.getByRole('button', { name: 'Clear overrides' }).click();
    await detail.getByRole('button', { name: 'Clear every override' }).click();
    await detail.getByText(/cleared: the tier applies/).waitFor();
    expect((await view()).overrides).toEqual({ monthly_credits: null, api_rate_limit: null, ai_tokens_limit: null, expires_at: null });
    expect(await detail.getByLabel('Monthly credits').inputValue()).toBe('');

    await detail.getByLabel('Organization plan').selectOption('pro');
    await detail.getByRole('button', { name: 'Set plan' }).click();
    await detail.getByText('The plan of Override Org is now pro.').waitFor();
    const plan = await s.h.deps.db.query<{ plan: string }>('SELECT plan FROM organizations WHERE id = $1', [orgId]);
    expect(plan).toEqual([{ plan: 'pro' }]);
    await expect.poll(() => page.getByTestId('organization-results').getByRole('cell', { name: 'pro', exact: true }).count()).toBe(1);
  });
});

describe('operator page: costs and tool mappings', () => {
  it('lists the cost table, sets a cost, maps a tool to it and unmaps it', async () => {
    const { page } = await s.newPage();
    await unlocked(page);
    await page.getByRole('button', { name: 'Costs and tools' }).click();
    const costs = page.getByTestId('credit-costs');
    await costs.getByTestId('cost-platform_basic').waitFor();

    const action = unique('console-cost').toLowerCase();
    await page.getByLabel(/^Action/).fill(action);
    await page.getByLabel('Credits').fill('7');
    await page.getByLabel('Description').fill('seven, from the console');
    await page.getByRole('button', { name: 'Set cost' }).click();
    await page.getByText(`${action} now costs 7 credits.`).waitFor();
    await expect.poll(() => costs.getByTestId(`cost-${action}`).textContent()).toContain('seven, from the console');

    const tool = `${unique('console-tool')}/search`;
    await page.getByLabel('Tool name').fill(tool);
    await page.getByLabel('Metered as action').selectOption(action);
    await page.getByRole('button', { name: 'Map tool' }).click();
    await page.getByText(`${tool} is now metered as ${action}.`).waitFor();
    const row = page.getByTestId(`tool-${tool}`);
    await expect.poll(() => row.textContent()).toContain(action);
    const mapped = await s.h.deps.db.query('SELECT action FROM tool_actions WHERE tool_name = $1', [tool]);
    expect(mapped).toEqual([{ action }]);

    // A cost change shows in the mapping's credits column too.
    await costs.getByRole('button', { name: `Edit ${action}` }).click();
    expect(await page.getByLabel('Credits').inputValue()).toBe('7');
    await page.getByLabel('Credits').fill('9');
    await page.getByRole('button', { name: 'Set cost' }).click();
    await page.getByText(`${action} now costs 9 credits.`).waitFor();
    await expect.poll(() => row.getByRole('cell').nth(2).textContent()).toBe('9');

    await row.getByRole('button', { name: 'Unmap' }).click();
    await row.getByRole('button', { name: `Unmap ${tool}` }).click();
    await page.getByText(`${tool} is unmapped: it is metered as platform_basic.`).waitFor();
    await expect.poll(() => row.count()).toBe(0);
    expect(await s.h.deps.db.query('SELECT action FROM tool_actions WHERE tool_name = $1', [tool])).toEqual([]);
  });
});
