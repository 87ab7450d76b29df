import type { FastifyInstance } from 'fastify';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../app.js';
import { HOUR } from '../../clock.js';
import { type Config, testConfig } from '../../config.js';
import { runJobs } from '../../workers/jobs.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createHarness, createPassesHarness, serviceHeaders, type Harness, json, signUpAsMember, type Tenant } from '../../../test/harness.js';
import { createApiKey } from '../api-keys/service.js';
import { startPackStandIn } from '../../../test/billing-fixtures.js';
import type { StripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { askDueAutoTopUps } from '../credits/index.js';
import { AUTO_TOP_UP_QUEUE } from './auto-top-up.js';
import { ensureCustomer } from './checkout.js';
import { retryStripeEvents } from './stripe-events.js';

/**
 * Auto top-up (docs/billing.md, "Auto top-up") against the Stripe stand-in: a deduction that crosses
 * the line asks once, the worker makes one off-session PaymentIntent, and only its succeeded event
 * grants, once.
 */
let h: Harness;
let standIn: StripeStandIn;
let stripeConfig: Partial<Config>;
const f = creditFixtures(() => h);

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  ({ standIn, config: stripeConfig } = await startPackStandIn(() => h, start));
  // The worker's passes run an hour on and more: a database of its own (createPassesHarness).
  h = await createPassesHarness(stripeConfig, start.toISOString());
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

interface Setting {
  enabled: boolean;
  below_credits: number | null;
  pack: string | null;
  max_per_month: number | null;
  consecutive_failures: number;
  disabled_reason: string | null;
}

const put = (t: AdminTenant, body: Record<string, unknown>, headers = bearer(t.adminKey!)) =>
  h.request({ method: 'PUT', url: `/organizations/${t.organizationId}/auto-top-up`, headers, payload: body });

type AdminTenant = Tenant & { adminKey?: string; customer?: string };

/** A trial tenant with `monthly` credits, an admin key, and (unless told not to) a Stripe customer with a saved card. */
async function tenant(monthly: number, card: 'ok' | 'card_declined' | 'authentication_required' | null = 'ok'): Promise<AdminTenant & { adminKey: string }> {
  const t: AdminTenant = await f.tenantWith(monthly);
  t.adminKey = (await createApiKey(h.ctx, { organizationId: t.organizationId, name: 'admin key', scopes: ['read', 'write', 'admin'] })).key;
  if (card) {
    t.customer = await ensureCustomer(h.ctx, t.organizationId);
    standIn.savePaymentMethod(t.customer, { behaviour: card, makeDefault: true });
  }
  return t as AdminTenant & { adminKey: string };
}

async function enable(t: AdminTenant, setting: Partial<{ below_credits: number; pack: string; max_per_month: number }> = {}): Promise<Setting> {
  const res = await put(t, { enabled: true, below_credits: 50, pack: 'small', max_per_month: 5, ...setting });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: Setting }>(res).data;
}

async function record(t: Tenant, n = 1, via?: FastifyInstance[]): Promise<void> {
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) => {
      const request = { method: 'POST' as const, url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'auto-top-up-tool' } };
      return via ? via[i % via.length]!.inject(request) : h.request(request);
    }),
  );
  for (const res of results) expect(res.statusCode, res.body).toBe(200);
}

const asks = (t: Tenant) =>
  h.deps.db.query<{ id: string; status: string; stripe_payment_intent_id: string | null; failure_code: string | null; last_error: string | null }>(
    'SELECT id, status, stripe_payment_intent_id, failure_code, last_error FROM auto_top_ups WHERE deployment_id = $1 ORDER BY requested_at, id',
    [t.deploymentId],
  );
const intentsOf = (t: AdminTenant) => [...standIn.state.paymentIntents.values()].filter((pi) => pi.customer === t.customer && pi.metadata.creditgate_auto_top_up);
const eventsOf = (t: Tenant, type: string) =>
  h.deps.db.query<{ data: Record<string, unknown> }>('SELECT data FROM outbox_events WHERE organization_id = $1 AND type = $2 ORDER BY created_at, id', [t.organizationId, type]);
const runWorker = () => runJobs(h.deps, AUTO_TOP_UP_QUEUE);
/** The official SDK, as someone holding the Stripe account's key would use it. */
const sdk = () => new Stripe(standIn.secretKey, { host: '127.0.0.1', port: standIn.port, protocol: 'http', maxNetworkRetries: 0 });

describe('the setting', () => {
  it('reads as off until set; PUT needs every field, a sold pack and whole numbers ≥ 1', async () => {
    const t = await tenant(100);
    const read = await h.request({ method: 'GET', url: `/organizations/${t.organizationId}/auto-top-up`, headers: bearer(t.adminKey) });
    expect(read.statusCode, read.body).toBe(200);
    expect(json<{ data: Setting }>(read).data).toMatchObject({ enabled: false, below_credits: null, pack: null, max_per_month: null });
    const bad = [
      { enabled: true, below_credits: 50, pack: 'small' },
      { enabled: true, below_credits: 0, pack: 'small', max_per_month: 1 },
      { enabled: true, below_credits: 50, pack: 'small', max_per_month: 0 },
      { enabled: true, below_credits: 50.5, pack: 'small', max_per_month: 1 },
      { enabled: 'yes', below_credits: 50, pack: 'small', max_per_month: 1 },
      { enabled: true, below_credits: 50, pack: 'small', max_per_month: 1, extra: 1 },
    ];
    for (const body of bad) {
      const res = await put(t, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
    }
    const unknownPack = await put(t, { enabled: true, below_credits: 50, pack: 'huge', max_per_month: 1 });
    expect(unknownPack.statusCode).toBe(400);
    expect(unknownPack.body).toContain('small, large');
    expect(json<{ data: Setting }>(await h.request({ method: 'GET', url: `/organizations/${t.organizationId}/auto-top-up`, headers: bearer(t.adminKey) })).data.enabled).toBe(false);
  });

  it('enabling without a saved card, or without billing on the primary deployment, is 409 naming what is missing; nothing changes', async () => {
    const noCard = await tenant(100, null);
    const res = await put(noCard, { enabled: true, below_credits: 50, pack: 'small', max_per_month: 1 });
    expect(res.statusCode, res.body).toBe(409);
    expect(json(res)).toMatchObject({ success: false, error: { code: 'CONFLICT' }, details: { missing: ['payment_method'] } });
    // Off may be saved without a card.
    expect((await put(noCard, { enabled: false, below_credits: 50, pack: 'small', max_per_month: 1 })).statusCode).toBe(200);

    const noBilling = await tenant(100);
    await f.admin('PUT', `/api/v1/admin/deployments/${noBilling.deploymentId}/flags`, { billing_enabled: false });
    const off = await put(noBilling, { enabled: true, below_credits: 50, pack: 'small', max_per_month: 1 });
    expect(off.statusCode, off.body).toBe(409);
    expect(json(off)).toMatchObject({ error: { code: 'CONFLICT' }, details: { missing: ['billing_available'] } });
    const line = await h.deps.db.query<{ auto_top_up_below: number | null }>('SELECT auto_top_up_below FROM credit_balances WHERE deployment_id = $1', [noBilling.deploymentId]);
    expect(line[0]!.auto_top_up_below).toBeNull();
  });

  it('a card saved by a setup-mode Checkout (not made the default, as Stripe does) is enough; top-ups are charged to it', async () => {
    const t = await tenant(60, null);
    t.customer = await ensureCustomer(h.ctx, t.organizationId);
    const session = await sdk().checkout.sessions.create({ mode: 'setup', customer: t.customer, currency: 'usd', success_url: 'https://app.example/saved' });
    standIn.completeCheckout(session.id);
    await enable(t);
    await record(t, 11);
    await runWorker();
    const card = [...standIn.state.paymentMethods.values()].find((pm) => pm.customer === t.customer)!;
    expect(intentsOf(t).map((pi) => pi.payment_method)).toEqual([card.id]);
  });

  it('enabling on an installation that receives no Stripe events is 409 naming stripe_webhook_secret', async () => {
    const t = await tenant(100);
    const bare = await createHarness({ ...stripeConfig, stripeWebhookSecret: undefined }, undefined, h.deps.db);
    try {
      const res = await bare.request({
        method: 'PUT',
        url: `/organizations/${t.organizationId}/auto-top-up`,
        headers: bearer(t.adminKey),
        payload: { enabled: true, below_credits: 50, pack: 'small', max_per_month: 1 },
      });
      expect(res.statusCode, res.body).toBe(409);
      expect(json(res)).toMatchObject({ error: { code: 'CONFLICT' }, details: { missing: ['stripe_webhook_secret'] } });
    } finally {
      await bare.close();
    }
  });

  it('owners and admins only: a key without admin and a plain member are refused; a change is audited', async () => {
    const t = await tenant(100);
    const readKey = await put(t, { enabled: true, below_credits: 50, pack: 'small', max_per_month: 1 }, bearer(t.apiKey));
    expect(readKey.statusCode).toBe(403);
    const member = await signUpAsMember(h, t.organizationId, 'member');
    const asMember = await put(t, { enabled: true, below_credits: 50, pack: 'small', max_per_month: 1 }, { authorization: `Bearer ${member.accessToken}` });
    expect(asMember.statusCode).toBe(403);
    await enable(t);
    const audit = await h.deps.db.query<{ action: string; metadata: { after: Setting } }>(
      `SELECT action, metadata FROM audit_logs WHERE organization_id = $1 AND resource_type = 'auto_top_up'`,
      [t.organizationId],
    );
    expect(audit).toHaveLength(1);
    expect(audit[0]!.metadata.after).toMatchObject({ enabled: true, below_credits: 50, pack: 'small', max_per_month: 5 });
  });
});

describe('a deduction crossing the line', () => {
  it('asks once; the worker makes one off-session PaymentIntent; credits come only with its succeeded event, once', async () => {
    const t = await tenant(60);
    await enable(t);
    await record(t, 10); // 50 left: not below
    expect(await asks(t)).toEqual([]);
    await record(t, 1); // 49: crossed
    await record(t, 3); // still below: no second ask
    expect((await asks(t)).map((a) => a.status)).toEqual(['requested']);
    await runWorker();
    const [ask] = await asks(t);
    expect(ask!.status).toBe('started');
    const intents = intentsOf(t);
    expect(intents).toHaveLength(1);
    expect(intents[0]).toMatchObject({ amount: 500, currency: 'usd', status: 'succeeded', id: ask!.stripe_payment_intent_id });
    // Paid at Stripe, but nothing granted before the event arrives.
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    expect((await asks(t)).map((a) => a.status)).toEqual(['succeeded']);
    // A redelivery grants nothing more.
    const event = standIn.events('payment_intent.succeeded').find((e) => (e.data.object as { id: string }).id === ask!.stripe_payment_intent_id)!;
    await standIn.deliverEvent(event.id, { times: 3, concurrently: true });
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    expect(await eventsOf(t, 'auto_top_up.succeeded')).toEqual([
      { data: { deployment_id: t.deploymentId, pack: 'small', credits: 1000, payment_intent_id: ask!.stripe_payment_intent_id, consecutive_failures: 0 } },
    ]);
    expect((await eventsOf(t, 'credits.purchased')).map((e) => e.data)).toEqual([
      expect.objectContaining({ amount: 1000, pack: 'small', payment_intent_id: ask!.stripe_payment_intent_id, auto_top_up: true }),
    ]);
    await f.expectLedgerConsistent(t);
  });

  it('50 concurrent deductions crossing the line through two instances: exactly one PaymentIntent', async () => {
    const db = h.deps.db;
    const a = await buildApp({ config: testConfig({ ...stripeConfig, deductBatchInFlight: 4 }), db, clock: h.clock });
    const b = await buildApp({ config: testConfig({ ...stripeConfig, deductBatchInFlight: 4 }), db, clock: h.clock });
    try {
      const t = await tenant(100);
      await enable(t, { below_credits: 75 });
      await record(t, 50, [a, b]);
      expect((await f.balanceOf(t.deploymentId)).monthly_used).toBe(50);
      expect((await asks(t)).map((x) => x.status)).toEqual(['requested']);
      // Workers of both instances at once.
      await Promise.all([runJobs({ ...h.deps }, AUTO_TOP_UP_QUEUE), runJobs(h.deps, AUTO_TOP_UP_QUEUE), runWorker()]);
      expect(intentsOf(t)).toHaveLength(1);
      await standIn.flush();
      expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a crash between Stripe’s answer and storing it: the event waits, the retry gets the same PaymentIntent, one grant', async () => {
    const t = await tenant(60);
    await enable(t);
    await record(t, 11);
    await runWorker();
    const [ask] = await asks(t);
    // As if the worker died before storing Stripe's answer.
    await h.deps.db.query(`UPDATE auto_top_ups SET status = 'starting', stripe_payment_intent_id = NULL, next_attempt_at = $2 WHERE id = $1`, [ask!.id, h.clock.now()]);
    await standIn.flush(); // the succeeded event arrives first: kept pending, nothing granted
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    await runWorker(); // same idempotency key: Stripe answers the same PaymentIntent
    expect(intentsOf(t)).toHaveLength(1);
    expect((await asks(t))[0]).toMatchObject({ status: 'started', stripe_payment_intent_id: ask!.stripe_payment_intent_id });
    h.clock.advance(HOUR);
    await retryStripeEvents(h.deps, 20);
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    await retryStripeEvents(h.deps, 20);
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
  });

  it('a retry after a lost answer sends the same request, even when the default card changed meanwhile', async () => {
    const t = await tenant(60);
    await enable(t);
    await record(t, 11);
    await runWorker();
    const [ask] = await asks(t);
    const first = intentsOf(t)[0]!;
    await h.deps.db.query(`UPDATE auto_top_ups SET status = 'starting', stripe_payment_intent_id = NULL, next_attempt_at = $2 WHERE id = $1`, [ask!.id, h.clock.now()]);
    standIn.savePaymentMethod(t.customer!, { behaviour: 'ok', makeDefault: true });
    await runWorker();
    expect(intentsOf(t)).toHaveLength(1);
    expect((await asks(t))[0]).toMatchObject({ status: 'started', stripe_payment_intent_id: first.id });
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
  });

  it('a PaymentIntent paid after its top-up was settled failed without it still brings the credits, once', async () => {
    const t = await tenant(60);
    await enable(t);
    await record(t, 11);
    await runWorker();
    const [ask] = await asks(t);
    // As if Stripe's answer was lost and the top-up then settled failed: the paid PaymentIntent is on no row.
    await h.deps.db.query(`UPDATE auto_top_ups SET status = 'failed', stripe_payment_intent_id = NULL WHERE id = $1`, [ask!.id]);
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    expect((await asks(t))[0]).toMatchObject({ status: 'succeeded', stripe_payment_intent_id: ask!.stripe_payment_intent_id });
    const event = standIn.events('payment_intent.succeeded').find((e) => (e.data.object as { id: string }).id === ask!.stripe_payment_intent_id)!;
    await standIn.deliverEvent(event.id, { times: 2 });
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
  });

  it('a reservation that takes the available credits below the line asks too (held credits are not available)', async () => {
    const t = await tenant(50);
    await enable(t);
    const res = await h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x', reserve: true } });
    expect(json(res)).toMatchObject({ allowed: true });
    expect((await asks(t)).map((a) => a.status)).toEqual(['requested']);
  });

  it('max_per_month: a crossing past the month’s maximum is skipped, not paid', async () => {
    const t = await tenant(60);
    await enable(t, { max_per_month: 1, below_credits: 1500 });
    await record(t, 1);
    await runWorker();
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    // Still below 1,500 after the grant: the next top-up is asked at once, and skipped for the maximum.
    await runWorker();
    // Both asked at the same instant of the test clock: in no set order.
    const all = await asks(t);
    expect(all.map((a) => a.status).sort()).toEqual(['skipped', 'succeeded']);
    expect(all.find((a) => a.status === 'skipped')!.last_error).toContain('max_per_month');
    expect(intentsOf(t)).toHaveLength(1);
  });
});

describe('after the grant', () => {
  it('a refund of the top-up’s charge takes its credits back, as a pack’s', async () => {
    const t = await tenant(60);
    await enable(t);
    await record(t, 11);
    await runWorker();
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    const [ask] = await asks(t);
    await sdk().refunds.create({ payment_intent: ask!.stripe_payment_intent_id! });
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    // The take-back is no deduction: it does not buy the next pack at once.
    expect((await asks(t)).map((a) => a.status)).toEqual(['succeeded']);
    await f.expectLedgerConsistent(t);
  });

  it('a chargeback whose event comes before the top-up’s succeeded event takes the credits back as they are granted', async () => {
    const t = await tenant(60);
    await enable(t);
    await record(t, 11);
    await runWorker();
    const [ask] = await asks(t);
    standIn.disputePayment(ask!.stripe_payment_intent_id!);
    // Newest first: the dispute's funds_withdrawn, then payment_intent.succeeded.
    const results = await standIn.flush({ order: 'reverse' });
    expect(results.map((r) => r.type)).toEqual(expect.arrayContaining(['charge.dispute.funds_withdrawn', 'payment_intent.succeeded']));
    expect(results.every((r) => r.ok)).toBe(true);
    // The grant settled the early chargeback in its own transaction: the credits were never spendable.
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    await retryStripeEvents(h.deps, 20);
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
    await f.expectLedgerConsistent(t);
  });

  it('a deployment made after auto top-up was enabled starts with the line', async () => {
    const t = await tenant(60);
    await enable(t, { below_credits: 40 });
    const { usageFixtures } = await import('../../../test/usage-fixtures.js');
    const second = await usageFixtures(() => h).addDeployment(t.organizationId);
    const line = await h.deps.db.query<{ auto_top_up_below: number | null }>('SELECT auto_top_up_below FROM credit_balances WHERE deployment_id = $1', [second]);
    expect(line[0]!.auto_top_up_below).toBe(40);
  });
});

describe('a deployment with nothing left to spend', () => {
  it('asks without a deduction: when auto top-up is enabled below the line, and an hour after a failure', async () => {
    const t = await tenant(0, 'card_declined');
    await enable(t, { below_credits: 10 });
    // Every call is refused before it writes: no deduction could cross the line.
    await record(t, 2);
    expect(await asks(t)).toEqual([]);
    expect(await askDueAutoTopUps(h.deps.db, h.clock.now(), 100)).toBeGreaterThanOrEqual(1);
    expect((await asks(t)).map((a) => a.status)).toEqual(['requested']);
    await runWorker();
    expect((await asks(t)).map((a) => a.status)).toEqual(['failed']);
    await askDueAutoTopUps(h.deps.db, h.clock.now(), 100);
    expect(await asks(t)).toHaveLength(1);
    standIn.setCardBehaviour([...standIn.state.paymentMethods.values()].find((pm) => pm.customer === t.customer)!.id, 'ok');
    h.clock.advance(HOUR + 1000);
    await askDueAutoTopUps(h.deps.db, h.clock.now(), 100);
    await runWorker();
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
  });

  it('a top-up skipped for max_per_month asks again in the next month', async () => {
    h.clock.set('2026-03-20T10:00:00.000Z');
    const t = await tenant(60);
    await enable(t, { max_per_month: 1, below_credits: 5000 });
    await record(t, 1);
    await runWorker();
    await standIn.flush();
    await runWorker(); // still below: the second ask is skipped for the month's maximum
    expect((await asks(t)).map((a) => a.status).sort()).toEqual(['skipped', 'succeeded']);
    await askDueAutoTopUps(h.deps.db, h.clock.now(), 100);
    expect(await asks(t)).toHaveLength(2);
    h.clock.set('2026-04-01T00:00:01.000Z');
    await askDueAutoTopUps(h.deps.db, h.clock.now(), 100);
    await runWorker();
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(2000);
  });
});

describe('failures', () => {
  it('a declined card: failed once whichever of the answer and the event comes first; retried no sooner than an hour; three in a row switch it off', async () => {
    const t = await tenant(100, 'card_declined');
    await enable(t, { below_credits: 95 });
    await record(t, 6); // 94: crossed
    await runWorker();
    expect((await asks(t)).map((a) => [a.status, a.failure_code])).toEqual([['failed', 'card_declined']]);
    await standIn.flush(); // payment_intent.payment_failed: the same failure, not counted again
    const setting = async () =>
      json<{ data: Setting }>(await h.request({ method: 'GET', url: `/organizations/${t.organizationId}/auto-top-up`, headers: bearer(t.adminKey) })).data;
    expect((await setting()).consecutive_failures).toBe(1);
    await record(t, 1); // below, but within the hour: no ask
    expect(await asks(t)).toHaveLength(1);
    for (const n of [2, 3]) {
      h.clock.advance(HOUR + 1000);
      await record(t, 1);
      await runWorker();
      await standIn.flush();
      expect((await asks(t)).filter((a) => a.status === 'failed')).toHaveLength(n);
      expect((await setting()).consecutive_failures).toBe(n);
    }
    expect(await setting()).toMatchObject({ enabled: false, consecutive_failures: 3, disabled_reason: expect.stringContaining('card_declined') });
    expect((await eventsOf(t, 'auto_top_up.failed')).map((e) => e.data.consecutive_failures)).toEqual([1, 2, 3]);
    expect((await eventsOf(t, 'auto_top_up.failed'))[0]!.data).toMatchObject({ failure_code: 'card_declined', pack: 'small', credits: 1000 });
    expect(await eventsOf(t, 'auto_top_up.disabled')).toHaveLength(1);
    const line = await h.deps.db.query<{ auto_top_up_below: number | null }>('SELECT auto_top_up_below FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
    expect(line[0]!.auto_top_up_below).toBeNull();
    h.clock.advance(HOUR + 1000);
    await record(t, 1);
    expect(await asks(t)).toHaveLength(3);
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
  });

  it('authentication_required is a failure with its code; a success resets the count', async () => {
    const t = await tenant(100, 'authentication_required');
    await enable(t, { below_credits: 95 });
    await record(t, 6);
    await runWorker();
    expect((await asks(t)).map((a) => a.failure_code)).toEqual(['authentication_required']);
    standIn.setCardBehaviour([...standIn.state.paymentMethods.values()].find((pm) => pm.customer === t.customer)!.id, 'ok');
    h.clock.advance(HOUR + 1000);
    await record(t, 1);
    await runWorker();
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    const read = await h.request({ method: 'GET', url: `/organizations/${t.organizationId}/auto-top-up`, headers: bearer(t.adminKey) });
    expect(json<{ data: Setting }>(read).data).toMatchObject({ enabled: true, consecutive_failures: 0 });
  });

  it('a PaymentIntent this installation did not make grants nothing, even with auto top-up metadata', async () => {
    const t = await tenant(100);
    await enable(t);
    const stripe = sdk();
    const pm = [...standIn.state.paymentMethods.values()].find((p) => p.customer === t.customer)!;
    await stripe.paymentIntents.create({
      amount: 500,
      currency: 'usd',
      customer: t.customer!,
      payment_method: pm.id,
      off_session: true,
      confirm: true,
      metadata: { deployment_id: t.deploymentId, creditgate_pack: 'small', creditgate_credits: '1000', creditgate_auto_top_up: '00000000-0000-4000-8000-000000000000' },
    });
    await standIn.flush();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(0);
  });
});
