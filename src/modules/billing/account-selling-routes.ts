import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { idempotencyKeyHeader } from '../../http/idempotency-key.js';
import { anyOf, Nullable, StringEnum } from '../../http/schemas.js';
import { buyCreditPack, openBillingPortal, readSellingCatalog } from './account-selling.js';
import type { BillingSelection } from './service.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const ReturnUrl = (description: string) => Type.String({ minLength: 1, maxLength: 2048, description, examples: ['https://app.example.com/billing/done'] });

const OrganizationId = Type.Optional(Uuid('The organization to act for; else X-Organization-ID, the default organization, or the only one'));
const SelectionQuery = Type.Object({ organization_id: OrganizationId }, { additionalProperties: false });
const SelectionHeaders = Type.Object({
  'x-organization-id': Type.Optional(Uuid('The organization to act for (same as ?organization_id=)')),
});

const UnitAmount = Nullable(
  Type.Integer({
    description:
      "The price in the currency's smallest unit (4900 usd = $49.00), read from Stripe; null when it could not be read (see prices_read) or the price has no unit amount (tiered, metered)",
    examples: [4900],
  }),
);
const Currency = Nullable(Type.String({ description: "The price's currency, Stripe's lower-case ISO code; null when the price could not be read", examples: ['usd'] }));

const CatalogSchema = Type.Object(
  {
    configured: Type.Boolean({ description: 'Whether this installation sells through Stripe (STRIPE_SECRET_KEY is set)' }),
    prices_read: Type.Boolean({
      description:
        'Whether every price below was read from Stripe (now or in the last 5 minutes). False when Stripe is not configured, not reachable, or refused a read: those prices have null amounts, and the catalog is answered anyway',
    }),
    packs: Type.Array(
      Type.Object({
        pack: Type.String({ description: 'The pack name to buy', examples: ['small'] }),
        credits: Type.Integer({ description: 'Purchased credits the pack grants', examples: [1000] }),
        price_id: Type.String({ description: 'The Stripe price that sells it', examples: ['price_pack_small'] }),
        unit_amount: UnitAmount,
        currency: Currency,
      }),
      { description: 'CREDIT_PACKS, in the order configured' },
    ),
    subscription_prices: Type.Array(
      Type.Object({
        price_id: Type.String({ description: 'A subscription price', examples: ['price_launch_monthly'] }),
        tier: Type.String({ description: 'The deployment tier it sells', examples: ['launch'] }),
        monthly_credits: Nullable(
          Type.Integer({ description: "The tier's monthly credit allocation (docs/entitlements.md); null: unlimited", examples: [2000] }),
        ),
        unit_amount: UnitAmount,
        currency: Currency,
        interval: Nullable(
          StringEnum(['day', 'week', 'month', 'year'], { description: 'How often it is billed (with interval_count); null when the price could not be read or is not recurring' }),
        ),
        interval_count: Nullable(Type.Integer({ description: 'Intervals between bills: 1 bills every interval; null as interval', examples: [1] })),
      }),
      { description: 'STRIPE_PRICE_TIERS' },
    ),
  },
  { title: 'BillingCatalog' },
);

const PackCheckoutBody = Type.Object(
  {
    pack: Type.String({ minLength: 1, maxLength: 40, description: 'A pack named in CREDIT_PACKS', examples: ['small'] }),
    deployment_id: Type.Optional(Uuid("The organization's deployment that gets the credits; default: the primary one")),
    success_url: Type.Optional(ReturnUrl('Where Checkout sends the customer after paying (https; http on loopback in development)')),
    cancel_url: Type.Optional(ReturnUrl('Where Checkout sends the customer who turns back')),
  },
  { additionalProperties: false },
);
const PackCheckoutSchema = Type.Object(
  {
    url: Type.String({ description: "Stripe Checkout's page: send the customer there", examples: ['https://checkout.stripe.com/c/pay/cs_test_a1'] }),
    checkout_session_id: Type.String({ description: 'The Checkout Session; its pack is granted once it is paid', examples: ['cs_test_a1'] }),
  },
  { title: 'CreditPackCheckout' },
);
const PortalBody = Type.Object({ return_url: Type.Optional(ReturnUrl('Where the portal sends the customer back to')) }, { additionalProperties: false });
const PortalSchema = Type.Object(
  { url: Type.String({ description: "Stripe's Billing Portal page: send the customer there", examples: ['https://billing.stripe.com/p/session/test_a1'] }) },
  { title: 'BillingPortalSession' },
);

const tags = ['Billing'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');

function selectionOf(request: { query: { organization_id?: string | undefined }; headers: { 'x-organization-id'?: string | undefined } }): BillingSelection {
  return { queryOrganizationId: request.query.organization_id, headerOrganizationId: request.headers['x-organization-id'] };
}

/**
 * Selling to an organization's owners and admins (docs/billing.md "Selling"): the catalog, a credit
 * pack's Checkout and the Billing Portal, with a user's token or an API key instead of deployment
 * credentials. Without STRIPE_SECRET_KEY (or packs) they answer 503 BILLING_NOT_CONFIGURED.
 */
export async function accountSellingRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/billing/catalog',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'getBillingCatalog',
        summary: 'What this installation sells: credit packs and subscription prices, with their prices from Stripe (billing.read)',
        querystring: SelectionQuery,
        headers: SelectionHeaders,
        response: { 200: Envelope(CatalogSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => ok(await readSellingCatalog(ctxOf(request), selectionOf(request))),
  );

  app.post(
    '/billing/credit-packs/checkout',
    {
      config: { auth: 'account', idempotencyKey: 'accepts' },
      schema: {
        tags,
        security,
        operationId: 'buyCreditPack',
        summary: "Buy a credit pack for one of the organization's deployments: a Stripe Checkout page; the credits are granted once it is paid (billing.manage)",
        querystring: SelectionQuery,
        headers: SelectionHeaders,
        body: PackCheckoutBody,
        response: { 200: Envelope(PackCheckoutSchema), ...envelopeErrors(400, 401, 403, 404, 422, 502, 503) },
      },
    },
    async (request) => {
      const { pack, deployment_id, success_url, cancel_url } = request.body;
      const checkout = await buyCreditPack(
        ctxOf(request),
        selectionOf(request),
        { pack, deploymentId: deployment_id, success_url, cancel_url },
        idempotencyKeyHeader(request),
      );
      return ok(checkout, 'Send the customer to data.url to pay');
    },
  );

  app.post(
    '/billing/portal',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'openBillingPortal',
        summary: "A Stripe Billing Portal page for the organization: invoices, payment method, plan (billing.manage)",
        querystring: SelectionQuery,
        headers: SelectionHeaders,
        body: PortalBody,
        response: { 200: Envelope(PortalSchema), ...envelopeErrors(400, 401, 403, 404, 502, 503) },
      },
    },
    async (request) => ok(await openBillingPortal(ctxOf(request), selectionOf(request), request.body.return_url)),
  );
}
