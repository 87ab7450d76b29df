import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, json, setTierOverHttp, signUpAsMember, signUpWithOrganization } from '../harness.js';
import { type ConsoleService, createOrganizationInBrowser, PASSWORD, signUpInBrowser, signInInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});


type ApiKey = { id: string; name: string; scopes: string[]; expires_at: string | null; revoked_at: string | null };

describe('console API keys page', () => {
  it('creates a key shown once, the key meters usage the overview shows, and revoking it in the console makes the API refuse it', async () => {
    const { context, page } = await s.newPage();
    await context.grantPermissions(['clipboard-read', 'clipboard-write']);
    const email = await signUpInBrowser(page);
    const orgId = await createOrganizationInBrowser(page);

    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'API keys' }).click();
    await page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor();
    await page.getByText('No API keys yet.').waitFor();

    // An owner is offered every scope, admin included; the expiry is a day, through which the key works (UTC).
    await page.getByLabel('Name').fill('CI deploys');
    await page.getByRole('checkbox', { name: /^write/ }).check();
    expect(await page.getByRole('checkbox', { name: /^read/ }).isChecked()).toBe(true);
    expect(await page.getByRole('checkbox', { name: /^admin/ }).isChecked()).toBe(false);
    const day = new Date(s.h.clock.now().getTime() + 30 * 86_400_000).toISOString().slice(0, 10);
    await page.getByLabel('Expires on (optional)').fill(day);
    await page.getByRole('button', { name: 'Create key' }).click();

    const shown = page.getByTestId('secret-value');
    await shown.waitFor();
    const key = (await shown.textContent()) ?? '';
    expect(key).toMatch(/^cg_[0-9A-Za-z]+$/);
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByRole('button', { name: 'Copied' }).waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(key);

    // The server holds what the form sent: the scopes, and the end of the chosen day as the expiry.
    const listed = json<{ data: ApiKey[] }>(await s.h.request({ method: 'GET', url: `/organizations/${orgId}/api-keys`, headers: { 'x-api-key': key } })).data;
    expect(listed).toEqual([
      expect.objectContaining({ name: 'CI deploys', scopes: ['read', 'write'], expires_at: new Date(Date.parse(`${day}T00:00:00Z`) + 86_400_000).toISOString(), revoked_at: null }),
    ]);

    // "Done" and the key is gone: not on the page, not in the address, not in any web storage.
    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('button', { name: 'Create key' }).waitFor();
    const row = page.getByRole('row', { name: /CI deploys/ });
    await row.waitFor();
    expect(await row.textContent()).toContain(key.slice(0, 10));
    expect(await page.content()).not.toContain(key);
    expect(page.url()).not.toContain(key);
    const storage = await page.evaluate(() => JSON.stringify({ local: { ...localStorage }, session: { ...sessionStorage }, cookie: document.cookie }));
    expect(storage).toBe(JSON.stringify({ local: {}, session: {}, cookie: '' }));
    await page.evaluate(() => navigator.clipboard.writeText(''));

    // Metering with the key: a sandbox deployment meters nothing, so the operator moves it to launch (2,000 credits a month).
    const deployments = json<{ data: Array<{ id: string }> }>(
      await s.h.request({ method: 'GET', url: `/organizations/${orgId}/deployments`, headers: { 'x-api-key': key } }),
    ).data;
    await setTierOverHttp(s.h, deployments[0]!.id, 'launch');
    let credits = 0;
    for (const tool of ['rag_query', 'rag_query', 'summarize']) {
      const res = await s.h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key), payload: { tool_name: tool } });
      expect(res.statusCode, res.body).toBe(200);
      const body = json<{ success: boolean; credits_used: number }>(res);
      expect(body.success).toBe(true);
      credits += body.credits_used;
    }
    expect(credits).toBeGreaterThan(0);
    // The summary's range ends at the service's now, exclusive; its clock stands still in tests.
    s.h.clock.advance(1000);

    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Overview' }).click();
    await expect.poll(() => page.getByTestId('calls-total').textContent()).toBe('3');
    expect(await page.getByTestId('credits-total').textContent()).toBe(String(credits));
    // The chart drew them, stacked by tool: its canvas is rendered, and its table's last day (today, UTC)
    // has a column per tool whose values add up to the credits charged.
    await page.locator('[data-testid="usage-chart"][data-rendered="true"] canvas').waitFor();
    await page.getByText('Show as a table').click();
    const columns = await page.locator('details table thead th').allTextContents();
    expect(columns.slice(1).sort()).toEqual(['rag_query', 'summarize']);
    const today = await page.locator('details table tbody tr').last().locator('td').allTextContents();
    expect(today.map(Number).reduce((a, b) => a + b, 0)).toBe(credits);
    await expect.poll(() => page.getByTestId('top-tools').getByRole('row', { name: /rag_query/ }).textContent()).toMatch(/rag_query2/);

    // Revoke in the console (two steps), then the API refuses the key.
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'API keys' }).click();
    await row.getByRole('button', { name: 'Revoke' }).click();
    await row.getByRole('button', { name: 'Revoke "CI deploys" now' }).click();
    await expect.poll(() => row.textContent()).toMatch(/Revoked/);
    expect(await row.getByRole('button').count()).toBe(0);
    const refused = await s.h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key), payload: { tool_name: 'rag_query' } });
    expect(refused.statusCode).toBe(401);

    // The page was not lying: the server has the key revoked.
    const login = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email, password: PASSWORD } });
    const token = json<{ data: { access_token: string } }>(login).data.access_token;
    const after = json<{ data: ApiKey[] }>(await s.h.request({ method: 'GET', url: `/organizations/${orgId}/api-keys`, headers: bearer(token) })).data;
    expect(after[0]?.revoked_at).not.toBeNull();
  });

  it('pages the key list by cursor with "Load more", and keeps the loaded pages when a key on a later page is revoked', async () => {
    const owner = await signUpWithOrganization(s.h);
    // A second apart: the list is newest first, and the service's clock stands still in tests.
    for (let i = 1; i <= 21; i++) {
      await createKeyOverHttp(s.h, bearer(owner.accessToken), owner.organizationId, { name: `key ${i}` });
      s.h.clock.advance(1000);
    }
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'API keys' }).click();
    const rows = page.getByRole('table').getByRole('row');
    await page.getByRole('row', { name: /key 21/ }).waitFor();
    expect(await rows.count()).toBe(1 + 20);
    expect(await page.getByRole('row', { name: /key 1\b/ }).count()).toBe(0); // the oldest is on the second page
    await page.getByText('20 keys shown', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Load more' }).click();
    const oldest = page.getByRole('row', { name: /key 1\b/ });
    await oldest.waitFor();
    expect(await rows.count()).toBe(1 + 21);
    await page.getByText('21 keys shown (all)').waitFor();
    expect(await page.getByRole('button', { name: 'Load more' }).count()).toBe(0);

    await oldest.getByRole('button', { name: 'Revoke' }).click();
    await oldest.getByRole('button', { name: 'Revoke "key 1" now' }).click();
    await expect.poll(() => oldest.textContent()).toMatch(/Revoked/);
    expect(await rows.count()).toBe(1 + 21);
  });

  it("the deployments page shows each deployment's entitlements and rotates its secret, shown once", async () => {
    const owner = await signUpWithOrganization(s.h);
    await setTierOverHttp(s.h, owner.deploymentId, 'launch');
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Deployments' }).click();

    const card = page.getByTestId(`deployment-${owner.deploymentId}`);
    const flags = card.getByTestId('flags');
    await flags.waitFor();
    expect(await flags.getByRole('listitem').allTextContents()).toEqual([
      'MCP metering: on',
      'AI proxy: on',
      'Billing: on',
      'Custom domain: on',
      'White label: off',
    ]);
    const limits = card.getByTestId('limits');
    expect(await limits.getByRole('row', { name: /AI tokens per period/ }).getByRole('cell').textContent()).toBe('10,000');
    expect(await limits.getByRole('row', { name: /API requests per minute/ }).getByRole('cell').textContent()).toBe('2,000');
    expect(await card.getByRole('heading', { level: 2 }).textContent()).toMatch(/launch.*active.*primary/);

    await card.getByRole('button', { name: 'Rotate secret' }).click();
    await card.getByRole('button', { name: 'Rotate now: the old secret stops working at once' }).click();
    const secret = (await card.getByTestId('secret-value').textContent()) ?? '';
    expect(secret).toMatch(/^cgds_/);
    const check = (deploymentSecret: string) =>
      s.h.request({ method: 'POST', url: '/api/v1/entitlements/check', payload: { deployment_id: owner.deploymentId, deployment_secret: deploymentSecret } });
    expect((await check(owner.deploymentSecret)).statusCode).toBe(401);
    expect((await check(secret)).statusCode).toBe(200);

    await card.getByRole('button', { name: 'Done' }).click();
    await card.getByRole('button', { name: 'Rotate secret' }).waitFor();
    expect(await card.textContent()).toContain(secret.slice(0, 10));
    expect(await page.content()).not.toContain(secret);
  });

  it("a viewer sees no create, revoke, rotate, invite, role or remove controls, and the server refuses the viewer's forged write", async () => {
    const owner = await signUpWithOrganization(s.h);
    const org = owner.organizationId;
    await createKeyOverHttp(s.h, bearer(owner.accessToken), org, { name: 'owner key', scopes: ['read', 'write'] });
    const viewer = await signUpAsMember(s.h, org, 'viewer');

    const { page } = await s.newPage();
    await signInInBrowser(page, viewer);
    await page.waitForURL(`**/console/orgs/${org}`);
    const nav = page.getByRole('navigation', { name: 'Organization' });
    await nav.getByText('Signed in as viewer', { exact: false }).waitFor();

    await nav.getByRole('link', { name: 'API keys' }).click();
    await page.getByRole('row', { name: /owner key/ }).waitFor();
    expect(await page.getByRole('heading', { name: 'Create a key' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Create key' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Revoke' }).count()).toBe(0);
    expect(await page.getByRole('columnheader', { name: 'Actions' }).count()).toBe(0);

    await nav.getByRole('link', { name: 'Deployments' }).click();
    const deployment = page.getByTestId(`deployment-${owner.deploymentId}`);
    await deployment.getByTestId('flags').waitFor();
    expect(await deployment.getByText(owner.deploymentSecret.slice(0, 10), { exact: false }).count()).toBe(1);
    expect(await page.getByRole('button', { name: 'Rotate secret' }).count()).toBe(0);

    await nav.getByRole('link', { name: 'Members' }).click();
    await page.getByTestId(`member-${owner.email}`).waitFor();
    await page.getByText('No pending invitations.').waitFor();
    expect(await page.getByRole('button', { name: 'Invite' }).count()).toBe(0);
    expect(await page.getByLabel('Email to invite').count()).toBe(0);
    expect(await page.getByRole('combobox', { name: /Role of/ }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Change role' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Remove' }).count()).toBe(0);
    // The viewer's own row offers leaving, nothing else.
    expect(await page.getByTestId(`member-${viewer.email}`).getByRole('button').allTextContents()).toEqual(['Leave']);

    // The console's token is in its module's memory; the viewer signs in through the API instead and forges the write
    // from the console's own page: the server decides, whatever the UI shows.
    const login = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email: viewer.email, password: viewer.password } });
    const token = json<{ data: { access_token: string } }>(login).data.access_token;
    const forged = await page.evaluate(
      async ({ url, token }) => {
        const res = await fetch(url, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'forged', scopes: ['read'] }),
        });
        return { status: res.status, body: await res.json() };
      },
      { url: `/organizations/${org}/api-keys`, token },
    );
    expect(forged).toMatchObject({ status: 403, body: { success: false, error: { code: 'FORBIDDEN' } } });
    const keys = json<{ data: ApiKey[] }>(await s.h.request({ method: 'GET', url: `/organizations/${org}/api-keys`, headers: bearer(owner.accessToken) })).data;
    expect(keys.map((k) => k.name)).toEqual(['owner key']);
  });
});
