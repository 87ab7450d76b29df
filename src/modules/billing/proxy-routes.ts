import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { deploymentOf } from '../../http/auth.js';
import { idempotencyKeyHeader } from '../../http/idempotency-key.js';
import { flatErrors } from '../../http/schemas.js';
import { AppError, ValidationError } from '../../errors.js';
import type { DeploymentRow } from '../deployments/service.js';
import { effectiveFlags } from '../entitlements/flags.js';
import { featureDisabled } from '../quotas/ai-tokens.js';
import { packCheckout, portalSession, subscriptionCheckout, subscriptionInForce, subscriptionPrice } from './checkout.js';
import type { Ctx } from '../../context.js';
import { sellingCatalog } from './account-selling.js';

const ReturnUrl = (description: string) => Type.String({ minLength: 1, maxLength: 2048, description, examples: ['https://app.example.com/billing/done'] });
const PackName = Type.String({ minLength: 1, maxLength: 40, description: 'A pack named in CREDIT_PACKS', examples: ['small'] });

const CheckoutBody = Type.Object(
  {
    price_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'A subscription price listed in STRIPE_PRICE_TIERS', examples: ['price_launch_monthly'] })),
    tier: Type.Optional(Type.String({ minLength: 1, maxLength: 20, description: 'The tier to subscribe to (its price from STRIPE_PRICE_TIERS)', examples: ['launch'] })),
    pack: Type.Optional(PackName),
    success_url: Type.Optional(ReturnUrl('Where Checkout sends the customer after paying (https; http on loopback in development)')),
    cancel_url: Type.Optional(ReturnUrl('Where Checkout sends the customer who turns back')),
  },
  { additionalProperties: false },
);
const PortalBody = Type.Object({ return_url: Type.Optional(ReturnUrl('Where the portal sends the customer back to')) }, { additionalProperties: false });
const PurchaseBody = Type.Object(
  {
    pack: PackName,
    success_url: Type.Optional(ReturnUrl('Where Checkout sends the customer after paying')),
    cancel_url: Type.Optional(ReturnUrl('Where Checkout sends the customer who turns back')),
  },
  { additionalProperties: false },
);
const CheckoutReply = Type.Object({
  url: Type.String({ description: "Stripe Checkout's page for the customer", examples: ['https://checkout.stripe.com/c/pay/cs_test_a1'] }),
  checkout_session_id: Type.String({ description: 'The Checkout Session; its pack is granted once it is paid', examples: ['cs_test_a1'] }),
}, { title: 'CheckoutSession' });
const PortalReply = Type.Object({ url: Type.String({ description: "Stripe's Billing Portal page", examples: ['https://billing.stripe.com/p/session/test_a1'] }) });

const CatalogReply = Type.Object({
  configured: Type.Boolean({ description: 'Whether this installation sells through Stripe (STRIPE_SECRET_KEY is set)' }),
  packs: Type.Array(
    Type.Object({
      pack: Type.String({ examples: ['small'] }),
      credits: Type.Integer({ description: 'Purchased credits the pack grants', examples: [1000] }),
      price_id: Type.String({ description: 'The Stripe price that sells it', examples: ['price_pack_small'] }),
    }),
    { description: 'CREDIT_PACKS, in the order configured' },
  ),
  subscription_prices: Type.Array(
    Type.Object({ price_id: Type.String({ examples: ['price_launch_monthly'] }), tier: Type.String({ examples: ['launch'] }) }),
    { description: 'STRIPE_PRICE_TIERS' },
  ),
}, { title: 'CreditPackCatalog' });

const security = [{ deploymentId: [], deploymentSecret: [] }];
const errors = flatErrors(400, 401, 403, 409, 422, 502, 503);

/** The billing proxy and pack purchases need `billing_enabled` (403 feature_disabled otherwise: docs/entitlements.md, Flags and gates). */
function assertBillingEnabled(ctx: Ctx, deployment: DeploymentRow): void {
  if (!effectiveFlags(deployment.tier, deployment.flag_overrides).billing_enabled) throw featureDisabled(ctx, 'billing');
}

/** The billing proxy and credit-pack purchase, with deployment credentials (docs/billing.md). */
export async function billingProxyRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/api/v1/proxy/billing/checkout',
    {
      config: { auth: 'deployment', spends: true, idempotencyKey: 'accepts' },
      schema: {
        tags: ['Billing proxy'],
        security,
        operationId: 'createCheckoutSession',
        summary: "A Stripe Checkout page: the organization's first subscription ({price_id} or {tier}) or a credit pack ({pack}) for this deployment",
        body: CheckoutBody,
        response: { 200: CheckoutReply, ...errors },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      assertBillingEnabled(ctx, deployment);
      const { pack, price_id, tier, success_url, cancel_url } = request.body;
      const key = idempotencyKeyHeader(request);
      if (pack !== undefined) {
        if (price_id !== undefined || tier !== undefined) {
          throw new ValidationError('Give a pack or a subscription price, not both', [{ field: 'pack', message: 'not together with price_id or tier' }]);
        }
        return packCheckout(ctx, deployment, pack, { success_url, cancel_url }, key);
      }
      const price = subscriptionPrice(ctx, { price_id, tier });
      if (await subscriptionInForce(ctx, deployment.organization_id)) {
        // A price change charges the card on file: that is for the organization's owners and admins
        // (POST /billing/subscription) or the customer in the Billing Portal, not a deployment secret.
        throw new AppError('CONFLICT', 'The organization already has a subscription: change it in the Billing Portal (/api/v1/proxy/billing/portal) or with POST /billing/subscription');
      }
      return subscriptionCheckout(ctx, deployment.organization_id, price, { success_url, cancel_url }, key);
    },
  );

  app.post(
    '/api/v1/proxy/billing/portal',
    {
      config: { auth: 'deployment', spends: true },
      schema: {
        tags: ['Billing proxy'],
        security,
        operationId: 'createPortalSession',
        summary: "A Stripe Billing Portal page for the deployment's organization (invoices, payment method, plan)",
        body: PortalBody,
        response: { 200: PortalReply, ...errors },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      assertBillingEnabled(ctx, deployment);
      return portalSession(ctx, deployment.organization_id, request.body.return_url);
    },
  );

  app.get(
    '/api/v1/credits/packs',
    {
      config: { auth: 'deployment' },
      schema: {
        tags: ['Billing proxy'],
        security,
        operationId: 'listCreditPacks',
        summary: 'What this installation sells: the credit packs and the subscription prices',
        response: { 200: CatalogReply, ...flatErrors(401) },
      },
    },
    async (request) => {
      const { ctx } = deploymentOf(request);
      return sellingCatalog(ctx.config);
    },
  );

  app.post(
    '/api/v1/credits/purchase',
    {
      config: { auth: 'deployment', spends: true, idempotencyKey: 'accepts' },
      schema: {
        tags: ['Billing proxy'],
        security,
        operationId: 'purchaseCreditPack',
        summary: 'Buy a credit pack (CREDIT_PACKS) for this deployment: a Stripe Checkout page; the credits are granted once it is paid',
        body: PurchaseBody,
        response: { 200: CheckoutReply, ...errors },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      assertBillingEnabled(ctx, deployment);
      const { pack, success_url, cancel_url } = request.body;
      return packCheckout(ctx, deployment, pack, { success_url, cancel_url }, idempotencyKeyHeader(request));
    },
  );
}
