import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliRun, runCli } from './cli-fixtures.js';
import { createHarness, createTenant, type Harness } from './harness.js';
import { type StripeStandIn, startStripeStandIn } from './stripe-stand-in/server.js';

/**
 * The auto top-up commands (docs/cli.md; docs/billing.md, "Auto top-up") against a real service: the
 * CLI (src/cli.ts through tsx) talks to this process's service over loopback with the operator key,
 * and what each command did is read back from the database. The service has Stripe (the stand-in) and
 * credit packs configured, so billing is available and enabling is refused only for the missing card.
 */
let h: Harness;
let standIn: StripeStandIn;
let url: string;
beforeAll(async () => {
  standIn = await startStripeStandIn();
  const small = standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  h = await createHarness({
    stripeSecretKey: standIn.secretKey,
    stripeApiBase: standIn.url,
    stripeWebhookSecret: standIn.webhookSecret,
    creditPacks: { small: { credits: 1000, priceId: small } },
  });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

/** The CLI against this process's service (test/cli-fixtures.ts). */
const cli = (...args: string[]): Promise<CliRun> => runCli(url, h.config.adminApiKey, ...args);

const settingRows = (organizationId: string) =>
  h.deps.db.query<{ enabled: boolean; below_credits: number; pack: string; max_per_month: number }>(
    'SELECT enabled, below_credits::int AS below_credits, pack, max_per_month FROM auto_top_up_settings WHERE organization_id = $1',
    [organizationId],
  );

describe('creditgate auto top-up commands against the operator API', () => {
  it('show answers the setting; set with --enabled false saves it; each change is in the database', { timeout: 120_000 }, async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const shown = await cli('auto-top-up', t.organizationId);
    expect(shown).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(shown.stdout)).toEqual({
      enabled: false,
      below_credits: null,
      pack: null,
      max_per_month: null,
      consecutive_failures: 0,
      disabled_reason: null,
      updated_at: null,
    });

    const set = await cli('auto-top-up-set', t.organizationId, '--enabled', 'false', '--below', '500', '--pack', 'small', '--max-per-month', '5');
    expect(set).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(set.stdout)).toMatchObject({ enabled: false, below_credits: 500, pack: 'small', max_per_month: 5, consecutive_failures: 0 });
    expect(await settingRows(t.organizationId)).toEqual([{ enabled: false, below_credits: 500, pack: 'small', max_per_month: 5 }]);

    const again = await cli('auto-top-up', t.organizationId);
    expect(JSON.parse(again.stdout)).toMatchObject({ enabled: false, below_credits: 500, pack: 'small', max_per_month: 5 });
  });

  it('enabling without a saved payment method is the service\'s 409, one line, exit 1; nothing changes', { timeout: 120_000 }, async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const refused = await cli('auto-top-up-set', t.organizationId, '--enabled', 'true', '--below', '500', '--pack', 'small', '--max-per-month', '5');
    expect(refused).toMatchObject({ code: 1, stdout: '' });
    expect(refused.stderr).toMatch(/^creditgate: Auto top-up cannot be enabled: the organization has no saved payment method.* \[CONFLICT, HTTP 409\]\n$/);
    expect(await settingRows(t.organizationId)).toEqual([]);
    // What the CLI's line summarises: the flat body names what is missing (docs/billing.md, "Auto top-up").
    const res = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/organizations/${t.organizationId}/auto-top-up`,
      headers: { 'x-admin-key': h.config.adminApiKey },
      payload: { enabled: true, below_credits: 500, pack: 'small', max_per_month: 5 },
    });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toMatchObject({ code: 'CONFLICT', missing: ['payment_method'] });
  });

  it('an argument error is one line and exit 2, before anything is sent', { timeout: 120_000 }, async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const [notBoolean, missing] = await Promise.all([
      cli('auto-top-up-set', t.organizationId, '--enabled', 'yes', '--below', '500', '--pack', 'small', '--max-per-month', '5'),
      cli('auto-top-up-set', t.organizationId, '--enabled', 'false', '--below', '500', '--pack', 'small'),
    ]);
    expect(notBoolean).toEqual({
      code: 2,
      stdout: '',
      stderr: "creditgate auto-top-up-set: --enabled 'yes' must be true or false; see creditgate auto-top-up-set --help\n",
    });
    expect(missing).toEqual({
      code: 2,
      stdout: '',
      stderr: "creditgate auto-top-up-set: required option '--max-per-month <n>' not specified; see creditgate auto-top-up-set --help\n",
    });
    expect(await settingRows(t.organizationId)).toEqual([]);
  });
});
