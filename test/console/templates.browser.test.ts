import { randomBytes } from 'node:crypto';
import type { Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WORKERS } from '../../src/workers/catalog.js';
import { type DnsStandIn, startDnsStandIn } from '../dns-stand-in.js';
import { setTierOverHttp, signUpAsMember, signUpWithOrganization, unique } from '../harness.js';
import { type ProvisionerStandIn, startProvisioner } from '../provisioner-stand-in.js';
import { slugOf, templateFixtures } from '../template-fixtures.js';
import { audit } from './axe.js';
import { browserTimeouts, type ConsoleService, signInInBrowser, startConsoleService } from './browser.js';

browserTimeouts();

/**
 * The template deployments page (docs/templates.md): an owner deploys a template and follows its
 * status as the worker provisions it (run by hand here); a custom domain's DNS challenge is shown and
 * verified once the TXT record is published (a DNS stand-in); a deployment whose provisioner keeps
 * failing shows its error and is retried from the page; a member sees the deployments without controls.
 */
const SECRET = `whsec_${randomBytes(32).toString('base64')}`;
let s: ConsoleService;
let provisioner: ProvisionerStandIn;
let dns: DnsStandIn;
const f = templateFixtures(() => s.h);
const orgs: string[] = [];

beforeAll(async () => {
  provisioner = await startProvisioner(SECRET);
  dns = await startDnsStandIn();
  s = await startConsoleService({
    webhookAllowPrivateNetworks: true,
    webhookAttemptTimeoutMs: 2000,
    templateProvisionerUrl: `${provisioner.url}/provision`,
    templateProvisionerSecret: SECRET,
    dnsServers: [dns.server],
    dnsTimeoutMs: 1000,
  });
});
afterAll(async () => {
  // Nothing of this file stays due for another suite's worker.
  await s?.h.deps.db.query(
    `UPDATE template_deployments SET status = 'failed', next_attempt_at = NULL, leased_until = NULL
     WHERE status IN ('pending', 'deploying') AND organization_id = ANY($1::uuid[])`,
    [orgs],
  );
  await s?.close();
  await Promise.all([provisioner?.close(), dns?.close()]);
});

const worker = WORKERS.find((w) => w.name === 'template-provisioning')!;
const HOUR = 3_600_000;

const statusOf = async (id: string) =>
  (await s.h.deps.db.query<{ status: string; attempts: number }>('SELECT status, attempts FROM template_deployments WHERE id = $1', [id]))[0]!;

/** Worker passes, the clock moved past each backoff, until the deployment reaches `status` (bounded). */
async function provisionUntil(id: string, status: string): Promise<void> {
  for (let pass = 0; pass < 12 && (await statusOf(id)).status !== status; pass++) {
    await worker.run(s.h.deps);
    if ((await statusOf(id)).status !== status) s.h.clock.advance(2 * HOUR);
  }
  expect((await statusOf(id)).status).toBe(status);
}

const rowOf = (page: Page, name: string): Locator => page.getByTestId('template-deployments').getByRole('row', { name: new RegExp(`^${name}`) });
const statusCell = (row: Locator) => row.getByTestId('td-status');

async function refreshUntil(page: Page, row: Locator, status: string): Promise<void> {
  await page.getByRole('button', { name: 'Refresh' }).click();
  await expect.poll(() => statusCell(row).getAttribute('data-status')).toBe(status);
}

describe('console template deployments page', () => {
  it('deploys a template and shows its status, verifies its custom domain, retries a failed one; a member only reads', async () => {
    const template = await f.createTemplate({ name: 'Blog starter', description: 'A blog with comments' });
    const owner = await signUpWithOrganization(s.h);
    orgs.push(owner.organizationId);
    // The launch tier has the custom_domain flag.
    await setTierOverHttp(s.h, owner.deploymentId, 'launch');
    const { page } = await s.newPage({ bypassCSP: true });
    await signInInBrowser(page, owner);
    await page.goto(`/console/orgs/${owner.organizationId}/templates`);
    await page.getByRole('heading', { name: 'Template deployments', level: 1 }).waitFor();
    await page.getByText('No template deployments yet.').waitFor();

    // Deploy with a custom domain: pending, with the DNS challenge to publish.
    const subdomain = slugOf('blog');
    const domain = `${slugOf('www')}.example.com`;
    await page.getByRole('button', { name: 'Deploy a template' }).click();
    await page.getByLabel('Template', { exact: true }).selectOption({ label: 'Blog starter' });
    await page.getByText('A blog with comments').waitFor();
    await page.getByLabel('Name', { exact: true }).fill('Team blog');
    await page.getByLabel('Subdomain').fill(subdomain);
    await page.getByLabel('Custom domain (optional)').fill(domain);
    await page.getByLabel('Configuration (optional)').fill('{"theme": "dark"}');
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    await expect.poll(() => page.getByTestId('td-notice').textContent()).toBe('Team blog is created and waits for the provisioner.');
    const blog = rowOf(page, 'Team blog');
    expect(await statusCell(blog).getAttribute('data-status')).toBe('pending');
    expect(await blog.getByRole('rowheader').textContent()).toBe('Team blogfrom Blog starter');
    const domainCell = blog.getByTestId('td-domain');
    expect(await domainCell.getAttribute('data-domain-status')).toBe('pending_verification');
    const challenge = await domainCell.getByTestId('td-challenge').locator('dd').allTextContents();
    expect(challenge[0]).toBe('TXT');
    expect(challenge[1]).toBe(`_creditgate-challenge.${domain}`);
    expect(challenge[2]).toMatch(/^creditgate-verify=[A-Za-z0-9]{32}$/);
    const [created] = (await s.h.deps.db.query<{ id: string; config: Record<string, unknown> }>('SELECT id, config FROM template_deployments WHERE organization_id = $1', [owner.organizationId]));
    expect(created!.config).toEqual({ theme: 'dark' });

    // The worker provisions it: active, with its address.
    await provisionUntil(created!.id, 'active');
    await refreshUntil(page, blog, 'active');
    expect(await blog.getByRole('link', { name: `https://${subdomain}.localhost` }).count()).toBe(1);

    // Verify before the record is published: not yet, in words. Then published: verified.
    await blog.getByRole('button', { name: 'Verify domain' }).click();
    await expect.poll(() => page.getByTestId('td-notice').textContent()).toMatch(new RegExp(`^${domain.replace(/\./g, '\\.')} is not verified yet: no TXT record at _creditgate-challenge\\.`));
    expect(await page.getByTestId('td-notice').getAttribute('data-tone')).toBe('failure');
    dns.set(`_creditgate-challenge.${domain}`, { txt: [[challenge[2]!]] });
    await blog.getByRole('button', { name: 'Verify domain' }).click();
    await expect.poll(() => page.getByTestId('td-notice').textContent()).toMatch(new RegExp(`^${domain.replace(/\./g, '\\.')} is verified`));
    await expect.poll(() => domainCell.getAttribute('data-domain-status')).toBe('verified');
    expect(await blog.getByRole('button', { name: 'Verify domain' }).count()).toBe(0);
    // A verified domain is provisioned again (active → deploying).
    expect(await statusCell(blog).getAttribute('data-status')).toBe('deploying');

    // A deployment whose provisioner keeps answering 503: failed after 5 attempts, shown with its error.
    // The worker's passes moved the service's clock by hours: the sign-up's access token has expired.
    const login = await s.h.request({ method: 'POST', url: '/auth/login', payload: { email: owner.email, password: owner.password } });
    expect(login.statusCode, login.body).toBe(200);
    const token = (login.json() as { data: { access_token: string } }).data.access_token;
    const failing = await f.createDeployment(token, owner.organizationId, template.id, { name: 'Shop', subdomain: slugOf('shop') });
    provisioner.plan(failing.id, { status: 503 });
    await provisionUntil(failing.id, 'failed');
    const shop = rowOf(page, 'Shop');
    await refreshUntil(page, shop, 'failed');
    const lastError = (await s.h.deps.db.query<{ last_error: string }>('SELECT last_error FROM template_deployments WHERE id = $1', [failing.id]))[0]!.last_error;
    expect(lastError).toMatch(/503/);
    expect(await statusCell(shop).textContent()).toBe(`failedFailed after 5 attempts: ${lastError}.`);
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'dark' });
    expect(await audit(page)).toEqual([]);
    await page.emulateMedia({ colorScheme: 'light' });
    // No sideways scrolling on a phone (docs/console.md "Layout").
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await page.setViewportSize({ width: 1280, height: 860 });

    // Retry: a fresh round; this time the provisioner answers with the address.
    provisioner.plan(failing.id, { status: 200, body: { deployment_url: 'https://shop.example.test/' } });
    await shop.getByRole('button', { name: 'Retry' }).click();
    await expect.poll(() => page.getByTestId('td-notice').textContent()).toBe('Shop is being provisioned again (a fresh round of 5 attempts).');
    expect(await statusCell(shop).getAttribute('data-status')).toBe('deploying');
    expect(await shop.getByRole('button', { name: 'Retry' }).count()).toBe(0);
    await provisionUntil(failing.id, 'active');
    await refreshUntil(page, shop, 'active');
    expect(await shop.getByRole('link', { name: 'https://shop.example.test/' }).count()).toBe(1);

    // A member sees both, with no control to change them.
    const member = await signUpAsMember(s.h, owner.organizationId, 'member');
    const { page: memberPage } = await s.newPage();
    await signInInBrowser(memberPage, member);
    await memberPage.goto(`/console/orgs/${owner.organizationId}/templates`);
    await expect.poll(() => memberPage.getByTestId('template-deployments').locator('tbody tr').count()).toBe(2);
    expect(await memberPage.getByRole('button', { name: 'Deploy a template' }).count()).toBe(0);
    expect(await memberPage.getByRole('button', { name: /Retry|Delete|Verify domain/ }).count()).toBe(0);

    // Delete asks once more; the subdomain is free again.
    await shop.getByRole('button', { name: 'Delete' }).click();
    await shop.getByRole('button', { name: 'Delete deployment' }).click();
    await expect.poll(() => page.getByTestId('td-notice').textContent()).toBe('Shop is deleted; its subdomain is free again.');
    await expect.poll(() => page.getByTestId('template-deployments').locator('tbody tr').count()).toBe(1);
    expect((await s.h.deps.db.query('SELECT 1 FROM template_deployments WHERE id = $1', [failing.id])).length).toBe(0);
  });

  it("shows the API's refusal beside the field it names", async () => {
    await f.createTemplate({ name: `Docs ${unique('t')}` });
    const owner = await signUpWithOrganization(s.h);
    orgs.push(owner.organizationId);
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.goto(`/console/orgs/${owner.organizationId}/templates`);
    await page.getByRole('button', { name: 'Deploy a template' }).click();
    await page.getByLabel('Template', { exact: true }).selectOption({ index: 1 });
    await page.getByLabel('Name', { exact: true }).fill('Reserved');
    // "admin" is a reserved subdomain: 400 on subdomain.
    await page.getByLabel('Subdomain').fill('admin');
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    const field = page.getByLabel('Subdomain');
    await expect.poll(() => field.getAttribute('aria-invalid')).toBe('true');
    const errorId = ((await field.getAttribute('aria-describedby')) ?? '').split(' ').find((id) => id.endsWith('-error'));
    expect(await page.locator(`[id="${errorId}"]`).textContent()).toMatch(/\S/);
    // A configuration that is not a JSON object is refused in the page, beside its field.
    await page.getByLabel('Subdomain').fill(slugOf('ok'));
    await page.getByLabel('Configuration (optional)').fill('[1, 2]');
    await page.getByRole('button', { name: 'Deploy', exact: true }).click();
    await expect.poll(() => page.getByLabel('Configuration (optional)').getAttribute('aria-invalid')).toBe('true');
    expect(await page.getByText('must be a JSON object').count()).toBe(1);
    expect((await s.h.deps.db.query('SELECT 1 FROM template_deployments WHERE organization_id = $1', [owner.organizationId])).length).toBe(0);
  });
});
