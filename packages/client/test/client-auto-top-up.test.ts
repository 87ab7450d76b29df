import { type AutoTopUp, type ClientOptions, type Credentials, CreditgateError, createClient } from '@creditgate/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTenant, type Tenant } from '../../../test/harness.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { admin } from './mcp-rig.js';
import { type LiveService, startLiveService } from './support.js';

/**
 * The client's auto top-up calls (docs/billing.md, "Auto top-up") against a real creditgate with billing
 * available: a Stripe key (the Stripe stand-in's) and the credit pack `small`. What a call did is read
 * back from the database, not taken from the client's own answer. A fresh tenant has no Stripe
 * customer, so no saved payment method.
 */
let live: LiveService;
let stripe: StripeStandIn;
beforeAll(async () => {
  stripe = await startStripeStandIn();
  const small = stripe.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  live = await startLiveService({
    stripeSecretKey: stripe.secretKey,
    stripeApiBase: stripe.url,
    stripeWebhookSecret: stripe.webhookSecret,
    creditPacks: { small: { credits: 1000, priceId: small } },
  });
});
afterAll(async () => {
  await live?.close();
  await stripe?.close();
});

const client = (credentials: Credentials, options: Partial<ClientOptions> = {}) => createClient(credentials, { baseUrl: live.baseUrl, retries: 0, ...options });
/** A launch tenant (billing_enabled) whose API key may manage billing (`admin`). */
const managing = () => createTenant(live.h, { tier: 'launch', scopes: ['read', 'write', 'admin'] });
const stdio = (t: Tenant) => client({ apiKey: t.apiKey });

const OFF: AutoTopUp = { enabled: false, below_credits: null, pack: null, max_per_month: null, consecutive_failures: 0, disabled_reason: null, updated_at: null };

/** The stored setting and the line on the tenant's balance row (null while auto top-up is off). */
async function stored(t: Tenant) {
  const settings = await live.h.deps.db.query<{ enabled: boolean; below_credits: number; pack: string; max_per_month: number }>(
    'SELECT enabled, below_credits, pack, max_per_month FROM auto_top_up_settings WHERE organization_id = $1',
    [t.organizationId],
  );
  const lines = await live.h.deps.db.query<{ auto_top_up_below: string | null }>('SELECT auto_top_up_below::text AS auto_top_up_below FROM credit_balances WHERE deployment_id = $1', [
    t.deploymentId,
  ]);
  return { setting: settings[0] ?? null, line: lines[0]?.auto_top_up_below ?? null };
}

async function rejection(promise: Promise<unknown>): Promise<CreditgateError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CreditgateError);
  return err as CreditgateError;
}

const missingOf = (err: CreditgateError) => (err.body as { details?: { missing?: string[] } }).details?.missing;

describe('autoTopUp: an organization API key with admin reads and sets the setting', () => {
  it('never set, it reads as off with nulls', async () => {
    const t = await managing();
    expect(await stdio(t).autoTopUp.get(t.organizationId)).toEqual(OFF);
    expect(await stored(t)).toEqual({ setting: null, line: null });
  });

  it('an unknown pack is VALIDATION_ERROR 400 naming the packs; nothing is written', async () => {
    const t = await managing();
    const err = await rejection(stdio(t).autoTopUp.set(t.organizationId, { enabled: false, below_credits: 500, pack: 'huge', max_per_month: 5 }));
    expect(err).toMatchObject({ code: 'VALIDATION_ERROR', status: 400, error: null, isTransient: false });
    expect(err.fields).toEqual([{ field: 'pack', message: 'one of small' }]);
    expect(await stored(t)).toEqual({ setting: null, line: null });
  });

  it('enabling without a saved card is CONFLICT 409 with details.missing [payment_method]; nothing is written', async () => {
    const t = await managing();
    const err = await rejection(stdio(t).autoTopUp.set(t.organizationId, { enabled: true, below_credits: 500, pack: 'small', max_per_month: 5 }));
    expect(err).toMatchObject({ code: 'CONFLICT', status: 409, isTransient: false, message: expect.stringContaining('payment method') });
    expect(missingOf(err)).toEqual(['payment_method']);
    expect(await stored(t)).toEqual({ setting: null, line: null });
    expect(await stdio(t).autoTopUp.get(t.organizationId)).toEqual(OFF);
  });

  it('enabling without billing on the primary deployment is CONFLICT 409 with details.missing [billing_available]', async () => {
    const t = await managing();
    await admin(live, 'PUT', `/api/v1/admin/deployments/${t.deploymentId}/flags`, { billing_enabled: false });
    const err = await rejection(stdio(t).autoTopUp.set(t.organizationId, { enabled: true, below_credits: 500, pack: 'small', max_per_month: 5 }));
    expect(err).toMatchObject({ code: 'CONFLICT', status: 409 });
    expect(missingOf(err)).toEqual(['billing_available']);
    expect(await stored(t)).toEqual({ setting: null, line: null });
  });

  it('saving it off (enabled: false) needs no card: stored, no line on the balance row, read back', async () => {
    const t = await managing();
    const c = stdio(t);
    const saved = await c.autoTopUp.set(t.organizationId, { enabled: false, below_credits: 500, pack: 'small', max_per_month: 3 });
    expect(saved).toEqual({
      enabled: false,
      below_credits: 500,
      pack: 'small',
      max_per_month: 3,
      consecutive_failures: 0,
      disabled_reason: null,
      updated_at: expect.any(String),
    });
    expect(await stored(t)).toEqual({ setting: { enabled: false, below_credits: 500, pack: 'small', max_per_month: 3 }, line: null });
    expect(await c.autoTopUp.get(t.organizationId)).toEqual(saved);
  });

  it('a key without admin is FORBIDDEN 403, another organization NOT_FOUND 404, no API key MISSING_CREDENTIALS (nothing sent)', async () => {
    const t = await managing();
    const writer = await createTenant(live.h, { tier: 'launch', scopes: ['read', 'write'] });
    for (const call of [
      () => stdio(writer).autoTopUp.get(writer.organizationId),
      () => stdio(writer).autoTopUp.set(writer.organizationId, { enabled: false, below_credits: 1, pack: 'small', max_per_month: 1 }),
    ]) {
      expect(await rejection(call())).toMatchObject({ code: 'FORBIDDEN', status: 403, message: expect.stringContaining('admin') });
    }
    expect(await stored(writer)).toEqual({ setting: null, line: null });
    const other = await managing();
    expect(await rejection(stdio(other).autoTopUp.get(t.organizationId))).toMatchObject({ code: 'NOT_FOUND', status: 404 });
    const d = client({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret });
    expect(await rejection(d.autoTopUp.set(t.organizationId, { enabled: false, below_credits: 1, pack: 'small', max_per_month: 1 }))).toMatchObject({
      code: 'MISSING_CREDENTIALS',
      status: null,
    });
    expect(await stored(t)).toEqual({ setting: null, line: null });
  });
});
