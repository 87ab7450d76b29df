import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { anyOf, flatErrors, Nullable } from '../../http/schemas.js';
import { putAutoTopUp, readAutoTopUp } from './auto-top-up.js';

/** The largest line and pack count the setting takes: far below 2^53, as every amount of credits here. */
const MAX_CREDITS = 1_000_000_000_000;

const OrgParams = Type.Object({ id: Type.String({ format: 'uuid', description: 'Organization id' }) });

export const AutoTopUpBody = Type.Object(
  {
    enabled: Type.Boolean({ description: 'On or off; turning it on resets the count of failures in a row' }),
    below_credits: Type.Integer({
      minimum: 1,
      maximum: MAX_CREDITS,
      description: "A deduction that takes a deployment's available credits from at or above this to below starts one top-up",
      examples: [500],
    }),
    pack: Type.String({ minLength: 1, maxLength: 100, description: 'The credit pack bought (a CREDIT_PACKS name)', examples: ['small'] }),
    max_per_month: Type.Integer({ minimum: 1, maximum: 1000, description: 'Top-ups started per calendar month (UTC) in the organization, at most', examples: [5] }),
  },
  { additionalProperties: false, title: 'AutoTopUpInput' },
);

export const AutoTopUpSchema = Type.Object(
  {
    enabled: Type.Boolean(),
    below_credits: Nullable(Type.Integer({ description: 'null until first set' })),
    pack: Nullable(Type.String()),
    max_per_month: Nullable(Type.Integer()),
    consecutive_failures: Type.Integer({ description: 'Failed top-ups in a row; the third switches auto top-up off' }),
    disabled_reason: Nullable(Type.String({ description: 'Why it was switched off by failures; null otherwise' })),
    updated_at: Nullable(Type.String({ format: 'date-time' })),
  },
  { title: 'AutoTopUp' },
);

const tags = ['Billing'];
const WHO = 'Owners and admins (billing.manage); an API key needs admin. Changes are audited.';

/** An organization's auto top-up setting (docs/billing.md, "Auto top-up"), in the application API's envelope. */
export async function autoTopUpRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');
  const config = { auth: 'account' as const };

  app.get(
    '/organizations/:id/auto-top-up',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'getAutoTopUp',
        summary: "The organization's auto top-up setting",
        description: `Never set: enabled false and nulls. ${WHO}`,
        params: OrgParams,
        response: { 200: Envelope(AutoTopUpSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => ok(await readAutoTopUp(ctxOf(request), request.params.id)),
  );

  app.put(
    '/organizations/:id/auto-top-up',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'putAutoTopUp',
        summary: 'Set auto top-up: buy a credit pack off-session when a deployment runs low',
        description:
          'Every field is required. Enabling needs billing available on the primary deployment and a saved payment method on the ' +
          "organization's Stripe customer; otherwise 409 CONFLICT with details.missing (stripe_webhook_secret, billing_available, payment_method) and nothing changes. " +
          `An unknown pack is 400 naming the packs. ${WHO}`,
        params: OrgParams,
        body: AutoTopUpBody,
        response: { 200: Envelope(AutoTopUpSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await putAutoTopUp(ctxOf(request), request.params.id, request.body), 'Auto top-up saved'),
  );
}

/** The same for the operator (docs/operator.md): any organization that exists, the flat /api/v1 shapes, every call audited. */
export async function adminAutoTopUpRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const security = [{ adminKey: [] }];
  const config = { auth: 'admin' as const };
  const adminTags = ['Operator'];

  app.get(
    '/api/v1/admin/organizations/:id/auto-top-up',
    {
      config,
      schema: {
        tags: adminTags,
        security,
        operationId: 'adminGetAutoTopUp',
        summary: "An organization's auto top-up setting",
        description: 'Never set: enabled false and nulls. The read is audited (docs/operator.md).',
        params: OrgParams,
        response: { 200: AutoTopUpSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => readAutoTopUp(ctxOf(request), request.params.id),
  );

  app.put(
    '/api/v1/admin/organizations/:id/auto-top-up',
    {
      config,
      schema: {
        tags: adminTags,
        security,
        operationId: 'adminPutAutoTopUp',
        summary: "Set an organization's auto top-up",
        description:
          'The rules of PUT /organizations/{id}/auto-top-up (docs/billing.md, "Auto top-up"): every field required; enabling without billing ' +
          'available or a saved payment method is 409 CONFLICT with missing (billing_available, payment_method) and nothing changes.',
        params: OrgParams,
        body: AutoTopUpBody,
        response: { 200: AutoTopUpSchema, ...flatErrors(400, 401, 404, 409) },
      },
    },
    async (request) => putAutoTopUp(ctxOf(request), request.params.id, request.body),
  );
}
