import type { Config } from '../../config.js';
import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { type DeploymentRow, getDeployment, listDeployments } from '../deployments/service.js';
import { authorize } from '../organizations/rbac.js';
import { type CheckoutAnswer, packCheckout, portalSession, type ReturnUrls } from './checkout.js';
import { type BillingSelection, billingOrganization } from './service.js';

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

/** GET /billing/catalog (billing.read). */
export async function readSellingCatalog(ctx: Ctx, sel: BillingSelection): Promise<SellingCatalog> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.read');
  return sellingCatalog(ctx.config);
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
