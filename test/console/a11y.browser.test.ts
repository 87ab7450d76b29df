import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, serviceHeaders, signUpWithOrganization } from '../harness.js';
import { audit, visit } from './axe.js';
import { type ConsoleService, orgPagePaths, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

/**
 * An accessibility check of every console page with axe-core (docs/console.md, Tests): no serious or critical
 * violation of WCAG 2.x A/AA rules, in the light theme at a desktop width (layout.browser.test.ts audits
 * the phone width and the dark theme). The context bypasses the page's CSP only so that axe's script can
 * be injected; the pages are otherwise exactly as served. After the first page of each context, the
 * pages are reached in the console (axe.ts, visit).
 */
let s: ConsoleService;
beforeAll(async () => {
  s = await startConsoleService();
});
afterAll(async () => {
  await s?.close();
});

/**
 * Twenty-two page audits, each a full axe run: longer than the suite's 30 s per test in one CI run
 * (Node 24, loaded machine, each audit a page load then), so this test has a bound of its own.
 */
const AUDIT_ALL_PAGES_TIMEOUT_MS = 180_000;

describe('console accessibility (axe-core)', () => {
  it('every page has no serious or critical violation', { timeout: AUDIT_ALL_PAGES_TIMEOUT_MS }, async () => {
    const owner = await signUpWithOrganization(s.h);
    const bearer = { authorization: `Bearer ${owner.accessToken}` };
    // Data on every page: usage by two tools and an end user, a key, an invitation, a webhook.
    await s.h.request({ method: 'POST', url: `/api/v1/admin/deployments/${owner.deploymentId}/credits`, headers: adminHeaders(s.h), payload: { amount: 100, reason: 'a11y' } });
    for (const tool of ['search_docs', 'summarize', 'search_docs']) {
      const res = await s.h.request({ method: 'POST', url: '/api/v1/mcp/usage', headers: serviceHeaders(s.h), payload: { deployment_id: owner.deploymentId, tool_name: tool, mcp_user_id: 'end-user-1' } });
      expect(res.statusCode, res.body).toBe(200);
    }
    await s.h.request({ method: 'POST', url: `/organizations/${owner.organizationId}/api-keys`, headers: bearer, payload: { name: 'ci key', scopes: ['read'] } });
    const invite = await s.h.request({ method: 'POST', url: `/organizations/${owner.organizationId}/users`, headers: bearer, payload: { email: 'a11y-invitee@example.com', role: 'viewer' } });
    const token = (invite.json() as { data: { token: string } }).data.token;

    const { page } = await s.newPage({ bypassCSP: true });
    const { context: anonymous, page: outside } = await s.newPage({ bypassCSP: true });
    const found: Record<string, unknown> = {};

    // Signed out: sign-in, sign-up, an invitation, the locked operator view.
    await anonymous.clearCookies();
    for (const path of ['/console/', '/console/signup', `/console/invitations/${token}`, '/console/operator']) {
      await visit(outside, path);
      found[path] = await audit(outside);
    }

    // Signed in as the owner: every organization page.
    await page.goto('/console/');
    await page.getByLabel('Email').fill(owner.email);
    await page.getByLabel('Password').fill(owner.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/console\/orgs\//);
    for (const path of orgPagePaths(owner.organizationId)) {
      await visit(page, path);
      found[path] = await audit(page);
    }
    // The overview's chart as a table.
    await visit(page, orgPagePaths(owner.organizationId)[0]!);
    await page.locator('[data-testid="usage-chart"][data-rendered="true"]').waitFor();
    await page.getByText('Show as a table').click();
    await page.getByRole('columnheader', { name: 'summarize' }).waitFor();
    found['overview, table shown'] = await audit(page);

    // The operator view, unlocked.
    await outside.goto('/console/operator');
    await outside.getByLabel('Operator key').fill(s.h.config.adminApiKey);
    await outside.getByRole('button', { name: /unlock|open|sign in/i }).click();
    await outside.getByLabel('Operator key').waitFor({ state: 'detached' });
    found['/console/operator (unlocked)'] = await audit(outside);
    await outside.getByLabel('Search').fill(owner.email);
    await outside.getByRole('button', { name: 'Search', exact: true }).click();
    await outside.getByTestId('organization-results').getByRole('button').first().click();
    await outside.getByRole('heading', { name: 'Deployments' }).waitFor();
    found['/console/operator (an organization open)'] = await audit(outside);
    await outside.getByRole('button', { name: 'Costs and tools' }).click();
    await outside.getByRole('heading', { name: /cost/i }).first().waitFor();
    found['/console/operator (costs and tools)'] = await audit(outside);
    await outside.getByRole('button', { name: 'Mailbox' }).click();
    await outside.getByRole('heading', { name: /mailbox/i }).first().waitFor();
    found['/console/operator (mailbox)'] = await audit(outside);

    const failing = Object.fromEntries(Object.entries(found).filter(([, v]) => (v as unknown[]).length > 0));
    expect(failing).toEqual({});
  });
});
