import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { decodeCursor, PageQuery } from '../../http/envelope.js';
import { flatErrors, Nullable, StringEnum } from '../../http/schemas.js';
import { setOrganizationPlan } from '../organizations/service.js';
import { adminSearchOrganizations } from './lists.js';
import { security, tags, TierSchema } from './routes.js';
import * as A from './service.js';

const Id = Type.Object({ id: Type.String({ format: 'uuid' }) });
const PlanSchema = StringEnum(['free', 'pro', 'enterprise'], {
  description: 'Organization plan; sets the hourly limit of the application API',
});

/** Operator routes over organizations (docs/operator.md): provisioning, keys, and the plan a user cannot give themselves. */
export async function adminOrganizationRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/api/v1/admin/organizations',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminListOrganizations',
        summary: 'Find organizations: name or slug contains q, id or a deployment id is q, or a member has the address q',
        description:
          'Newest first, keyset-paginated (`limit` 1–100, default 20; pass `next_cursor` as `cursor`). ' +
          'Without `q`, every organization. Deleted organizations are included, with `deleted_at` set.',
        querystring: Type.Object(
          {
            q: Type.Optional(
              Type.String({ maxLength: 320, description: 'Part of a name or slug (case-insensitive), an organization or deployment id, or a member email' }),
            ),
            ...PageQuery.properties,
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            organizations: Type.Array(
              Type.Object(
                {
                  id: Type.String(),
                  name: Type.String(),
                  slug: Type.String(),
                  plan: Type.String({ description: 'free, pro or enterprise' }),
                  deleted_at: Nullable(Type.String({ format: 'date-time', description: 'Set when the organization was deleted' })),
                  created_at: Type.String({ format: 'date-time' }),
                  primary_deployment_id: Nullable(Type.String()),
                  primary_deployment_tier: Nullable(Type.String()),
                },
                { title: 'AdminOrganizationHit' },
              ),
            ),
            next_cursor: Nullable(Type.String({ description: 'Pass as ?cursor= for the next page' })),
          }),
          ...flatErrors(400, 401),
        },
      },
    },
    async (request) => {
      const { items, next } = await adminSearchOrganizations(ctxOf(request), {
        q: request.query.q,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return { organizations: items, next_cursor: next };
    },
  );

  app.post(
    '/api/v1/admin/organizations',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminCreateOrganization',
        summary: 'Provision an organization with its primary deployment (secret shown once) and an owner by email',
        body: Type.Object(
          {
            name: Type.String({ minLength: 1, maxLength: 200 }),
            slug: Type.String({ pattern: '^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$' }),
            tier: Type.Optional(TierSchema),
            plan: Type.Optional(PlanSchema),
            owner_email: Type.Optional(Type.String({ format: 'email', maxLength: 320 })),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({
            organization: Type.Object({
              id: Type.String(),
              name: Type.String(),
              slug: Type.String(),
              tier: Type.String(),
              created_at: Type.String({ format: 'date-time' }),
            }),
            owner_user_id: Nullable(Type.String()),
            deployment: Type.Object({ id: Type.String(), tier: Type.String(), secret: Type.String({ description: 'Shown once' }) }),
          }),
          ...flatErrors(400, 401, 409),
        },
      },
    },
    async (request, reply) => {
      const result = await A.adminCreateOrganization(ctxOf(request), request.body);
      return reply.code(201).send(result);
    },
  );

  app.post(
    '/api/v1/admin/organizations/:id/api-keys',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminCreateApiKey',
        summary: 'Create an API key for an organization (the key is shown once)',
        params: Id,
        body: Type.Object(
          {
            name: Type.String({ minLength: 1, maxLength: 200 }),
            scopes: Type.Optional(
              Type.Array(StringEnum(['read', 'write', 'admin']), { minItems: 1, uniqueItems: true }),
            ),
            expires_at: Type.Optional(Type.String({ format: 'date-time' })),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({
            id: Type.String(),
            key: Type.String({ description: 'Shown once' }),
            key_prefix: Type.String(),
            scopes: Type.Array(Type.String()),
            expires_at: Nullable(Type.String({ format: 'date-time' })),
          }),
          ...flatErrors(400, 401, 404),
        },
      },
    },
    async (request, reply) => {
      const result = await A.adminCreateApiKey(ctxOf(request), request.params.id, request.body);
      return reply.code(201).send(result);
    },
  );

  app.put(
    '/api/v1/admin/organizations/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminUpdateOrganization',
        summary: "Set an organization's plan (free, pro, enterprise); audited, effective at once",
        params: Id,
        body: Type.Object({ plan: PlanSchema }, { additionalProperties: false }),
        response: {
          200: Type.Object({
            id: Type.String(),
            name: Type.String(),
            slug: Type.String(),
            plan: Type.String(),
            updated_at: Type.String({ format: 'date-time' }),
          }),
          ...flatErrors(400, 401, 404),
        },
      },
    },
    async (request) => {
      const org = await setOrganizationPlan(ctxOf(request), request.params.id, request.body.plan);
      return { id: org.id, name: org.name, slug: org.slug, plan: org.tier, updated_at: org.updated_at };
    },
  );
}
