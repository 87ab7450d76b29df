import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { flatErrors } from '../../http/schemas.js';
import { adminCreateTemplate, adminDeleteTemplate, adminListTemplates, adminUpdateTemplate } from '../templates/catalog.js';
import { CreateTemplateBody, TemplateIdParams, TemplateSchema, UpdateTemplateBody } from '../templates/schemas.js';
import { security, tags } from './routes.js';

/** The operator's template catalogue (docs/templates.md, The catalogue; flat /api/v1 shapes, every call audited). */
export async function adminTemplateRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const config = { auth: 'admin' as const };

  app.get(
    '/api/v1/admin/templates',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'adminListTemplates',
        summary: 'Every template, active or not',
        response: { 200: Type.Object({ templates: Type.Array(TemplateSchema) }), ...flatErrors(401) },
      },
    },
    async (request) => ({ templates: await adminListTemplates(ctxOf(request)) }),
  );

  app.post(
    '/api/v1/admin/templates',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'adminCreateTemplate',
        summary: 'Create a template (slug unique: 409 when taken)',
        body: CreateTemplateBody,
        response: { 201: TemplateSchema, ...flatErrors(400, 401, 409) },
      },
    },
    async (request, reply) => reply.code(201).send(await adminCreateTemplate(ctxOf(request), request.body)),
  );

  app.put(
    '/api/v1/admin/templates/:id',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'adminUpdateTemplate',
        summary: 'Change a template; is_active: false hides it from GET /templates and new deployments',
        params: TemplateIdParams,
        body: UpdateTemplateBody,
        response: { 200: TemplateSchema, ...flatErrors(400, 401, 404, 409) },
      },
    },
    async (request) => adminUpdateTemplate(ctxOf(request), request.params.id, request.body),
  );

  app.delete(
    '/api/v1/admin/templates/:id',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'adminDeleteTemplate',
        summary: 'Delete a template that no deployment uses (409 otherwise: deactivate it instead)',
        params: TemplateIdParams,
        response: { 200: TemplateSchema, ...flatErrors(401, 404, 409) },
      },
    },
    async (request) => adminDeleteTemplate(ctxOf(request), request.params.id),
  );
}
