import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { flatErrors } from '../../http/schemas.js';
import { receiveStripeEvent } from './stripe-events.js';

/**
 * `POST /webhooks/stripe` (docs/billing.md, Inbound events): the raw body is what Stripe signed, so this plugin (and only
 * this one) keeps JSON bodies as strings. 200 `{status:"success"}` once the event is stored; a bad
 * signature or body is 400 and stores nothing.
 */
export async function stripeWebhookRoutes(fastify: FastifyInstance): Promise<void> {
  // In place of the app's JSON parser (http/json-body.ts), for this plugin only.
  fastify.removeContentTypeParser('application/json');
  fastify.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => done(null, body));
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.post(
    '/webhooks/stripe',
    {
      config: { auth: 'public' },
      schema: {
        tags: ['Billing'],
        operationId: 'receiveStripeEvent',
        summary: 'Stripe events (signed with STRIPE_WEBHOOK_SECRET): subscriptions, Checkout Sessions, refunds, invoices',
        description:
          'Verified with the Stripe-Signature header over the raw body, 5-minute tolerance either way (too old or dated ahead: 400). A Checkout event grants only a sale this installation stored when it made the session, never what the event carries (docs/billing.md). Each event is stored by its id before it is acted on; a duplicate is acknowledged and ignored; an event whose handling failed is retried by the stripe-events worker.',
        headers: Type.Object({ 'stripe-signature': Type.Optional(Type.String({ maxLength: 4096, description: 't=<unix seconds>,v1=<hex HMAC-SHA256>' })) }),
        body: Type.String({ description: 'A Stripe event, exactly as Stripe sent it', contentMediaType: 'application/json' }),
        response: {
          200: Type.Object({ status: Type.Literal('success') }, { description: 'Stored (or a duplicate): Stripe stops retrying' }),
          ...flatErrors(400),
        },
      },
    },
    async (request) => {
      await receiveStripeEvent(request.server.deps, request.body, request.headers['stripe-signature']);
      return { status: 'success' as const };
    },
  );
}
