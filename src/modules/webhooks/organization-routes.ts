import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { decodeCursor, Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery } from '../../http/envelope.js';
import { anyOf, Nullable } from '../../http/schemas.js';
import {
  createWebhook,
  deleteWebhook,
  EVENT_TYPES,
  listDeliveries,
  listWebhooks,
  readWebhook,
  retryDelivery,
  testWebhook,
  updateWebhook,
} from './organization.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description });
const Timestamp = Type.String({ format: 'date-time' });
const OrgParams = Type.Object({ id: Uuid('Organization id') });
const WebhookParams = Type.Object({ id: Uuid('Organization id'), webhookId: Uuid('Webhook id') });
const DeliveryParams = Type.Object({ id: Uuid('Organization id'), webhookId: Uuid('Webhook id'), deliveryId: Uuid('Delivery id') });
const EventList = Type.Array(Type.String({ enum: [...EVENT_TYPES] }), { minItems: 1, maxItems: EVENT_TYPES.length, uniqueItems: true });
const Url = Type.String({ minLength: 1, maxLength: 2048, description: 'http(s) URL of the receiver' });

const WebhookSchema = Type.Object({
  id: Type.String(),
  organization_id: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  is_active: Type.Boolean(),
  disabled_reason: Nullable(Type.String()),
  created_at: Timestamp,
  updated_at: Timestamp,
}, { title: 'Webhook' });
const CreatedWebhookSchema = Type.Object({
  ...WebhookSchema.properties,
  secret: Type.String({ description: 'The signing secret; shown once' }),
}, { title: 'CreatedWebhook' });
export const DeliverySchema = Type.Object({
  id: Type.String(),
  webhook_id: Nullable(Type.String({ description: 'null for a proxy send' })),
  url: Type.String(),
  method: Type.String(),
  event_type: Nullable(Type.String()),
  payload: Type.Unknown(),
  status: Type.String({ description: 'pending | delivered | failed' }),
  status_code: Nullable(Type.Integer()),
  response_body: Nullable(Type.String()),
  error: Nullable(Type.String()),
  attempt_count: Type.Integer(),
  next_retry_at: Nullable(Timestamp),
  delivered_at: Nullable(Timestamp),
  created_at: Timestamp,
}, { title: 'WebhookDelivery' });

const tags = ['Webhooks'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');
const config = { auth: 'account' as const };

/** Organization webhooks (docs/webhooks.md): read with webhooks.read, manage with webhooks.manage (admins and owners; key scope admin). */
export async function organizationWebhookRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations/:id/webhooks',
    { config, schema: { tags, security, operationId: 'listWebhooks', summary: "The organization's webhooks (never their secrets)", params: OrgParams, response: { 200: Envelope(Type.Array(WebhookSchema)), ...envelopeErrors(400, 401, 403, 404) } } },
    async (request) => ok(await listWebhooks(ctxOf(request), request.params.id)),
  );

  app.post(
    '/organizations/:id/webhooks',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'createWebhook',
        summary: 'Create a webhook; data.secret (sent or generated whsec_…) is shown once',
        description: 'At most 20 webhooks an organization: the 21st is 409 CONFLICT (docs/webhooks.md).',
        params: OrgParams,
        body: Type.Object(
          {
            url: Url,
            events: EventList,
            secret: Type.Optional(Type.String({ minLength: 24, maxLength: 256 })),
            is_active: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: { 201: Envelope(CreatedWebhookSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request, reply) => {
      const created = await createWebhook(ctxOf(request), {
        organizationId: request.params.id,
        url: request.body.url,
        events: request.body.events,
        secret: request.body.secret,
        isActive: request.body.is_active,
      });
      return reply.code(201).send(ok(created, 'Webhook created; store data.secret now, it is not shown again'));
    },
  );

  app.get(
    '/organizations/:id/webhooks/:webhookId',
    { config, schema: { tags, security, operationId: 'getWebhook', summary: 'One webhook', params: WebhookParams, response: { 200: Envelope(WebhookSchema), ...envelopeErrors(400, 401, 403, 404) } } },
    async (request) => ok(await readWebhook(ctxOf(request), request.params.id, request.params.webhookId)),
  );

  app.patch(
    '/organizations/:id/webhooks/:webhookId',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'updateWebhook',
        summary: 'Change URL, events or is_active (enabling clears the disabled reason)',
        params: WebhookParams,
        body: Type.Object({ url: Type.Optional(Url), events: Type.Optional(EventList), is_active: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
        response: { 200: Envelope(WebhookSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) =>
      ok(
        await updateWebhook(ctxOf(request), {
          organizationId: request.params.id,
          webhookId: request.params.webhookId,
          url: request.body.url,
          events: request.body.events,
          isActive: request.body.is_active,
        }),
      ),
  );

  app.delete(
    '/organizations/:id/webhooks/:webhookId',
    { config, schema: { tags, security, operationId: 'deleteWebhook', summary: 'Delete a webhook; its pending deliveries are not sent', params: WebhookParams, response: { 200: Envelope(WebhookSchema), ...envelopeErrors(400, 401, 403, 404) } } },
    async (request) => ok(await deleteWebhook(ctxOf(request), request.params.id, request.params.webhookId), 'Webhook deleted'),
  );

  app.get(
    '/organizations/:id/webhooks/:webhookId/deliveries',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'listWebhookDeliveries',
        summary: "A webhook's delivery records, newest first",
        params: WebhookParams,
        querystring: PageQuery,
        response: { 200: PageEnvelope(DeliverySchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { items, next } = await listDeliveries(ctxOf(request), {
        organizationId: request.params.id,
        webhookId: request.params.webhookId,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return page(items, next);
    },
  );

  app.post(
    '/organizations/:id/webhooks/:webhookId/deliveries/:deliveryId/retry',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'retryWebhookDelivery',
        summary: 'Retry a delivery now (not delivered, fewer than 5 attempts; else 409)',
        description:
          "403 DEPLOYMENT_SUSPENDED while the organization's primary deployment is suspended; 429 RATE_LIMITED past 5 test sends and retries per organization per minute (docs/webhooks.md).",
        params: DeliveryParams,
        response: { 200: Envelope(DeliverySchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) =>
      ok(
        await retryDelivery(ctxOf(request), { organizationId: request.params.id, webhookId: request.params.webhookId, deliveryId: request.params.deliveryId }),
        'Delivery queued',
      ),
  );

  app.post(
    '/organizations/:id/webhooks/:webhookId/test',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'sendTestWebhook',
        summary: 'Send a webhook.test event to this webhook now (one attempt); answers its delivery record',
        description:
          "A disabled webhook is 409; 403 DEPLOYMENT_SUSPENDED while the organization's primary deployment is suspended; 429 RATE_LIMITED past 5 test sends and retries per organization per minute (docs/webhooks.md).",
        params: WebhookParams,
        response: { 200: Envelope(DeliverySchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await testWebhook(ctxOf(request), request.params.id, request.params.webhookId)),
  );
}
