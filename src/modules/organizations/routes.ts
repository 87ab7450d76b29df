import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { decodeCursor, Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery, pageOf } from '../../http/envelope.js';
import { anyOf, Nullable, StoredUrl, StringEnum } from '../../http/schemas.js';
import {
  createOrganizationForCaller,
  deleteOrganization,
  getOrganization,
  listOrganizations,
  SLUG_RE,
  updateOrganization,
  viewOrganization,
} from './service.js';

const Plan = StringEnum(['free', 'pro', 'enterprise'], { description: 'Organization plan' });
const Slug = Type.String({ pattern: SLUG_RE.source, maxLength: 63, description: 'URL-friendly, unique', examples: ['acme'] });
const Name = Type.String({ minLength: 1, maxLength: 200 });

export const OrganizationSchema = Type.Object({
  id: Type.String({ format: 'uuid' }),
  name: Type.String(),
  slug: Type.String(),
  tier: Type.String({ description: 'Plan: free, pro or enterprise' }),
  logo_url: Nullable(Type.String()),
  website: Nullable(Type.String()),
  subscription_status: Nullable(Type.String()),
  role: Nullable(Type.String({ description: "The caller's role (null for an API key)" })),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
}, { title: 'Organization' });

const Created = Type.Object({
  ...OrganizationSchema.properties,
  deployment: Type.Object({
    id: Type.String({ format: 'uuid' }),
    tier: Type.String(),
    secret: Type.String({ description: 'The primary deployment secret, shown once' }),
  }),
}, { title: 'OrganizationCreated' });

export const CreateBody = Type.Object({ name: Name, slug: Slug, tier: Type.Optional(Plan) }, { additionalProperties: false });
const Id = Type.Object({ id: Type.String({ format: 'uuid' }) });
const tags = ['Organizations'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');

export async function organizationRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations',
    {
      config: { auth: 'account' },
      schema: { tags, security, operationId: 'listOrganizations', summary: "The caller's organizations", querystring: PageQuery, response: { 200: PageEnvelope(OrganizationSchema), ...envelopeErrors(400, 401) } },
    },
    async (request) => {
      const limit = request.query.limit ?? 20;
      const rows = await listOrganizations(ctxOf(request), { limit, cursor: decodeCursor(request.query.cursor) });
      const { items, next } = pageOf(rows, limit, (r) => r.created_at);
      return page(items.map((r) => viewOrganization(r, r.role)), next);
    },
  );

  for (const [path, operationId] of [
    ['/organizations', 'createOrganization'],
    ['/api/organizations', 'createOrganizationSelfHosted'],
  ] as const) {
    app.post(
      path,
      {
        config: { auth: 'account' },
        schema: {
          tags,
          security,
          operationId,
          summary: 'Create an organization (the caller becomes owner) with its primary deployment',
          body: CreateBody,
          response: { 201: Envelope(Created), ...envelopeErrors(400, 401, 403, 409) },
        },
      },
      async (request, reply) => reply.code(201).send(ok(await createOrganizationForCaller(ctxOf(request), request.body), 'Organization created')),
    );
  }

  app.get(
    '/organizations/:id',
    {
      config: { auth: 'account' },
      schema: { tags, security, operationId: 'getOrganization', summary: 'Organization details', params: Id, response: { 200: Envelope(OrganizationSchema), ...envelopeErrors(401, 403, 404) } },
    },
    async (request) => ok(await getOrganization(ctxOf(request), request.params.id)),
  );

  app.put(
    '/organizations/:id',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'updateOrganization',
        summary: 'Update settings (owner, admin)',
        params: Id,
        body: Type.Object(
          {
            name: Type.Optional(Name),
            slug: Type.Optional(Slug),
            logo_url: Type.Optional(Nullable(StoredUrl("The organization's logo"))),
            website: Type.Optional(Nullable(StoredUrl("The organization's website"))),
          },
          { additionalProperties: false },
        ),
        response: { 200: Envelope(OrganizationSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await updateOrganization(ctxOf(request), request.params.id, request.body), 'Organization updated'),
  );

  app.delete(
    '/organizations/:id',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'deleteOrganization',
        summary: 'Delete (owner only; soft delete, every key and deployment secret stops at once)',
        params: Id,
        response: { 200: Envelope(Type.Null()), ...envelopeErrors(401, 403, 404) },
      },
    },
    async (request) => {
      await deleteOrganization(ctxOf(request), request.params.id);
      return ok(null, 'Organization deleted');
    },
  );
}
