import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery } from '../../http/envelope.js';
import { decodeCursor } from '../../http/envelope.js';
import { anyOf, Nullable } from '../../http/schemas.js';
import { idempotencyKeyHeader } from '../../http/idempotency-key.js';
import { type BillingSelection, getSubscription, getUsage, listInvoices } from './service.js';
import { subscribe } from './subscribe.js';
import { accountSellingRoutes } from './account-selling-routes.js';
import { topUpRoutes } from './top-up.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const Timestamp = (description: string) => Type.String({ format: 'date-time', description, examples: ['2026-01-15T12:00:00.000Z'] });
const Int = (description: string, example = 0) => Type.Integer({ description, examples: [example] });
const NullableInt = (description: string, example = 0) => Nullable(Type.Integer({ description, examples: [example] }));

const OrganizationId = Type.Optional(Uuid('The organization to act for; else X-Organization-ID, the default organization, or the only one'));
const SelectionQuery = Type.Object({ organization_id: OrganizationId }, { additionalProperties: false });
const PagedSelectionQuery = Type.Object({ ...PageQuery.properties, organization_id: OrganizationId }, { additionalProperties: false });
const SelectionHeaders = Type.Object({
  'x-organization-id': Type.Optional(Uuid('The organization to act for (same as ?organization_id=)')),
});

const SubscriptionSchema = Type.Object({
  id: Uuid('Subscription id'),
  organization_id: Uuid('Organization id'),
  status: Type.String({ description: 'active, canceled, past_due or unpaid', examples: ['active'] }),
  stripe_subscription_id: Type.String({ description: 'Stripe subscription reference', examples: ['sub_1Nv0'] }),
  stripe_customer_id: Type.String({ description: 'Stripe customer reference', examples: ['cus_O2x9'] }),
  stripe_price_id: Nullable(Type.String({ description: 'Stripe price reference', examples: ['price_launch_monthly'] })),
  current_period_start: Nullable(Timestamp('Start of the billing period')),
  current_period_end: Nullable(Timestamp('End of the billing period')),
  cancel_at_period_end: Type.Boolean({ description: 'Ends when the period ends' }),
  created_at: Timestamp('Creation time'),
  updated_at: Timestamp('Last change'),
}, { title: 'Subscription' });

const UsageSchema = Type.Object({
  organization_id: Uuid('Organization id'),
  deployment_id: Uuid('The primary deployment, whose period this is'),
  tier: Type.String({ description: 'Tier of the primary deployment', examples: ['launch'] }),
  period_start: Timestamp('Start of the current period'),
  period_end: Timestamp('End of the current period'),
  metrics: Type.Array(
    Type.Object({
      metric: Type.String({ description: 'The metered action', examples: ['rag_query'] }),
      count: Int('Successful calls this period', 12),
      quantity: Int('Credits charged for them', 24),
      refunded: Int('Credits of them refunded since', 0),
    }),
    { description: 'Successful usage records of the period, per metric' },
  ),
  credits: Type.Object({
    monthly_allocation: NullableInt('Credits granted this period; null = unlimited', 2000),
    monthly_used: Int('Monthly credits used', 24),
    monthly_remaining: NullableInt('Monthly credits left; null = unlimited', 1976),
    purchased: Int('Purchased credits (never reset)', 0),
    reserved: Int('Held by open reservations', 0),
    available: NullableInt('What a new call may spend; null = unlimited', 1976),
  }),
  ai_tokens: Type.Object({
    used: Int('AI tokens used this period', 0),
    limit: NullableInt('AI tokens per period; null = unlimited', 10000),
    remaining: NullableInt('AI tokens left; null = unlimited', 10000),
    by_model: Type.Array(
      Type.Object({
        model: Type.String({ description: 'The model the calls named', examples: ['gpt-4o-mini'] }),
        calls: Int('AI calls this period', 3),
        input_tokens: Int('Prompt tokens', 420),
        output_tokens: Int('Completion tokens', 180),
        credits: Int('Purchased credits paid for tokens past the quota', 0),
        estimated_calls: Int('Calls counted by the tokenizer because the provider reported no usage', 0),
      }),
      { description: 'AI tokens of the period by model (the organization\'s usage records)' },
    ),
  }),
}, { title: 'BillingUsage' });

const InvoiceSchema = Type.Object({
  id: Uuid('Invoice id'),
  organization_id: Uuid('Organization id'),
  stripe_invoice_id: Type.String({ description: 'Stripe invoice reference', examples: ['in_1Nv0'] }),
  status: Nullable(Type.String({ description: 'draft, open, paid, uncollectible or void', examples: ['paid'] })),
  amount_due: NullableInt('Amount due in the smallest currency unit', 4900),
  amount_paid: NullableInt('Amount paid in the smallest currency unit', 4900),
  currency: Nullable(Type.String({ description: 'ISO currency code, lower case', examples: ['usd'] })),
  hosted_invoice_url: Nullable(Type.String({ description: "Stripe's page for the invoice", examples: ['https://invoice.stripe.com/i/acct_1/test'] })),
  period_start: Nullable(Timestamp('Start of the invoiced period')),
  period_end: Nullable(Timestamp('End of the invoiced period')),
  created_at: Timestamp('When the invoice was stored'),
}, { title: 'Invoice' });

const tags = ['Billing'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');
const errors = envelopeErrors(400, 401, 403, 404);

function selectionOf(request: { query: { organization_id?: string | undefined }; headers: { 'x-organization-id'?: string | undefined } }): BillingSelection {
  return { queryOrganizationId: request.query.organization_id, headerOrganizationId: request.headers['x-organization-id'] };
}

const ReturnUrl = (description: string) => Type.String({ minLength: 1, maxLength: 2048, description, examples: ['https://app.example.com/billing/done'] });
const SubscribeBody = Type.Object(
  {
    price_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'A price listed in STRIPE_PRICE_TIERS', examples: ['price_launch_monthly'] })),
    tier: Type.Optional(Type.String({ minLength: 1, maxLength: 20, description: 'The tier to buy; its price comes from STRIPE_PRICE_TIERS', examples: ['growth'] })),
    success_url: Type.Optional(ReturnUrl('After paying in Checkout (https; http on loopback in development)')),
    cancel_url: Type.Optional(ReturnUrl('When the customer turns back in Checkout')),
  },
  { additionalProperties: false, description: 'price_id or tier' },
);
const CheckoutSchema = Type.Object({
  url: Type.String({ description: "Stripe Checkout's page: send the customer there", examples: ['https://checkout.stripe.com/c/pay/cs_test_a1'] }),
  checkout_session_id: Type.String({ description: 'The Checkout Session', examples: ['cs_test_a1'] }),
}, { title: 'SubscriptionCheckout' });

/** Billing endpoints of the application API (docs/billing.md, docs/decisions-keys-billing.md): reads, and starting or changing the subscription. */
export async function billingRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/billing/subscription',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'getSubscription',
        summary: "The organization's subscription, or data: null when it has none (billing.read)",
        querystring: SelectionQuery,
        headers: SelectionHeaders,
        response: { 200: Envelope(Nullable(SubscriptionSchema)), ...errors },
      },
    },
    async (request) => {
      const subscription = await getSubscription(ctxOf(request), selectionOf(request));
      return ok(subscription, subscription ? 'OK' : 'No subscription');
    },
  );

  app.post(
    '/billing/subscription',
    {
      config: { auth: 'account', idempotencyKey: 'accepts' },
      schema: {
        tags,
        security,
        operationId: 'changeSubscription',
        summary:
          'Subscribe or change plan (billing.manage): without a subscription, a Checkout Session (data.url); with one, its price changes and data is the subscription',
        querystring: SelectionQuery,
        headers: SelectionHeaders,
        body: SubscribeBody,
        response: { 200: Envelope(Type.Union([CheckoutSchema, Nullable(SubscriptionSchema)])), ...envelopeErrors(400, 401, 403, 404, 409, 422, 502) },
      },
    },
    async (request) => {
      const answer = await subscribe(ctxOf(request), selectionOf(request), request.body, idempotencyKeyHeader(request));
      if (answer.kind === 'checkout') return ok(answer.checkout, 'Send the customer to data.url to subscribe');
      return ok(answer.subscription, 'Subscription changed');
    },
  );

  app.get(
    '/billing/usage',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'getBillingUsage',
        summary: 'Usage metrics, credits and AI tokens of the current billing period (billing.read)',
        querystring: SelectionQuery,
        headers: SelectionHeaders,
        response: { 200: Envelope(UsageSchema), ...errors },
      },
    },
    async (request) => ok(await getUsage(ctxOf(request), selectionOf(request))),
  );

  app.get(
    '/billing/invoices',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'listInvoices',
        summary: "The organization's invoices, newest first (billing.read)",
        querystring: PagedSelectionQuery,
        headers: SelectionHeaders,
        response: { 200: PageEnvelope(InvoiceSchema), ...errors },
      },
    },
    async (request) => {
      const { items, next } = await listInvoices(ctxOf(request), selectionOf(request), {
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return page(items, next);
    },
  );

  // The catalog, credit packs and the Billing Portal for owners and admins (the console's billing page).
  await fastify.register(accountSellingRoutes);
  // The top-up link's page, for whoever holds a refusal's link (docs/billing.md, "Top-up link").
  await fastify.register(topUpRoutes);
}
