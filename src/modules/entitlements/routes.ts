import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf, deploymentOf } from '../../http/auth.js';
import { flatErrors, Nullable } from '../../http/schemas.js';
import { limitDeployment } from '../../http/rate-limit.js';
import { AppliedBudgetSchema } from '../budgets/applicable.js';
import { aiQuota, authenticateEntitlementCheck, NEXT_CHECK_SECONDS, snapshotOf } from './service.js';

const NullableInt = Nullable(Type.Integer());

const Budgets = Type.Array(AppliedBudgetSchema, {
  description:
    "The organization and deployment budgets that hold this deployment's charges, and the api_key budgets of the API key that authenticated (if one did), oldest first; [] without any (docs/budgets.md)",
});

export const SnapshotReply = Type.Object({
  status: Type.String({ examples: ['active'] }),
  tier: Type.String({ examples: ['launch'] }),
  features: Type.Object({
    ai_enabled: Type.Boolean(),
    billing_enabled: Type.Boolean(),
    custom_domain: Type.Boolean(),
    white_label: Type.Boolean(),
    mcp_enabled: Type.Boolean(),
    ai_monthly_limit: Nullable(Type.Integer({ description: 'AI tokens per period; null = unlimited' })),
    api_rate_limit: Nullable(Type.Integer({ description: 'Requests per minute; null = unlimited' })),
    support_level: Type.String({ examples: ['email'] }),
  }),
  quotas: Type.Object({
    ai_tokens: Type.Object({
      used: Type.Integer(),
      limit: NullableInt,
      remaining: NullableInt,
      resets_at: Type.String({ format: 'date-time' }),
    }),
  }),
  budgets: Budgets,
  message: Nullable(Type.String()),
  next_check_seconds: Type.Integer({ examples: [300] }),
}, { title: 'EntitlementSnapshot' });

export const AiQuotaReply = Type.Object({
  used: Type.Integer(),
  limit: NullableInt,
  remaining: NullableInt,
  resets_at: Type.String({ format: 'date-time' }),
  tier: Type.String(),
  credits_available: NullableInt,
  credits_owed: Type.Integer({
    minimum: 0,
    description: 'Credits a provider\'s over-report left unpaid; while above 0 no AI call starts, and credits added pay it first',
    examples: [0],
  }),
  credits_per_standard: Type.Integer(),
  credits_per_advanced: Type.Integer(),
  credits_per_premium: Type.Integer(),
  budgets: Budgets,
}, { title: 'AiQuota' });

export async function entitlementRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/api/v1/entitlements/check',
    {
      // Credentials are in the body: the deployment's window is counted once they are proven (http/rate-limit.ts).
      config: { auth: 'public', rateLimit: 'handler' },
      schema: {
        tags: ['Entitlements'],
        operationId: 'getEntitlements',
        summary: 'Entitlement snapshot of a deployment (credentials in the body)',
        body: Type.Object(
          {
            deployment_id: Type.String({ minLength: 1, maxLength: 100 }),
            deployment_secret: Type.String({ minLength: 1, maxLength: 200 }),
          },
          { additionalProperties: false },
        ),
        querystring: Type.Object(
          { force: Type.Optional(Type.Boolean({ description: 'Bypass any cache (also: Cache-Control: no-cache)' })) },
          { additionalProperties: false },
        ),
        response: { 200: SnapshotReply, ...flatErrors(400, 401) },
      },
    },
    async (request, reply) => {
      const ctx = ctxOf(request);
      const forced = request.query.force === true || /no-cache/i.test(request.headers['cache-control'] ?? '');
      const deployment = await authenticateEntitlementCheck(ctx, request.body.deployment_id, request.body.deployment_secret, forced);
      await limitDeployment(request, reply, deployment);
      const snapshot = await snapshotOf(ctx, deployment);
      reply.header('cache-control', forced ? 'no-store' : `private, max-age=${NEXT_CHECK_SECONDS}`);
      return snapshot;
    },
  );

  app.get(
    '/api/v1/ai/quota',
    {
      config: { auth: 'deployment' },
      schema: {
        tags: ['Entitlements'],
        operationId: 'getAiQuota',
        summary: 'AI token quota of the period and the credits that pay past it (deployment headers)',
        security: [{ deploymentId: [], deploymentSecret: [] }],
        response: { 200: AiQuotaReply, ...flatErrors(401) },
      },
    },
    async (request) => {
      const { deployment, ctx } = deploymentOf(request);
      return aiQuota(ctx, deployment);
    },
  );
}
