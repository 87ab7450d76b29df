import { MINUTE } from '../../clock.js';
import type { Config } from '../../config.js';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { isTier, TIER_TABLE } from '../../lib/tiers.js';
import { type DeploymentRow, getDeployment, listDeployments } from '../deployments/service.js';
import { authorize } from '../organizations/rbac.js';
import { type CheckoutAnswer, packCheckout, portalSession, type ReturnUrls } from './checkout.js';
import { type BillingSelection, billingOrganization } from './service.js';
import { type Stripe, stripeClient } from './stripe-client.js';

/**
 * Selling to a signed-in owner or admin (the console's billing page, docs/billing.md "Selling"): what
 * is on sale, a credit pack's Checkout and the Billing Portal, for the organization a /billing call
 * names. The deployment routes do the same with deployment credentials; the Stripe side is shared
 * (checkout.ts), so both sell alike.
 */

export interface SellingCatalog {
  configured: boolean;
  packs: Array<{ pack: string; credits: number; price_id: string }>;
  subscription_prices: Array<{ price_id: string; tier: string }>;
}

/** CREDIT_PACKS and STRIPE_PRICE_TIERS as a client shows them; `configured` when STRIPE_SECRET_KEY is set. */
export function sellingCatalog(config: Pick<Config, 'creditPacks' | 'stripePriceTiers' | 'stripeSecretKey'>): SellingCatalog {
  return {
    configured: config.stripeSecretKey !== undefined,
    packs: Object.entries(config.creditPacks).map(([pack, p]) => ({ pack, credits: p.credits, price_id: p.priceId })),
    subscription_prices: Object.entries(config.stripePriceTiers).map(([price_id, tier]) => ({ price_id, tier })),
  };
}

export type PriceInterval = 'day' | 'week' | 'month' | 'year';

/** What a Stripe price costs, as the console shows it; all null when it could not be read. */
export interface PriceAmount {
  /** In the currency's smallest unit (4900 usd = $49.00); null for a price without one (tiered, metered, customer-chosen). */
  unit_amount: number | null;
  /** Stripe's lower-case ISO code (`usd`). */
  currency: string | null;
}

export interface PricedCatalog {
  configured: boolean;
  prices_read: boolean;
  packs: Array<{ pack: string; credits: number; price_id: string } & PriceAmount>;
  subscription_prices: Array<
    { price_id: string; tier: string; monthly_credits: number | null; interval: PriceInterval | null; interval_count: number | null } & PriceAmount
  >;
}

/** How long a price read from Stripe is shown before it is read again (docs/billing.md, Selling). */
export const PRICE_CACHE_MS = 5 * MINUTE;
/** How long a failed price read is answered as failed before Stripe is asked again. */
export const PRICE_RETRY_MS = 30_000;
/** A catalog read is a page load: a price read gives up after this, once, and shows null amounts. */
const PRICE_READ_TIMEOUT_MS = 3_000;
const INTERVALS: readonly string[] = ['day', 'week', 'month', 'year'];

interface ReadPrice extends PriceAmount {
  interval: PriceInterval | null;
  interval_count: number | null;
}
const UNREAD: ReadPrice = { unit_amount: null, currency: null, interval: null, interval_count: null };

/**
 * Prices read from Stripe, per client (one per configuration and app, stripe-client.ts), kept
 * PRICE_CACHE_MS by the service clock. A price's amount, currency and interval cannot change in Stripe
 * (a new price is made instead), so a cached one is never wrong, only possibly archived. A read under
 * way is shared by concurrent catalogs; a failed one is kept PRICE_RETRY_MS only, so page loads while
 * Stripe is down do not each wait on it again, and the first catalog after that asks again.
 */
const priceCache = new WeakMap<Stripe, Map<string, { read: Promise<ReadPrice>; at: number; failed: boolean }>>();

function readPrice(ctx: Pick<Ctx, 'clock' | 'log'>, stripe: Stripe, priceId: string): Promise<ReadPrice> {
  let cache = priceCache.get(stripe);
  if (!cache) {
    cache = new Map();
    priceCache.set(stripe, cache);
  }
  const now = ctx.clock.now().getTime();
  const cached = cache.get(priceId);
  if (cached && now >= cached.at && now - cached.at < (cached.failed ? PRICE_RETRY_MS : PRICE_CACHE_MS)) return cached.read;
  const read = stripe.prices.retrieve(priceId, undefined, { timeout: PRICE_READ_TIMEOUT_MS, maxNetworkRetries: 0 }).then((price): ReadPrice => {
    const recurring = price.recurring;
    return {
      unit_amount: typeof price.unit_amount === 'number' ? price.unit_amount : null,
      currency: price.currency ?? null,
      interval: recurring && INTERVALS.includes(recurring.interval) ? (recurring.interval as PriceInterval) : null,
      interval_count: recurring ? recurring.interval_count : null,
    };
  });
  const entry = { read, at: now, failed: false };
  cache.set(priceId, entry);
  read.catch((error: unknown) => {
    entry.failed = true;
    entry.at = ctx.clock.now().getTime();
    ctx.log.warn({ err: error, price: priceId }, 'stripe price read failed: the billing catalog shows it without an amount');
  });
  return read;
}

/**
 * The catalog with what each price costs, read from Stripe (cached PRICE_CACHE_MS). Reading prices
 * never fails the catalog: without Stripe, or when Stripe cannot be reached or refuses a read, those
 * prices have null amounts and `prices_read` is false (docs/billing.md, Selling).
 */
export async function pricedCatalog(ctx: Pick<Ctx, 'config' | 'metrics' | 'clock' | 'log'>): Promise<PricedCatalog> {
  const base = sellingCatalog(ctx.config);
  const stripe = stripeClient(ctx);
  let complete = stripe !== null;
  const amountOf = async (priceId: string): Promise<ReadPrice> => {
    if (!stripe) return UNREAD;
    try {
      return await readPrice(ctx, stripe, priceId);
    } catch {
      complete = false;
      return UNREAD;
    }
  };
  const [packs, subscriptionPrices] = await Promise.all([
    Promise.all(
      base.packs.map(async (p) => {
        const { unit_amount, currency } = await amountOf(p.price_id);
        return { ...p, unit_amount, currency };
      }),
    ),
    Promise.all(
      base.subscription_prices.map(async (p) => {
        const { unit_amount, currency, interval, interval_count } = await amountOf(p.price_id);
        // The tier's monthly allocation (docs/entitlements.md); null is unlimited, as in the tier table.
        const monthlyCredits = isTier(p.tier) ? TIER_TABLE[p.tier].monthlyCredits : null;
        return { ...p, monthly_credits: monthlyCredits, unit_amount, currency, interval, interval_count };
      }),
    ),
  ]);
  return { configured: base.configured, prices_read: complete, packs, subscription_prices: subscriptionPrices };
}

/** GET /billing/catalog (billing.read). */
export async function readSellingCatalog(ctx: Ctx, sel: BillingSelection): Promise<PricedCatalog> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.read');
  return pricedCatalog(ctx);
}

/**
 * POST /billing/credit-packs/checkout (billing.manage): a pack for one of the organization's deployments,
 * the primary one unless named. Another organization's deployment is 404; a suspended one is 403
 * DEPLOYMENT_SUSPENDED, as on the deployment route (docs/decisions.md, Suspended deployments). Unlike that route it is not gated by the
 * tier's `billing_enabled`: that flag governs what a deployment's own end users may do through the
 * billing proxy, while an owner or admin may buy credits for any tier, as they may subscribe from any.
 */
export async function buyCreditPack(
  ctx: Ctx,
  sel: BillingSelection,
  input: { pack: string; deploymentId?: string | undefined } & ReturnUrls,
  idempotencyKey?: string,
): Promise<CheckoutAnswer> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.manage');
  const deployment = input.deploymentId ? await getDeployment(ctx.db, input.deploymentId, organizationId) : await primaryOf(ctx, organizationId);
  if (deployment.status !== 'active') {
    throw new AppError('DEPLOYMENT_SUSPENDED', 'This deployment is suspended: credits cannot be bought for it until the operator reactivates it');
  }
  return packCheckout(ctx, deployment, input.pack, input, idempotencyKey);
}

/** POST /billing/portal (billing.manage): a Billing Portal session for the organization's customer. */
export async function openBillingPortal(ctx: Ctx, sel: BillingSelection, returnUrl: string | undefined): Promise<{ url: string }> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.manage');
  return portalSession(ctx, organizationId, returnUrl);
}

async function primaryOf(ctx: Ctx, organizationId: string): Promise<DeploymentRow> {
  const all = await listDeployments(ctx.db, organizationId);
  const primary = all.find((d) => d.is_primary);
  if (!primary) throw new AppError('NOT_FOUND', 'The organization has no primary deployment: name one with deployment_id');
  return primary;
}
