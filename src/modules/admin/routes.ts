import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { BalanceSummarySchema, refundUsage } from '../credits/index.js';
import { RefundBody, RefundReply, UsageParams } from '../metering/schemas.js';
import { ctxOf } from '../../http/auth.js';
import { idempotencyKeyHeader } from '../../http/idempotency-key.js';
import { flatErrors, Nullable, StringEnum } from '../../http/schemas.js';
import { setExternalId } from '../users/service.js';
import * as A from './service.js';

const Id = Type.Object({ id: Type.String({ format: 'uuid' }) });
export const TierSchema = StringEnum(['sandbox', 'trial', 'launch', 'growth', 'enterprise'], { description: 'Deployment tier' });
const NullableInt = Nullable(Type.Integer());
const Bool = Type.Boolean();

export const DeploymentViewSchema = Type.Object({
  id: Type.String(),
  organization_id: Type.String(),
  name: Type.String(),
  tier: Type.String(),
  status: Type.String(),
  is_primary: Type.Boolean(),
  secret_prefix: Type.String(),
  billing_anchor: Type.String({ format: 'date-time' }),
  features: Type.Object({ ai_enabled: Bool, billing_enabled: Bool, custom_domain: Bool, white_label: Bool, mcp_enabled: Bool }),
  flag_overrides: Type.Record(Type.String(), Type.Boolean()),
  overrides: Type.Object({
    monthly_credits: NullableInt,
    api_rate_limit: NullableInt,
    ai_tokens_limit: NullableInt,
    expires_at: Nullable(Type.String({ format: 'date-time' })),
  }),
  balance: BalanceSummarySchema,
  credits_owed: Type.Integer({
    minimum: 0,
    description: 'Credits a provider\'s over-report of AI usage left unpaid; while above 0 no AI call starts, and credits added pay it first',
    examples: [0],
  }),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
}, { title: 'AdminDeployment' });

export const tags = ['Operator'];
export const security = [{ adminKey: [] }];
const Limit = (description: string, maximum = 1_000_000_000_000) => Type.Optional(Nullable(Type.Integer({ minimum: 0, maximum, description })));

export async function adminRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/api/v1/admin/deployments',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminListDeployments',
        summary: 'List deployments, optionally of one organization',
        querystring: Type.Object({ organization_id: Type.Optional(Type.String({ format: 'uuid' })) }, { additionalProperties: false }),
        response: { 200: Type.Object({ deployments: Type.Array(DeploymentViewSchema) }), ...flatErrors(400, 401) },
      },
    },
    async (request) => ({ deployments: await A.adminListDeployments(ctxOf(request), request.query.organization_id) }),
  );

  app.get(
    '/api/v1/admin/deployments/:id',
    {
      config: { auth: 'admin' },
      schema: { tags, security, operationId: 'adminGetDeployment', summary: 'One deployment with its balance', params: Id, response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) } },
    },
    async (request) => A.adminGetDeployment(ctxOf(request), request.params.id),
  );

  app.put(
    '/api/v1/admin/deployments/:id',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminUpdateDeployment',
        summary: 'Change tier and/or status; a tier change applies its allocation at once',
        params: Id,
        body: Type.Object(
          { tier: Type.Optional(TierSchema), status: Type.Optional(StringEnum(['active', 'suspended'])) },
          { additionalProperties: false },
        ),
        response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) =>
      A.adminUpdateDeployment(ctxOf(request), request.params.id, {
        tier: request.body.tier,
        status: request.body.status,
      }),
  );

  app.put(
    '/api/v1/admin/deployments/:id/overrides',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminSetOverrides',
        summary: 'Merge overrides; a field set to null removes that override',
        params: Id,
        body: Type.Object(
          {
            monthly_credits: Limit('Credits per period instead of the tier allocation'),
            // Its column is a 32-bit integer.
            api_rate_limit: Limit('Requests per minute instead of the tier limit', 2_147_483_647),
            ai_tokens_limit: Limit('AI tokens per period instead of the tier limit'),
            expires_at: Type.Optional(Nullable(Type.String({ format: 'date-time', description: 'When the overrides lapse (future)' }))),
          },
          { additionalProperties: false },
        ),
        response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => A.adminSetOverrides(ctxOf(request), request.params.id, request.body),
  );

  app.delete(
    '/api/v1/admin/deployments/:id/overrides',
    {
      config: { auth: 'admin' },
      schema: { tags, security, operationId: 'adminClearOverrides', summary: 'Remove every override', params: Id, response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) } },
    },
    async (request) => A.adminClearOverrides(ctxOf(request), request.params.id),
  );

  app.put(
    '/api/v1/admin/deployments/:id/flags',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminSetFlags',
        summary: 'Per-flag overrides: true/false pins a flag, null returns it to the tier',
        params: Id,
        body: Type.Object(
          {
            ai_enabled: Type.Optional(Nullable(Bool)),
            billing_enabled: Type.Optional(Nullable(Bool)),
            custom_domain: Type.Optional(Nullable(Bool)),
            white_label: Type.Optional(Nullable(Bool)),
            mcp_enabled: Type.Optional(Nullable(Bool)),
          },
          { additionalProperties: false },
        ),
        response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => A.adminSetFlags(ctxOf(request), request.params.id, request.body as Record<string, boolean | null>),
  );

  app.post(
    '/api/v1/admin/deployments/:id/usage/reset',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminResetUsage',
        summary: "Reset the period's usage counters",
        params: Id,
        body: Type.Object({ ai_tokens: Type.Optional(Bool), monthly_credits: Type.Optional(Bool) }, { additionalProperties: false }),
        response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => A.adminResetUsage(ctxOf(request), request.params.id, request.body),
  );

  app.post(
    '/api/v1/admin/deployments/:id/credits',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminGrantCredits',
        summary: 'Grant purchased credits (positive) or adjust them (negative, never below zero)',
        params: Id,
        body: Type.Object(
          {
            amount: Type.Integer({ minimum: -1_000_000_000_000, maximum: 1_000_000_000_000 }),
            reason: Type.String({ minLength: 1, maxLength: 500 }),
            expires_at: Type.Optional(
              Type.String({ format: 'date-time', description: 'A grant that lapses at this time (spent first, soonest expiry first)' }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: DeploymentViewSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => A.adminChangeCredits(ctxOf(request), request.params.id, request.body),
  );

  app.put(
    '/api/v1/admin/users/:id/external-id',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminSetUserExternalId',
        summary: "Set a user's external id (accepted by resolve-deployment)",
        params: Id,
        body: Type.Object({ external_id: Nullable(Type.String({ minLength: 1, maxLength: 200 })) }, { additionalProperties: false }),
        response: {
          200: Type.Object({ id: Type.String(), email: Type.String(), external_id: Nullable(Type.String()) }),
          ...flatErrors(400, 401, 404, 409),
        },
      },
    },
    async (request) => {
      const user = await setExternalId(ctxOf(request), request.params.id, request.body.external_id);
      return { id: user.id, email: user.email, external_id: user.external_id };
    },
  );

  app.post(
    '/api/v1/admin/usage/:usage_id/refund',
    {
      config: { auth: 'admin', idempotencyKey: 'accepts' },
      schema: {
        tags,
        security,
        operationId: 'adminRefundUsage',
        summary: 'Refund a recorded usage in whole or in part (idempotent with Idempotency-Key)',
        description:
          'The operator side of POST /api/v1/mcp/usage/{usage_id}/refund: credits go back to the bucket they came from; ' +
          'the monthly part of a usage from a period that has ended is settled but not given back. A record deleted by the usage retention is 410 USAGE_RECORD_EXPIRED.',
        params: UsageParams,
        body: RefundBody,
        response: { 200: RefundReply, ...flatErrors(400, 401, 404, 409, 410, 422) },
      },
    },
    async (request) => {
      return refundUsage(ctxOf(request), {
        usageId: request.params.usage_id,
        amount: request.body.amount,
        reason: request.body.reason,
        idempotencyKey: request.body.idempotency_key ?? idempotencyKeyHeader(request),
      });
    },
  );
}
