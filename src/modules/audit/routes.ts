import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { envelopeErrors, page, PageEnvelope, PageQuery } from '../../http/envelope.js';
import { decodeCursor } from '../../http/envelope.js';
import { anyOf, Nullable } from '../../http/schemas.js';
import { listAuditLogs } from './list.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });

const AuditLogSchema = Type.Object({
  id: Uuid('Audit entry id'),
  organization_id: Uuid('The organization the change belongs to'),
  user_id: Nullable(Uuid('The user who acted; null when an API key, the operator or the system did')),
  actor: Type.String({ description: 'Who acted: user:<id>, api_key:<id>, operator, service or system', examples: ['api_key:6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] }),
  action: Type.String({ description: 'create, update, delete, revoke, rotate_secret, override, login…', examples: ['create'] }),
  resource_type: Type.String({ description: 'What changed', examples: ['api_key'] }),
  resource_id: Nullable(Type.String({ description: 'Id of what changed', examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] })),
  metadata: Type.Record(Type.String(), Type.Unknown(), { description: 'Details of the change (never a secret)', examples: [{ name: 'CI', scopes: ['read'] }] }),
  ip_address: Nullable(Type.String({ description: 'Client address of the request', examples: ['203.0.113.7'] })),
  user_agent: Nullable(Type.String({ description: 'User-Agent of the request', examples: ['curl/8.5.0'] })),
  created_at: Type.String({ format: 'date-time', description: 'When it happened', examples: ['2026-01-15T12:00:00.000Z'] }),
}, { title: 'AuditLogEntry' });

const Query = Type.Object(
  {
    ...PageQuery.properties,
    action: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Only entries with this action', examples: ['revoke'] })),
    resource_type: Type.Optional(
      Type.String({ minLength: 1, maxLength: 100, description: 'Only entries about this kind of resource', examples: ['api_key'] }),
    ),
  },
  { additionalProperties: false },
);

/** The audit log of an organization (docs/decisions-keys-billing.md, Audit log). */
export async function auditRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations/:id/audit-logs',
    {
      config: { auth: 'account' },
      schema: {
        tags: ['Audit log'],
        security: anyOf('bearerAuth', 'apiKeyHeader', 'apiKey'),
        operationId: 'listAuditLogs',
        summary: 'The audit log, newest first (owner, admin; key scope admin)',
        params: Type.Object({ id: Uuid('Organization id') }),
        querystring: Query,
        response: { 200: PageEnvelope(AuditLogSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { items, next } = await listAuditLogs(ctxOf(request), {
        organizationId: request.params.id,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
        action: request.query.action,
        resourceType: request.query.resource_type,
      });
      return page(items, next);
    },
  );
}
