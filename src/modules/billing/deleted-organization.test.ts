import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createKeyOverHttp, createPassesHarness, type Harness, json, signUpWithOrganization, type Tenant } from '../../../test/harness.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { WORKERS } from '../../workers/catalog.js';

/**
 * A deleted organization stops paying (docs/billing.md, Subscriptions): its subscriptions are canceled
 * in Stripe by the `deleted-organization-billing` worker, also one paid for after the delete,
 * and a Stripe fault only delays it.
 */
let h: Harness;
let standIn: StripeStandIn;
const price: Record<string, string> = {};
const requests: string[] = [];
const f = creditFixtures(() => h);

beforeAll(async () => {
  const start = new Date('2026-03-01T10:00:00.000Z');
  standIn = await startStripeStandIn({
    now: () => (h ? h.clock.now() : start),
    onRequest: (line) => requests.push(line),
    deliver: async (payload, headers) => ({ status: (await h.request({ method: 'POST', url: '/webhooks/stripe', headers, payload })).statusCode }),
  });
  price.launch = standIn.createPrice({ productName: 'Launch', unitAmount: 4900, interval: 'month' }).id;
  price.small = standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  h = await createPassesHarness(
    {
      stripeSecretKey: standIn.secretKey,
      stripeApiBase: standIn.url,
      stripeWebhookSecret: standIn.webhookSecret,
      stripePriceTiers: { [price.launch]: 'launch' },
      creditPacks: { small: { credits: 1000, priceId: price.small } },
    },
    start.toISOString(),
  );
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

const q = <T>(sql: string, params: unknown[]) => h.deps.db.query<T>(sql, params);
const cancelPass = () => WORKERS.find((w) => w.name === 'deleted-organization-billing')!.run(h.deps);
const stripeStatus = (id: string) => standIn.state.subscriptions.get(id)!.status;
const ourStatus = async (id: string) => (await q<{ status: string }>('SELECT status FROM subscriptions WHERE stripe_subscription_id = $1', [id]))[0]?.status;

async function flushAll(): Promise<void> {
  const results = await standIn.flush();
  for (const r of results) expect(r.ok, `${r.type}: ${r.status} ${r.error ?? ''}`).toBe(true);
}

/** An owner, an admin-scoped key of theirs, and an open subscription Checkout. */
async function ownerWithCheckout() {
  const owner = await signUpWithOrganization(h);
  const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write', 'admin'] });
  const res = await h.request({ method: 'POST', url: '/billing/subscription', headers: { 'x-api-key': key.key }, payload: { tier: 'launch' } });
  expect(res.statusCode, res.body).toBe(200);
  return { owner, session: json<{ data: { checkout_session_id: string } }>(res).data.checkout_session_id };
}

const deleteOrganization = async (owner: { organizationId: string; accessToken: string }) => {
  const res = await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken) });
  expect(res.statusCode, res.body).toBe(200);
};

describe('a deleted organization’s subscriptions', () => {
  it('are canceled in Stripe and recorded, once; an organization not deleted keeps its own', async () => {
    const kept = await ownerWithCheckout();
    const keptSub = standIn.completeCheckout(kept.session).subscription as string;
    const gone = await ownerWithCheckout();
    const goneSub = standIn.completeCheckout(gone.session).subscription as string;
    await flushAll();
    expect(await ourStatus(goneSub)).toBe('active');

    await deleteOrganization(gone.owner);
    // Stripe is down for the first pass: nothing is recorded, and the next pass cancels.
    standIn.failNext(2, { status: 503, path: new RegExp(`/v1/subscriptions/${goneSub}`) });
    await cancelPass();
    expect(stripeStatus(goneSub)).toBe('active');
    expect(await ourStatus(goneSub)).toBe('active');
    await cancelPass();
    expect(stripeStatus(goneSub)).toBe('canceled');
    expect(await ourStatus(goneSub)).toBe('canceled');
    expect(stripeStatus(keptSub)).toBe('active');
    expect(await ourStatus(keptSub)).toBe('active');
    const org = await q<{ subscription_status: string }>('SELECT subscription_status FROM organizations WHERE id = $1', [gone.owner.organizationId]);
    expect(org[0]!.subscription_status).toBe('canceled');
    const audit = await q<{ action: string; actor: string; metadata: Record<string, unknown> }>(
      "SELECT action, actor, metadata FROM audit_logs WHERE organization_id = $1 AND resource_type = 'subscription' AND resource_id = $2 AND action = 'cancel'",
      [gone.owner.organizationId, goneSub],
    );
    expect(audit).toEqual([expect.objectContaining({ actor: 'system', metadata: expect.objectContaining({ reason: 'organization_deleted', previous_status: 'active' }) })]);

    // Stripe's own event of the cancellation changes nothing more; later passes do not ask Stripe again.
    await flushAll();
    const asked = requests.filter((r) => r.includes(goneSub)).length;
    await cancelPass();
    expect(await ourStatus(goneSub)).toBe('canceled');
    expect(requests.filter((r) => r.includes(goneSub)).length).toBe(asked);
    expect(await q('SELECT 1 FROM audit_logs WHERE resource_id = $1 AND action = $2', [goneSub, 'cancel'])).toHaveLength(1);
  });

  it('a subscription paid for after the delete is kept and canceled', async () => {
    const late = await ownerWithCheckout();
    await deleteOrganization(late.owner);
    // The Checkout opened before the delete is paid after it: Stripe starts a subscription.
    const sub = standIn.completeCheckout(late.session).subscription as string;
    await flushAll();
    expect(stripeStatus(sub)).toBe('active');
    expect(await ourStatus(sub)).toBe('active');
    // The deleted organization gained nothing from it.
    const tier = await q<{ tier: string }>('SELECT tier FROM deployments WHERE organization_id = $1 AND is_primary', [late.owner.organizationId]);
    expect(tier[0]!.tier).not.toBe('launch');

    await cancelPass();
    expect(stripeStatus(sub)).toBe('canceled');
    expect(await ourStatus(sub)).toBe('canceled');
  });

  it('a subscription Stripe no longer has is recorded as canceled', async () => {
    const o = await ownerWithCheckout();
    const sub = standIn.completeCheckout(o.session).subscription as string;
    await flushAll();
    await deleteOrganization(o.owner);
    // Gone from Stripe (another account's key, a test clock deleted): the stand-in forgets it.
    (standIn.state.subscriptions as Map<string, unknown>).delete(sub);
    await cancelPass();
    expect(await ourStatus(sub)).toBe('canceled');
  });
});

describe('a credit pack of a deleted organization', () => {
  /** A pack Checkout of the tenant's deployment, opened now. */
  async function packCheckout(t: Tenant): Promise<string> {
    const res = await h.request({
      method: 'POST',
      url: '/api/v1/credits/purchase',
      headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret },
      payload: { pack: 'small' },
    });
    expect(res.statusCode, res.body).toBe(200);
    return json<{ checkout_session_id: string }>(res).checkout_session_id;
  }
  const purchase = async (session: string) =>
    (
      await q<{ refund_share: number; credits_taken_back: number; stripe_payment_intent_id: string }>(
        'SELECT refund_share, credits_taken_back, stripe_payment_intent_id FROM credit_purchases WHERE stripe_checkout_session_id = $1',
        [session],
      )
    )[0]!;
  const refundsOf = (paymentIntent: string) => [...standIn.state.refunds.values()].filter((r) => r.payment_intent === paymentIntent);

  it('paid for after the delete is refunded in full and its credits taken back, once; one paid before is kept', async () => {
    const t = await f.tenantWith(0);
    const before = await packCheckout(t);
    standIn.completeCheckout(before);
    await flushAll();
    const late = await packCheckout(t);
    // Deleted as DELETE /organizations/{id} deletes (the owner's call is tested above).
    await q('UPDATE organizations SET deleted_at = $2 WHERE id = $1', [t.organizationId, h.clock.now()]);
    h.clock.advance(1000);
    // The Checkout opened before the delete is paid after it.
    standIn.completeCheckout(late);
    await flushAll();
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(2000);

    await cancelPass();
    const paid = await purchase(late);
    expect(refundsOf(paid.stripe_payment_intent_id)).toEqual([expect.objectContaining({ amount: 500, status: 'succeeded' })]);
    expect(paid).toMatchObject({ refund_share: 1000, credits_taken_back: 1000 });
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    // Stripe's event of that refund, and later passes, take nothing more and refund nothing more.
    await flushAll();
    await cancelPass();
    expect(refundsOf(paid.stripe_payment_intent_id)).toHaveLength(1);
    expect((await f.balanceOf(t.deploymentId)).purchased_balance).toBe(1000);
    expect(refundsOf((await purchase(before)).stripe_payment_intent_id)).toEqual([]);
    const audit = await q('SELECT 1 FROM audit_logs WHERE organization_id = $1 AND action = $2 AND resource_type = $3', [t.organizationId, 'refund', 'credit_purchase']);
    expect(audit).toHaveLength(1);
    await f.expectLedgerConsistent(t);
  });
});
