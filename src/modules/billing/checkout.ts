import type { Ctx } from '../../context.js';
import { AppError, ValidationError, withUpstreamDetail } from '../../errors.js';
import { recordPackCheckout } from '../credits/index.js';
import type { DeploymentRow } from '../deployments/service.js';
import { TIERS, type Tier } from '../../lib/tiers.js';
import { sha256Hex } from '../../lib/secrets.js';
import { isTransientStripeError, requireStripe, Stripe } from './stripe-client.js';

/**
 * Selling through Stripe (docs/billing.md, Selling): one customer per organization, made on first need; Checkout for a
 * first subscription and for credit packs; the Billing Portal; a price change of a subscription in
 * force. Every call to Stripe goes through `callStripe`, so a Stripe fault is a clear 502/503 and
 * never a half-written state: the database is written only after Stripe answered.
 */

export interface ReturnUrls {
  success_url?: string | undefined;
  cancel_url?: string | undefined;
}

/** Stripe's answer or a mapped error: 503 (retry) for a transient fault, 502 when Stripe refused our request. */
export async function callStripe<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (error instanceof Stripe.errors.StripeIdempotencyError) {
      throw new AppError('IDEMPOTENCY_KEY_REUSED', `This Idempotency-Key was used for a different ${what}`);
    }
    if (isTransientStripeError(error)) {
      throw new AppError('SERVICE_UNAVAILABLE', `Stripe is not reachable (${what}); try again shortly`, {}, { 'retry-after': '5' });
    }
    // Stripe's message is the operator's (it can name a fragment of the key, the account, a price id):
    // in the log; the caller gets its code and request id (docs/billing.md, Selling).
    const e = error as { message?: string; code?: string; requestId?: string; statusCode?: number; type?: string };
    const detail = { provider: 'stripe', status: e.statusCode ?? null, type: e.type ?? null, code: e.code ?? null, request_id: e.requestId ?? null, message: e.message ?? null };
    if (error instanceof Stripe.errors.StripeAuthenticationError || error instanceof Stripe.errors.StripePermissionError) {
      throw withUpstreamDetail(new AppError('BILLING_NOT_CONFIGURED', `Billing is not available: Stripe refused this installation's key (${what}); the operator is told`), detail);
    }
    const reference = [e.code, e.requestId].filter((v) => typeof v === 'string' && /^[\w.-]{1,100}$/.test(v)).join(', ');
    throw withUpstreamDetail(new AppError('PAYMENT_PROVIDER_ERROR', `Stripe refused ${what}${reference ? ` (${reference})` : ''}`), detail);
  }
}

const LOOPBACK = /^(localhost|127(?:\.\d{1,3}){3}|\[::1\])$/i;

/** docs/billing.md, Selling: return URLs are https, or http on loopback outside production; the field is named on a refusal. */
export function checkReturnUrl(ctx: Pick<Ctx, 'config'>, field: string, value: string | undefined, fallback: string): string {
  if (value === undefined) return fallback;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ValidationError(`${field} is not a URL`, [{ field, message: 'must be an absolute https URL' }]);
  }
  const loopbackHttp = url.protocol === 'http:' && LOOPBACK.test(url.hostname) && ctx.config.nodeEnv !== 'production';
  if (url.protocol !== 'https:' && !loopbackHttp) {
    throw new ValidationError(`${field} must use https (http only on loopback in development)`, [{ field, message: 'must be https' }]);
  }
  if (url.username || url.password) throw new ValidationError(`${field} must not carry credentials`, [{ field, message: 'no user:password@' }]);
  // As given: normalising would encode Stripe's {CHECKOUT_SESSION_ID} template.
  return value;
}

function defaultUrls(ctx: Ctx, urls: ReturnUrls): { success: string; cancel: string } {
  const base = ctx.config.publicBaseUrl;
  return {
    success: checkReturnUrl(ctx, 'success_url', urls.success_url, `${base}/billing/success`),
    cancel: checkReturnUrl(ctx, 'cancel_url', urls.cancel_url, `${base}/billing/cancel`),
  };
}

/** The organization's Stripe customer, made on first need with the organization id in its metadata. */
export async function ensureCustomer(ctx: Ctx, organizationId: string): Promise<string> {
  const rows = await ctx.db.query<{ name: string; stripe_customer_id: string | null }>(
    'SELECT name, stripe_customer_id FROM organizations WHERE id = $1 AND deleted_at IS NULL',
    [organizationId],
  );
  const org = rows[0];
  if (!org) throw new AppError('NOT_FOUND', 'Organization not found');
  if (org.stripe_customer_id) return org.stripe_customer_id;
  const stripe = requireStripe(ctx);
  // Concurrent first purchases of one organization share Stripe's answer through the idempotency key.
  const customer = await callStripe('to create the customer', () =>
    stripe.customers.create({ name: org.name, metadata: { organization_id: organizationId } }, { idempotencyKey: `creditgate-customer-${organizationId}` }),
  );
  const set = await ctx.db.query<{ stripe_customer_id: string }>(
    `UPDATE organizations SET stripe_customer_id = COALESCE(stripe_customer_id, $2) WHERE id = $1 RETURNING stripe_customer_id`,
    [organizationId, customer.id],
  );
  return set[0]?.stripe_customer_id ?? customer.id;
}

/** `{price_id}` or `{tier}` → a price STRIPE_PRICE_TIERS lists; anything else is 400 naming the field. */
export function subscriptionPrice(ctx: Pick<Ctx, 'config'>, input: { price_id?: string | undefined; tier?: string | undefined }): string {
  const prices = ctx.config.stripePriceTiers;
  const listed = Object.keys(prices);
  if (listed.length === 0) throw new AppError('BILLING_NOT_CONFIGURED', 'No subscription prices are configured (STRIPE_PRICE_TIERS)');
  if (input.price_id !== undefined && input.tier !== undefined) {
    throw new ValidationError('Give price_id or tier, not both', [{ field: 'price_id', message: 'give price_id or tier, not both' }]);
  }
  if (input.price_id !== undefined) {
    if (!Object.hasOwn(prices, input.price_id)) throw new ValidationError(`Unknown price ${input.price_id}`, [{ field: 'price_id', message: `one of ${listed.join(', ')}` }]);
    return input.price_id;
  }
  if (input.tier !== undefined) {
    const price = listed.find((p) => prices[p] === input.tier);
    const sold = [...new Set(Object.values(prices))].filter((t) => TIERS.includes(t as Tier));
    if (!price) throw new ValidationError(`No price sells the tier ${input.tier}`, [{ field: 'tier', message: `one of ${sold.join(', ')}` }]);
    return price;
  }
  throw new ValidationError('Give price_id or tier', [{ field: 'price_id', message: 'price_id or tier is required' }]);
}

export interface CheckoutAnswer {
  url: string;
  checkout_session_id: string;
}

/** A Checkout Session for the organization's first subscription. */
export async function subscriptionCheckout(ctx: Ctx, organizationId: string, priceId: string, urls: ReturnUrls, idempotencyKey?: string): Promise<CheckoutAnswer> {
  const { success, cancel } = defaultUrls(ctx, urls);
  const stripe = requireStripe(ctx);
  const customer = await ensureCustomer(ctx, organizationId);
  const session = await callStripe('the Checkout Session', () =>
    stripe.checkout.sessions.create(
      {
        mode: 'subscription',
        customer,
        line_items: [{ price: priceId, quantity: 1 }],
        success_url: success,
        cancel_url: cancel,
        client_reference_id: organizationId,
        metadata: { organization_id: organizationId, creditgate_price: priceId },
        subscription_data: { metadata: { organization_id: organizationId } },
      },
      idempotencyKey ? { idempotencyKey: `creditgate-subscribe-${organizationId}-${sha256Hex(idempotencyKey)}` } : undefined,
    ),
  );
  return answerOf(await keepOneSubscriptionCheckout(ctx, stripe, customer, session, priceId));
}

/**
 * Only one subscription Checkout of an organization can be paid (docs/billing.md, Subscriptions): two
 * open could both be paid, and the organization would pay two subscriptions for one tier. Once the new
 * session exists, the customer's sessions are read:
 * - one paid whose subscription this installation has not stored yet (its events are on their way):
 *   the organization has just subscribed, so the new session is expired and the request is 409;
 * - of the open ones (the new one among them), the newest by creation time, then id, stays open and
 *   every other is expired. Each request of several at once expires by the same order, so one stays
 *   open whichever listed first. When the one that stays is another request's, the answer is that
 *   session if it sells the same price, else 409.
 * A session that cannot be expired is read again: expired meanwhile needs nothing, paid meanwhile is
 * the first case. Any other failure is the request's (502/503), and a retry finishes the work.
 */
async function keepOneSubscriptionCheckout(
  ctx: Ctx,
  stripe: Stripe,
  customer: string,
  made: Stripe.Checkout.Session,
  priceId: string,
): Promise<Stripe.Checkout.Session> {
  const listed = await callStripe('to list the Checkout Sessions', () => stripe.checkout.sessions.list({ customer, limit: 100 }));
  const others = listed.data.filter((s) => s.mode === 'subscription' && s.id !== made.id);
  const justPaid = async (sessions: Stripe.Checkout.Session[]) => {
    const ids = sessions
      .filter((s) => s.status === 'complete')
      .map((s) => (typeof s.subscription === 'string' ? s.subscription : s.subscription?.id))
      .filter((id): id is string => typeof id === 'string');
    if (ids.length === 0) return false;
    const stored = await ctx.db.query<{ stripe_subscription_id: string }>(
      'SELECT stripe_subscription_id FROM subscriptions WHERE stripe_subscription_id = ANY($1::text[])',
      [ids],
    );
    return stored.length < new Set(ids).size;
  };
  const expire = (s: Stripe.Checkout.Session) =>
    callStripe('to expire a Checkout Session', async () => {
      try {
        return await stripe.checkout.sessions.expire(s.id);
      } catch (error) {
        const now = await stripe.checkout.sessions.retrieve(s.id);
        if (now.status === 'open') throw error;
        return now;
      }
    });
  const refuse = async (): Promise<never> => {
    await expire(made);
    throw new AppError('CONFLICT', 'A subscription Checkout of this organization was just paid: its subscription is being set up');
  };
  if (await justPaid(others)) await refuse();
  const open = [made, ...others.filter((s) => s.status === 'open')];
  const newer = (a: Stripe.Checkout.Session, b: Stripe.Checkout.Session) => a.created > b.created || (a.created === b.created && a.id > b.id);
  const kept = open.reduce((a, b) => (newer(b, a) ? b : a));
  for (const s of open) {
    if (s.id === kept.id) continue;
    if (await justPaid([await expire(s)])) await refuse();
  }
  if (kept.id === made.id) return made;
  if (kept.metadata?.creditgate_price === priceId) return kept;
  throw new AppError('CONFLICT', 'Another subscription Checkout of this organization was opened at the same time, for another plan: use that one, or ask again');
}

/**
 * A credit pack for a deployment: a Checkout Session in payment mode, its sale (deployment, pack,
 * credits, amount, currency) recorded before the customer can pay. The metadata is for people reading
 * Stripe's dashboard and for matching a refund; no event is granted from it.
 */
export async function packCheckout(
  ctx: Ctx,
  deployment: DeploymentRow,
  pack: string,
  urls: ReturnUrls,
  idempotencyKey?: string,
  options: { guest?: boolean } = {},
): Promise<CheckoutAnswer> {
  const packs = ctx.config.creditPacks;
  const names = Object.keys(packs);
  if (names.length === 0) throw new AppError('BILLING_NOT_CONFIGURED', 'No credit packs are configured (CREDIT_PACKS)');
  const chosen = Object.hasOwn(packs, pack) ? packs[pack] : undefined;
  if (!chosen) throw new ValidationError(`Unknown pack ${pack}`, [{ field: 'pack', message: `one of ${names.join(', ')}` }]);
  const { success, cancel } = defaultUrls(ctx, urls);
  const stripe = requireStripe(ctx);
  // A guest checkout (the top-up link, docs/billing.md "Top-up link") names no customer: Checkout then
  // neither shows the organization's saved payment methods nor prefills its email to whoever holds the link.
  const customer = options.guest ? undefined : await ensureCustomer(ctx, deployment.organization_id);
  const metadata = {
    organization_id: deployment.organization_id,
    deployment_id: deployment.id,
    creditgate_pack: pack,
    creditgate_credits: String(chosen.credits),
    creditgate_price: chosen.priceId,
  };
  const session = await callStripe('the Checkout Session', () =>
    stripe.checkout.sessions.create(
      {
        mode: 'payment',
        ...(customer ? { customer } : {}),
        line_items: [{ price: chosen.priceId, quantity: 1 }],
        success_url: success,
        cancel_url: cancel,
        client_reference_id: deployment.id,
        metadata,
        payment_intent_data: { metadata },
      },
      idempotencyKey ? { idempotencyKey: `creditgate-pack-${deployment.id}-${sha256Hex(idempotencyKey)}` } : undefined,
    ),
  );
  // The stored row is what a paid event may grant (docs/billing.md, "Credit packs"), checked against the
  // amount Stripe priced the session at. Without one the session is never shown, so nobody can pay it.
  const amountTotal = session.amount_total;
  if (typeof amountTotal !== 'number' || !Number.isSafeInteger(amountTotal) || amountTotal < 0 || typeof session.currency !== 'string' || session.currency === '') {
    throw new AppError('PAYMENT_PROVIDER_ERROR', 'Stripe answered a pack\'s Checkout Session without its amount and currency');
  }
  await recordPackCheckout(
    ctx.db,
    {
      organizationId: deployment.organization_id,
      deploymentId: deployment.id,
      pack,
      credits: chosen.credits,
      checkoutSessionId: session.id,
      priceId: chosen.priceId,
      amountTotal,
      currency: session.currency.slice(0, 10),
    },
    ctx.clock.now(),
  );
  return answerOf(session);
}

/** A Billing Portal session for the organization's customer (made on first need). */
export async function portalSession(ctx: Ctx, organizationId: string, returnUrl: string | undefined): Promise<{ url: string }> {
  const url = checkReturnUrl(ctx, 'return_url', returnUrl, `${ctx.config.publicBaseUrl}/billing`);
  const stripe = requireStripe(ctx);
  const customer = await ensureCustomer(ctx, organizationId);
  const session = await callStripe('the portal session', () => stripe.billingPortal.sessions.create({ customer, return_url: url }));
  return { url: session.url };
}

/** The organization's subscription not ended (active, past due or unpaid), if any: there is no second Checkout then. */
export async function subscriptionInForce(ctx: Ctx, organizationId: string): Promise<string | null> {
  const rows = await ctx.db.query<{ stripe_subscription_id: string }>(
    `SELECT stripe_subscription_id FROM subscriptions WHERE organization_id = $1 AND status IN ('active', 'past_due', 'unpaid')
     ORDER BY updated_at DESC LIMIT 1`,
    [organizationId],
  );
  return rows[0]?.stripe_subscription_id ?? null;
}

/** Change the price of a subscription in force through the API; the caller applies the answer. */
export async function changeSubscriptionPrice(ctx: Ctx, subscriptionId: string, priceId: string): Promise<Stripe.Subscription> {
  const stripe = requireStripe(ctx);
  const current = await callStripe('to read the subscription', () => stripe.subscriptions.retrieve(subscriptionId));
  const item = current.items.data[0];
  if (!item) throw new AppError('CONFLICT', 'The subscription has no item to change');
  if (item.price.id === priceId) return current;
  // The difference is invoiced and charged now, and Stripe applies the new price only once that invoice
  // is paid (a declined card leaves the old price): an upgrade is never in force before it is paid.
  return callStripe('the price change', () =>
    stripe.subscriptions.update(subscriptionId, {
      items: [{ id: item.id, price: priceId }],
      proration_behavior: 'always_invoice',
      payment_behavior: 'pending_if_incomplete',
    }),
  );
}

function answerOf(session: Stripe.Checkout.Session): CheckoutAnswer {
  if (!session.url) throw new AppError('PAYMENT_PROVIDER_ERROR', 'Stripe answered a Checkout Session without a URL');
  return { url: session.url, checkout_session_id: session.id };
}
