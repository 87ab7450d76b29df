import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery } from '../../http/envelope.js';
import { decodeCursor } from '../../http/envelope.js';
import { anyOf } from '../../http/schemas.js';
import { ApiKeyParams, ApiKeySchema, CreateApiKeyBody, CreatedApiKeySchema, OrganizationParams } from './schemas.js';
import { createOrganizationApiKey, listApiKeys, revokeOrganizationApiKey } from './service.js';

const tags = ['API keys'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');

/** Organization API keys (docs/decisions-keys-billing.md, API keys): list (api_keys.read), create and revoke (api_keys.manage, key scope admin). */
export async function apiKeyRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations/:id/api-keys',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'listApiKeys',
        summary: "An organization's API keys, newest first (never the key or its hash)",
        params: OrganizationParams,
        querystring: PageQuery,
        response: { 200: PageEnvelope(ApiKeySchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { items, next } = await listApiKeys(ctxOf(request), {
        organizationId: request.params.id,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return page(items, next);
    },
  );

  app.post(
    '/organizations/:id/api-keys',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'createApiKey',
        summary: 'Create an API key (owner, admin; key scope admin); data.key is shown once',
        params: OrganizationParams,
        body: CreateApiKeyBody,
        response: { 201: Envelope(CreatedApiKeySchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      const created = await createOrganizationApiKey(ctxOf(request), {
        organizationId: request.params.id,
        name: request.body.name,
        scopes: request.body.scopes,
        expiresAt: request.body.expires_at,
      });
      return reply.code(201).send(ok(created, 'API key created; store data.key now, it is not shown again'));
    },
  );

  app.delete(
    '/organizations/:id/api-keys/:keyId',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'revokeApiKey',
        summary: 'Revoke an API key (owner, admin; key scope admin): refused everywhere from now on',
        params: ApiKeyParams,
        response: { 200: Envelope(ApiKeySchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) =>
      ok(await revokeOrganizationApiKey(ctxOf(request), { organizationId: request.params.id, apiKeyId: request.params.keyId }), 'API key revoked'),
  );
}
