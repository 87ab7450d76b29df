import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf, principalOf } from '../../http/auth.js';
import { decodeCursor, Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery } from '../../http/envelope.js';
import { anyOf } from '../../http/schemas.js';
import { requireScope } from '../../lib/principals.js';
import { listActiveTemplates } from './catalog.js';
import {
  createTemplateDeployment,
  deleteTemplateDeployment,
  listTemplateDeployments,
  readTemplateDeployment,
  retryTemplateDeployment,
  updateTemplateDeployment,
} from './deployments.js';
import { verifyCustomDomain } from './custom-domains.js';
import {
  CreateTemplateDeploymentBody,
  OrgParams,
  TemplateDeploymentParams,
  TemplateDeploymentSchema,
  TemplateSchema,
  UpdateTemplateDeploymentBody,
  VerifyDomainResult,
} from './schemas.js';

const tags = ['Templates'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');
const config = { auth: 'account' as const };

/**
 * Templates for users (docs/templates.md): the active templates, and an organization's template deployments (read with
 * templates.read, every role; manage with templates.manage, owners and admins; API keys: read / write).
 */
export async function templateRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/templates',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'listTemplates',
        summary: 'The active templates (signed-in users; API keys with the read scope)',
        response: { 200: Envelope(Type.Array(TemplateSchema)), ...envelopeErrors(401, 403) },
      },
    },
    async (request) => {
      const key = principalOf(request);
      if (key) requireScope(key, 'read');
      return ok(await listActiveTemplates(ctxOf(request)));
    },
  );

  const base = '/organizations/:id/template-deployments';
  const one = `${base}/:tdId`;

  app.get(
    base,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'listTemplateDeployments',
        summary: "The organization's template deployments, newest first",
        params: OrgParams,
        querystring: PageQuery,
        response: { 200: PageEnvelope(TemplateDeploymentSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { items, next } = await listTemplateDeployments(ctxOf(request), {
        organizationId: request.params.id,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return page(items, next);
    },
  );

  app.post(
    base,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'createTemplateDeployment',
        summary: 'Deploy a template: created pending, then provisioned by a worker',
        description:
          'subdomain follows the organization slug rule, is unique across the installation (taken: 409) and not a reserved name (www, api, admin, ' +
          "mail, …: 400). custom_domain needs the custom_domain flag of the organization's primary deployment (403 FEATURE_NOT_AVAILABLE " +
          'otherwise) and is only claimed: publish custom_domain_challenge, then POST …/verify-domain. 409 only while another deployment holds it verified.',
        params: OrgParams,
        body: CreateTemplateDeploymentBody,
        response: { 201: Envelope(TemplateDeploymentSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request, reply) => {
      const created = await createTemplateDeployment(ctxOf(request), {
        organizationId: request.params.id,
        templateId: request.body.template_id,
        name: request.body.name,
        subdomain: request.body.subdomain,
        customDomain: request.body.custom_domain,
        config: request.body.config,
      });
      return reply.code(201).send(ok(created, 'Template deployment created; it is provisioned shortly'));
    },
  );

  app.get(
    one,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'getTemplateDeployment',
        summary: 'One template deployment',
        params: TemplateDeploymentParams,
        response: { 200: Envelope(TemplateDeploymentSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => ok(await readTemplateDeployment(ctxOf(request), request.params.id, request.params.tdId)),
  );

  app.put(
    one,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'updateTemplateDeployment',
        summary: 'Rename it (any status); change config or custom_domain while pending or failed (else 409)',
        params: TemplateDeploymentParams,
        body: UpdateTemplateDeploymentBody,
        response: { 200: Envelope(TemplateDeploymentSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) =>
      ok(
        await updateTemplateDeployment(ctxOf(request), {
          organizationId: request.params.id,
          id: request.params.tdId,
          name: request.body.name,
          customDomain: request.body.custom_domain,
          config: request.body.config,
        }),
      ),
  );

  app.delete(
    one,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'deleteTemplateDeployment',
        summary: 'Delete it, in any status but deploying (409 then)',
        params: TemplateDeploymentParams,
        response: { 200: Envelope(TemplateDeploymentSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await deleteTemplateDeployment(ctxOf(request), request.params.id, request.params.tdId), 'Template deployment deleted'),
  );

  app.post(
    `${one}/retry`,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'retryTemplateDeployment',
        summary: 'Provision a failed deployment again: failed → deploying (any other status: 409)',
        params: TemplateDeploymentParams,
        response: { 200: Envelope(TemplateDeploymentSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => ok(await retryTemplateDeployment(ctxOf(request), request.params.id, request.params.tdId), 'Retry scheduled'),
  );

  app.post(
    `${one}/verify-domain`,
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'verifyTemplateDeploymentDomain',
        summary: 'Prove control of custom_domain: look up its TXT challenge record (10 per hour per template deployment)',
        description:
          'Resolves custom_domain_challenge.name (TXT) through DNS_SERVERS within 5 s; a record whose strings, joined, equal the challenge value ' +
          "verifies the domain: it becomes this deployment's alone, every other claim of it is released, and the provisioner is given it. A lookup " +
          'that finds nothing or fails answers 200 with verified false and a reason. No custom domain: 409.',
        params: TemplateDeploymentParams,
        response: { 200: Envelope(VerifyDomainResult), ...envelopeErrors(400, 401, 403, 404, 409, 429) },
      },
    },
    async (request) => {
      const result = await verifyCustomDomain(ctxOf(request), request.params.id, request.params.tdId);
      return ok(result, result.verified ? 'Custom domain verified' : 'Custom domain not verified');
    },
  );
}
