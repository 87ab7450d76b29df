import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { BalanceSummarySchema } from '../credits/index.js';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok, page, PageEnvelope, PageQuery } from '../../http/envelope.js';
import { decodeCursor } from '../../http/envelope.js';
import { anyOf } from '../../http/schemas.js';
import { SnapshotReply } from '../entitlements/routes.js';
import { listOrganizationDeployments, organizationDeploymentEntitlements, rotateOrganizationDeploymentSecret } from './organization.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const Timestamp = (description: string) => Type.String({ format: 'date-time', description, examples: ['2026-01-15T12:00:00.000Z'] });

const DeploymentSchema = Type.Object({
  id: Uuid('Deployment id'),
  organization_id: Uuid('Owning organization'),
  name: Type.String({ description: 'Deployment name', examples: ['Acme'] }),
  tier: Type.String({ description: 'Entitlement tier: sandbox, trial, launch, growth, enterprise', examples: ['launch'] }),
  status: Type.String({ description: 'active or suspended', examples: ['active'] }),
  is_primary: Type.Boolean({ description: 'The deployment the organization resolves to (exactly one)' }),
  secret_prefix: Type.String({ description: 'First 10 characters of the current secret', examples: ['cgds_4fT9a'] }),
  billing_anchor: Timestamp('Anchor of the monthly period when there is no subscription'),
  created_at: Timestamp('Creation time'),
  updated_at: Timestamp('Last change'),
  balance: BalanceSummarySchema,
}, { title: 'Deployment' });

const Rotated = Type.Object({
  deployment_id: Uuid('Deployment id'),
  secret: Type.String({
    description: 'The new deployment secret, shown once; the old one stopped working',
    examples: ['cgds_4fT9aQ2xLm8Rk1Vb7Nc3Pd6Hs0Jw5Ye2Zq4Tu9'],
  }),
  secret_prefix: Type.String({ description: 'First 10 characters of the new secret', examples: ['cgds_4fT9a'] }),
}, { title: 'DeploymentSecretRotated' });

const OrganizationParams = Type.Object({ id: Uuid('Organization id') });
const DeploymentParams = Type.Object({ id: Uuid('Organization id'), depId: Uuid('Deployment id') });
const tags = ['Deployments'];
const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');

/** An organization's deployments and secret rotation (docs/decisions-keys-billing.md, Deployments). */
export async function deploymentRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/organizations/:id/deployments',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'listDeployments',
        summary: "An organization's deployments with their balances (primary first)",
        params: OrganizationParams,
        querystring: PageQuery,
        response: { 200: PageEnvelope(DeploymentSchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { items, next } = await listOrganizationDeployments(ctxOf(request), {
        organizationId: request.params.id,
        limit: request.query.limit ?? 20,
        cursor: decodeCursor(request.query.cursor),
      });
      return page(items, next);
    },
  );

  app.get(
    '/organizations/:id/deployments/:depId/entitlements',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'getDeploymentEntitlements',
        summary: "A deployment's entitlement snapshot: tier, flags, limits, AI token quota (deployments.read; key scope read)",
        description: 'The same snapshot POST /api/v1/entitlements/check answers the deployment, computed now (never cached).',
        params: DeploymentParams,
        response: { 200: Envelope(SnapshotReply), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) =>
      ok(await organizationDeploymentEntitlements(ctxOf(request), { organizationId: request.params.id, deploymentId: request.params.depId })),
  );

  app.post(
    '/organizations/:id/deployments/:depId/secret',
    {
      config: { auth: 'account' },
      schema: {
        tags,
        security,
        operationId: 'rotateDeploymentSecret',
        summary: 'Rotate the deployment secret (owner, admin; key scope write): data.secret is shown once',
        params: DeploymentParams,
        response: { 200: Envelope(Rotated), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) =>
      ok(
        await rotateOrganizationDeploymentSecret(ctxOf(request), { organizationId: request.params.id, deploymentId: request.params.depId }),
        'Deployment secret rotated; store data.secret now, it is not shown again',
      ),
  );
}
