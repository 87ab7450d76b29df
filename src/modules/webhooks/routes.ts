import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ValidationError } from '../../errors.js';
import { deploymentOf } from '../../http/auth.js';
import { idempotencyKeyHeader } from '../../http/idempotency-key.js';
import { decodeCursor, PageQuery } from '../../http/envelope.js';
import { flatErrors, Nullable, StringEnum } from '../../http/schemas.js';
import { DeliverySchema } from './organization-routes.js';
import { endUserOf } from '../../http/end-user.js';
import { getProxyDelivery, listProxyDeliveries, type SendInput, sendWebhook, webhookQuota } from './proxy.js';

/** docs/input.md (limits on input): at most 50 extra headers and 8 KiB of them. */
const HEADERS_MAX = 50;
const HEADERS_BYTES_MAX = 8 * 1024;
/**
 * What an HTTP header value may hold (RFC 9110 field-value: tab, visible ASCII, space, obs-text), as
 * undici enforces it: a value it would refuse is 400 here, before the charge (docs/webhooks.md, The proxy).
 */
const HEADER_VALUE = '^[\\t\\x20-\\x7e\\x80-\\xff]*$';
/** event_type goes into the x-service-event header: visible ASCII, no spaces or control characters. */
const EVENT_TYPE = '^[\\x21-\\x7e]{1,100}$';

const SendBody = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048, description: 'http(s) URL of the receiver' }),
    payload: Type.Object({}, { additionalProperties: true, description: 'JSON object sent as the body (≤ 256 KiB)' }),
    method: Type.Optional(StringEnum(['POST', 'PUT', 'PATCH'], { default: 'POST' })),
    headers: Type.Optional(
      Type.Record(
        Type.String({ pattern: "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$" }),
        Type.String({ maxLength: HEADERS_BYTES_MAX, pattern: HEADER_VALUE, description: 'Tab, visible ASCII, space and U+0080–U+00FF only' }),
        {
          maxProperties: HEADERS_MAX,
          additionalProperties: false,
          description: 'Extra headers (≤ 50, ≤ 8 KiB); hop-by-hop, host and content-length are dropped',
        },
      ),
    ),
    secret: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'Signs the delivery: x-service-signature (HMAC-SHA256) keyed with this secret as given; webhook-signature with the base64-decoded remainder of a whsec_ secret' })),
    event_type: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: EVENT_TYPE, description: 'Sent as x-service-event: 1–100 visible ASCII characters, no spaces' })),
    idempotency_key: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Also accepted as the Idempotency-Key header' })),
  },
  { additionalProperties: false },
);

const SendReply = Type.Object({
  success: Type.Boolean(),
  webhookId: Type.String({ description: 'Delivery id; also the webhook-id header the receiver saw' }),
  statusCode: Nullable(Type.Integer()),
  responseBody: Nullable(Type.String({ description: 'The first 4,096 characters of the answer' })),
  error: Nullable(Type.String()),
  creditsUsed: Type.Integer(),
  creditsRemaining: Nullable(Type.Integer({ description: 'null: unlimited' })),
  attempts: Type.Integer(),
  deliveredAt: Nullable(Type.String({ format: 'date-time' })),
}, { title: 'WebhookSendResult' });

const QuotaReply = Type.Object({
  creditsAvailable: Nullable(Type.Integer({ description: 'null: unlimited' })),
  creditsPerWebhook: Type.Integer(),
  webhooksAvailable: Nullable(Type.Integer({ description: 'null: unlimited' })),
  periodEnds: Type.String({ format: 'date-time' }),
}, { title: 'WebhookQuota' });

const tags = ['Webhook proxy'];
const security = [{ deploymentId: [], deploymentSecret: [] }];

export async function webhookProxyRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/api/v1/proxy/webhooks/send',
    {
      config: { auth: 'deployment', spends: true, idempotencyKey: 'replays' },
      schema: {
        tags,
        security,
        operationId: 'sendWebhook',
        summary: 'Deliver a JSON payload to a URL: signed, retried up to 3 times, idempotent, 1 credit per send',
        body: SendBody,
        response: { 200: SendReply, ...flatErrors(400, 401, 403, 409, 422) },
      },
    },
    async (request, reply) => {
      const { deployment, ctx } = deploymentOf(request);
      const headerKey = idempotencyKeyHeader(request);
      const headers = request.body.headers ?? {};
      const headerBytes = Object.entries(headers).reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v), 0);
      if (headerBytes > HEADERS_BYTES_MAX) {
        throw new ValidationError(`headers are ${headerBytes} bytes; at most ${HEADERS_BYTES_MAX}`, [
          { field: 'headers', message: `must be at most ${HEADERS_BYTES_MAX} bytes in all` },
        ]);
      }
      // The end user the send is for, for end-user budgets (docs/budgets.md).
      const endUserId = endUserOf(request, null, 'X-End-User-Id');
      const { reply: answer, replayed } = await sendWebhook(ctx, deployment, request.body as SendInput, headerKey, endUserId);
      if (replayed) reply.header('idempotent-replayed', 'true');
      return answer;
    },
  );

  app.get(
    '/api/v1/proxy/webhooks/quota',
    {
      config: { auth: 'deployment' },
      schema: {
        tags,
        security,
        operationId: 'getWebhookQuota',
        summary: 'Credits available for webhook sends and how many sends they pay for',
        response: { 200: QuotaReply, ...flatErrors(401) },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      return webhookQuota(ctx, deployment);
    },
  );

  app.get(
    '/api/v1/proxy/webhooks/deliveries',
    {
      config: { auth: 'deployment' },
      schema: {
        tags,
        security,
        operationId: 'listProxyDeliveries',
        summary: "The deployment's proxy sends (delivery records), newest first",
        querystring: PageQuery,
        response: {
          200: Type.Object({ data: Type.Array(DeliverySchema), next_cursor: Nullable(Type.String()) }),
          ...flatErrors(400, 401),
        },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      const { items, next } = await listProxyDeliveries(ctx, deployment, {
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return { data: items, next_cursor: next };
    },
  );

  app.get(
    '/api/v1/proxy/webhooks/deliveries/:webhookId',
    {
      config: { auth: 'deployment' },
      schema: {
        tags,
        security,
        operationId: 'getProxyDelivery',
        summary: 'One proxy send by its webhookId',
        params: Type.Object({ webhookId: Type.String({ format: 'uuid' }) }),
        response: { 200: DeliverySchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      return getProxyDelivery(ctx, deployment, request.params.webhookId);
    },
  );
}
