import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MINUTE } from '../../clock.js';
import { bearer, createHarness, type Harness, json, signUpWithOrganization } from '../../../test/harness.js';
import { type StripeStandIn, startStripeStandIn } from '../../../test/stripe-stand-in/server.js';
import { PRICE_CACHE_MS, PRICE_RETRY_MS } from './account-selling.js';

/**
 * GET /billing/catalog with what each price costs (docs/billing.md "Selling"): amounts, currencies and
 * intervals read from Stripe (the stand-in) through the service's client, kept 5 minutes by the
 * service clock; Stripe refusing, unreachable or not configured answers the catalog anyway with null
 * amounts and `prices_read: false`.
 */
let h: Harness;
let standIn: StripeStandIn;
/** Every API request the stand-in answered, as `METHOD /path → status`. */
const requests: string[] = [];
const price: Record<string, string> = {};
const start = new Date('2026-03-01T10:00:00.000Z');

beforeAll(async () => {
  standIn = await startStripeStandIn({ now: () => (h ? h.clock.now() : start), onRequest: (line) => requests.push(line) });
  price.launch = standIn.createPrice({ productName: 'Launch', unitAmount: 4900, interval: 'month' }).id;
  price.growth = standIn.createPrice({ productName: 'Growth', unitAmount: 199_000, interval: 'year' }).id;
  price.small = standIn.createPrice({ productName: '1,000 credits', unitAmount: 500 }).id;
  price.large = standIn.createPrice({ productName: '10,000 credits', unitAmount: 4000, currency: 'eur' }).id;
  h = await createHarness(
    {
      stripeSecretKey: standIn.secretKey,
      stripeApiBase: standIn.url,
      stripeWebhookSecret: standIn.webhookSecret,
      stripePriceTiers: { [price.launch]: 'launch', [price.growth]: 'growth' },
      creditPacks: { small: { credits: 1000, priceId: price.small }, large: { credits: 10_000, priceId: price.large } },
    },
    start.toISOString(),
  );
});
afterAll(async () => {
  await h?.close();
  await standIn?.close();
});

type Catalog = {
  configured: boolean;
  prices_read: boolean;
  packs: Array<{ pack: string; unit_amount: number | null; currency: string | null }>;
  subscription_prices: Array<{ tier: string; unit_amount: number | null; currency: string | null; interval: string | null }>;
};

async function catalog(harness: Harness, accessToken: string): Promise<Catalog> {
  const res = await harness.request({ method: 'GET', url: '/billing/catalog', headers: bearer(accessToken) });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: Catalog }>(res).data;
}

const priceReads = () => requests.filter((r) => r.startsWith('GET /v1/prices/'));

describe('GET /billing/catalog prices', () => {
  it('shows each price as Stripe holds it, the tier allocation beside each plan', async () => {
    const owner = await signUpWithOrganization(h);
    expect(await catalog(h, owner.accessToken)).toEqual({
      configured: true,
      prices_read: true,
      packs: [
        { pack: 'small', credits: 1000, price_id: price.small, unit_amount: 500, currency: 'usd' },
        { pack: 'large', credits: 10_000, price_id: price.large, unit_amount: 4000, currency: 'eur' },
      ],
      subscription_prices: [
        { price_id: price.launch, tier: 'launch', monthly_credits: 2000, unit_amount: 4900, currency: 'usd', interval: 'month', interval_count: 1 },
        { price_id: price.growth, tier: 'growth', monthly_credits: 20_000, unit_amount: 199_000, currency: 'usd', interval: 'year', interval_count: 1 },
      ],
    });
  });

  it('reads each price from Stripe once per 5 minutes of the service clock', async () => {
    const owner = await signUpWithOrganization(h);
    h.clock.advance(PRICE_CACHE_MS); // whatever an earlier test read is stale now
    const before = priceReads().length;
    const first = await catalog(h, owner.accessToken);
    expect(priceReads().length - before).toBe(4);
    expect(priceReads().slice(-4).every((r) => r.endsWith('→ 200'))).toBe(true);

    h.clock.advance(PRICE_CACHE_MS - MINUTE);
    expect(await catalog(h, owner.accessToken)).toEqual(first);
    expect(priceReads().length - before).toBe(4);

    h.clock.advance(MINUTE);
    expect(await catalog(h, owner.accessToken)).toEqual(first);
    expect(priceReads().length - before).toBe(8);
  });

  it('Stripe refusing a price read: 200 with that price without an amount; the failure is kept 30 s, then asked again', async () => {
    const owner = await signUpWithOrganization(h);
    h.clock.advance(PRICE_CACHE_MS);
    standIn.failNext(1, { status: 500, path: new RegExp(`/v1/prices/${price.launch}$`) });
    const down = await catalog(h, owner.accessToken);
    expect(down.prices_read).toBe(false);
    expect(down.subscription_prices[0]).toMatchObject({ tier: 'launch', monthly_credits: 2000, unit_amount: null, currency: null, interval: null });
    expect(down.subscription_prices[1]).toMatchObject({ tier: 'growth', unit_amount: 199_000 });
    expect(down.packs.map((p) => p.unit_amount)).toEqual([500, 4000]);
    expect(requests.filter((r) => r.startsWith(`GET /v1/prices/${price.launch} `)).at(-1)).toMatch(/→ 500$/);

    // Page loads meanwhile do not wait on Stripe again: the failure stands for PRICE_RETRY_MS.
    let before = priceReads().length;
    const soon = await catalog(h, owner.accessToken);
    expect(soon.prices_read).toBe(false);
    expect(soon.subscription_prices[0]).toMatchObject({ unit_amount: null });
    expect(priceReads().length).toBe(before);

    // Then the next read asks Stripe again for the price that failed, and only for it.
    h.clock.advance(PRICE_RETRY_MS);
    before = priceReads().length;
    const again = await catalog(h, owner.accessToken);
    expect(again.prices_read).toBe(true);
    expect(again.subscription_prices[0]).toMatchObject({ unit_amount: 4900, currency: 'usd', interval: 'month' });
    expect(priceReads().slice(before)).toEqual([`GET /v1/prices/${price.launch} → 200`]);
  });

  it('Stripe every price refusing: the whole catalog with null amounts, still 200', async () => {
    const owner = await signUpWithOrganization(h);
    h.clock.advance(PRICE_CACHE_MS);
    standIn.failNext(4, { status: 503, path: /\/v1\/prices\// });
    const down = await catalog(h, owner.accessToken);
    expect(down.prices_read).toBe(false);
    expect([...down.packs, ...down.subscription_prices].map((p) => [p.unit_amount, p.currency])).toEqual([
      [null, null],
      [null, null],
      [null, null],
      [null, null],
    ]);
    expect(down.subscription_prices.map((p) => p.tier)).toEqual(['launch', 'growth']);
  });
});

describe('GET /billing/catalog prices without Stripe', () => {
  it('Stripe unreachable: 200 with null amounts', async () => {
    const gone = await startStripeStandIn();
    const url = gone.url;
    await gone.close();
    const unreachable = await createHarness(
      {
        stripeSecretKey: 'sk_test_standin',
        stripeApiBase: url,
        stripePriceTiers: { price_launch: 'launch' },
        creditPacks: { small: { credits: 1000, priceId: 'price_small' } },
      },
      start.toISOString(),
    );
    try {
      const owner = await signUpWithOrganization(unreachable);
      expect(await catalog(unreachable, owner.accessToken)).toEqual({
        configured: true,
        prices_read: false,
        packs: [{ pack: 'small', credits: 1000, price_id: 'price_small', unit_amount: null, currency: null }],
        subscription_prices: [
          { price_id: 'price_launch', tier: 'launch', monthly_credits: 2000, unit_amount: null, currency: null, interval: null, interval_count: null },
        ],
      });
    } finally {
      await unreachable.close();
    }
  });

  it('no STRIPE_SECRET_KEY: packs and plans as configured, no amounts, nothing asked of Stripe', async () => {
    const bare = await createHarness(
      { stripePriceTiers: { price_enterprise: 'enterprise' }, creditPacks: { small: { credits: 1000, priceId: 'price_small' } } },
      start.toISOString(),
    );
    try {
      const owner = await signUpWithOrganization(bare);
      const before = requests.length;
      expect(await catalog(bare, owner.accessToken)).toEqual({
        configured: false,
        prices_read: false,
        packs: [{ pack: 'small', credits: 1000, price_id: 'price_small', unit_amount: null, currency: null }],
        subscription_prices: [
          { price_id: 'price_enterprise', tier: 'enterprise', monthly_credits: null, unit_amount: null, currency: null, interval: null, interval_count: null },
        ],
      });
      expect(requests.length).toBe(before);
    } finally {
      await bare.close();
    }
  });
});
