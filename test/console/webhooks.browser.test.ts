import type { Page } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliverDue, EVENT_TYPES } from '../../src/modules/webhooks/organization.js';
import { bearer, json, signUpAsMember, signUpWithOrganization } from '../harness.js';
import { type Receiver, startReceiver } from '../receiver.js';
import { type ConsoleService, signInInBrowser, startConsoleService, browserTimeouts } from './browser.js';

browserTimeouts();

let s: ConsoleService;
let rx: Receiver;
beforeAll(async () => {
  s = await startConsoleService({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 2000 });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx?.close();
  await s?.close();
});


/** The service clock is fixed: move it a second before each action, so lists ordered by time have one order. */
const tick = () => s.h.clock.advance(1000);

type WebhookView = { id: string; url: string; events: string[]; is_active: boolean };
const cells = (page: Page, row: number) => page.getByTestId('deliveries').locator('tbody tr').nth(row).locator('td').allTextContents();

describe('console webhooks page', () => {
  it('creates a webhook (secret shown once), test-sends it, retries a failed test, edits, disables and deletes it; the audit log shows it', async () => {
    const owner = await signUpWithOrganization(s.h);
    const api = (method: 'GET', url: string) => s.h.request({ method, url, headers: bearer(owner.accessToken) });
    const hooksUrl = `/organizations/${owner.organizationId}/webhooks`;
    const { page } = await s.newPage();
    await signInInBrowser(page, owner);
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Webhooks' }).click();
    await page.getByRole('heading', { name: 'Webhooks', level: 1 }).waitFor();
    await page.getByText('No webhooks yet.').waitFor();

    // The events offered are the ones the API accepts.
    const offered = await page.getByRole('group', { name: 'Events' }).getByRole('checkbox').evaluateAll((boxes) =>
      boxes.map((b) => b.closest('label')?.querySelector('code')?.textContent),
    );
    expect(offered).toEqual([...EVENT_TYPES]);

    const url = `${rx.url}/console-hook`;
    await page.getByLabel('URL').fill(url);
    await page.getByRole('checkbox', { name: /api_key\.created/ }).check();
    await page.getByRole('checkbox', { name: /api_key\.revoked/ }).check();
    tick();
    await page.getByRole('button', { name: 'Create webhook' }).click();
    const shown = page.getByTestId('secret-value');
    await shown.waitFor();
    const secret = (await shown.textContent()) ?? '';
    expect(secret).toMatch(/^whsec_/);
    const [created] = json<{ data: WebhookView[] }>(await api('GET', hooksUrl)).data;
    expect(created).toMatchObject({ url, events: ['api_key.created', 'api_key.revoked'], is_active: true });
    await page.getByRole('button', { name: 'Done' }).click();
    await shown.waitFor({ state: 'detached' });
    expect(await page.content()).not.toContain(secret);

    // Test send: delivered, with the receiver's answer; the receiver verifies it with the secret shown.
    const row = page.getByTestId('webhooks').getByRole('row', { name: new RegExp(url) });
    rx.script({ status: 200, body: 'ok from receiver' });
    tick();
    await row.getByRole('button', { name: 'Test send' }).click();
    await expect.poll(() => page.getByRole('status').first().textContent()).toBe(`Test sent to ${url}: delivered, HTTP 200.`);
    await expect.poll(() => cells(page, 0)).toEqual([expect.any(String), 'webhook.test', 'delivered', '1', 'HTTP 200', 'ok from receiver', '—', '']);
    expect(rx.received).toHaveLength(1);
    const r = rx.received[0]!;
    const verified = new Webhook(secret).verify(r.body.toString(), {
      'webhook-id': String(r.headers['webhook-id']),
      'webhook-timestamp': String(r.headers['webhook-timestamp']),
      'webhook-signature': String(r.headers['webhook-signature']),
    });
    expect(verified).toMatchObject({ type: 'webhook.test', data: { organization_id: owner.organizationId, webhook_id: created!.id } });

    // The receiver fails: the test is recorded failed with its status and body, and offers a retry.
    rx.script({ status: 503, body: 'down for maintenance' });
    tick();
    await row.getByRole('button', { name: 'Test send' }).click();
    await expect.poll(() => page.getByTestId('webhook-notice').textContent()).toBe(`Test send failed: ${url} answered HTTP 503.`);
    expect(await page.getByTestId('webhook-notice').getAttribute('role')).toBe('alert');
    await expect.poll(() => cells(page, 0)).toEqual([expect.any(String), 'webhook.test', expect.stringMatching(/^failed/), '1', 'HTTP 503', 'down for maintenance', '—', 'Retry']);
    const failedId = (await page.getByTestId('deliveries').locator('tbody tr').first().getAttribute('data-delivery'))!;

    // It recovers; Retry queues the delivery, the worker sends it, Refresh shows it delivered.
    rx.script({ status: 200, body: 'back again' });
    await page.getByTestId('deliveries').locator('tbody tr').first().getByRole('button', { name: 'Retry' }).click();
    await expect.poll(() => cells(page, 0)).toEqual([expect.any(String), 'webhook.test', expect.stringMatching(/^pending/), '1', 'HTTP 503', 'down for maintenance', expect.any(String), 'Retry']);
    const statusOf = async () =>
      (await s.h.deps.db.query<{ status: string }>('SELECT status FROM webhook_deliveries WHERE id = $1', [failedId]))[0]!.status;
    // Worker passes (the database is shared with other suites, whose due rows may come first).
    for (let pass = 0; pass < 20 && (await statusOf()) === 'pending'; pass++) await deliverDue(s.h.deps, 100);
    expect(await statusOf()).toBe('delivered');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(() => cells(page, 0)).toEqual([expect.any(String), 'webhook.test', 'delivered', '2', 'HTTP 200', 'back again', '—', '']);
    expect(rx.received.filter((x) => x.headers['x-service-delivery'] === failedId)).toHaveLength(1);

    // Edit the events; disable it (no test send then); the server holds both.
    await row.getByRole('button', { name: 'Edit' }).click();
    await page.getByRole('heading', { name: `Edit ${url}` }).waitFor();
    await page.getByRole('region', { name: `Edit ${url}` }).getByRole('checkbox', { name: /api_key\.revoked/ }).uncheck();
    tick();
    await page.getByRole('button', { name: 'Save webhook' }).click();
    await expect.poll(async () => json<{ data: WebhookView }>(await api('GET', `${hooksUrl}/${created!.id}`)).data.events).toEqual(['api_key.created']);
    tick();
    await row.getByRole('button', { name: 'Disable' }).click();
    await expect.poll(() => row.getByRole('cell').nth(2).textContent()).toBe('Disabled');
    expect(await row.getByRole('button', { name: 'Test send' }).isDisabled()).toBe(true);
    expect(json<{ data: WebhookView }>(await api('GET', `${hooksUrl}/${created!.id}`)).data.is_active).toBe(false);

    // The audit log shows what was done here, by whom.
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Audit log' }).click();
    await page.getByRole('heading', { name: 'Audit log', level: 1 }).waitFor();
    const audit = page.getByTestId('audit');
    await audit.waitFor();
    const webhookRows = audit.getByRole('row').filter({ hasText: 'webhook' });
    await expect
      .poll(async () => (await webhookRows.allTextContents()).map((t) => /(create|test|update)webhook/.exec(t)?.[1]))
      .toEqual(['update', 'update', 'test', 'test', 'create']);
    const createdRow = webhookRows.last();
    // The actor reads as an email once the members list (loaded beside the entries) has arrived.
    await expect.poll(() => createdRow.getByRole('cell').nth(1).textContent()).toBe(owner.email);
    await createdRow.getByText('Show').click();
    expect(await createdRow.locator('pre').textContent()).toContain(url);

    // Back on the webhooks page: delete, after the confirmation.
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Webhooks' }).click();
    await row.getByRole('button', { name: 'Delete' }).click();
    await row.getByRole('button', { name: 'Delete webhook' }).click();
    await page.getByText('No webhooks yet.').waitFor();
    expect(json<{ data: WebhookView[] }>(await api('GET', hooksUrl)).data).toEqual([]);
  });

  it('a member reads webhooks and deliveries but is offered no management', async () => {
    const owner = await signUpWithOrganization(s.h);
    const created = await s.h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/webhooks`,
      headers: bearer(owner.accessToken),
      payload: { url: `${rx.url}/member-view`, events: ['api_key.created'] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const member = await signUpAsMember(s.h, owner.organizationId, 'member');
    const { page } = await s.newPage();
    await signInInBrowser(page, member);
    await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Webhooks' }).click();
    const row = page.getByTestId('webhooks').getByRole('row', { name: /member-view/ });
    await row.waitFor();
    expect(await row.getByRole('button').allTextContents()).toEqual(['Deliveries']);
    expect(await page.getByRole('button', { name: 'Create webhook' }).count()).toBe(0);
    await row.getByRole('button', { name: 'Deliveries' }).click();
    await page.getByText('No deliveries yet.', { exact: false }).waitFor();
    // No audit log for a member (audit.read is for owners and admins).
    expect(await page.getByRole('navigation', { name: 'Organization' }).getByRole('link', { name: 'Audit log' }).count()).toBe(0);
  });
});
