import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Ctx } from '../../context.js';
import { ValidationError } from '../../errors.js';
import { apiKeyOf, ctxOf, principalOf } from '../../http/auth.js';
import { endUserOf } from '../../http/end-user.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { anyOf, flatErrors } from '../../http/schemas.js';
import { costTable, matchesEtag, priceListOf } from './costs.js';
import { idempotencyKeyHeader } from '../../http/idempotency-key.js';
import { refundUsage } from '../credits/index.js';
import { getInvocation, releaseInvocation, type Scope } from './invocations.js';
import { organizationPriceList } from './organization-prices.js';
import { resolveDeployment } from './resolve.js';
import * as S from './schemas.js';
import { checkEntitlement, type RecordOutcome, recordUsage } from './service.js';
import { loadDeploymentState } from './state.js';

const METADATA_LIMIT = 16 * 1024;

/** The body's invocation_id and the Idempotency-Key header are equals (docs/metering.md, Idempotency); two different ones are an error. */
function invocationIdOf(request: FastifyRequest, bodyId: string | undefined): string | undefined {
  const headerId = idempotencyKeyHeader(request);
  if (headerId !== undefined && bodyId !== undefined && headerId !== bodyId) {
    throw new ValidationError('invocation_id and the Idempotency-Key header differ', [
      { field: 'invocation_id', message: 'differs from Idempotency-Key' },
    ]);
  }
  return bodyId ?? headerId;
}

function checkMetadata(metadata: unknown): void {
  if (metadata === undefined || metadata === null) return;
  if (Buffer.byteLength(JSON.stringify(metadata), 'utf8') > METADATA_LIMIT) {
    throw new ValidationError('metadata is larger than 16 KiB serialized', [{ field: 'metadata', message: 'is larger than 16 KiB' }]);
  }
}

function sendRecord(reply: FastifyReply, outcome: RecordOutcome) {
  if (outcome.replayed) reply.header('idempotent-replayed', 'true');
  return outcome.result;
}

const stdioTags = ['MCP stdio mode'];
const serviceTags = ['MCP service mode'];
const apiKeySecurity = [{ apiKey: [] }];
const serviceSecurity = [{ serviceKey: [] }];
const eitherSecurity = anyOf('apiKey', 'serviceKey');

export async function meteringRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/api/v1/mcp/stdio/check-entitlement',
    {
      config: { auth: 'apiKey', scope: 'read', idempotencyKey: 'accepts' },
      schema: {
        tags: stdioTags,
        operationId: 'checkStdioEntitlement',
        summary: 'May this organization run the tool, and what does it cost? (API key, scope read; write with reserve)',
        security: apiKeySecurity,
        body: S.StdioCheckBody,
        response: { 200: S.StdioCheckReply, ...flatErrors(400, 401, 403, 422) },
      },
    },
    async (request) => {
      const { principal, ctx } = apiKeyOf(request, request.body.reserve ? 'write' : undefined);
      const result = await checkEntitlement(ctx, principal.deployment, 'no_deployment_found', {
        toolName: request.body.tool_name,
        reserve: request.body.reserve,
        invocationId: invocationIdOf(request, request.body.invocation_id),
        endUserId: endUserOf(request, request.body.end_user_id, 'end_user_id'),
      });
      const { credits_available: _omit, ...stdio } = result;
      return stdio;
    },
  );

  app.post(
    '/api/v1/mcp/stdio/record-usage',
    {
      config: { auth: 'apiKey', scope: 'write', idempotencyKey: 'replays' },
      schema: {
        tags: stdioTags,
        operationId: 'recordStdioUsage',
        summary: 'Record a completed tool call and deduct its credits (API key, scope write)',
        security: apiKeySecurity,
        body: S.StdioRecordBody,
        response: { 200: S.RecordReply, ...flatErrors(400, 401, 403, 422) },
      },
    },
    async (request, reply) => {
      const { principal, ctx } = apiKeyOf(request);
      checkMetadata(request.body.metadata);
      const outcome = await recordUsage(ctx, principal.deployment, 'no_deployment_found', {
        toolName: request.body.tool_name,
        metadata: request.body.metadata,
        mcpUserId: endUserOf(request, request.body.end_user_id, 'end_user_id'),
        invocationId: invocationIdOf(request, request.body.invocation_id),
      });
      return sendRecord(reply, outcome);
    },
  );

  app.get(
    '/api/v1/mcp/resolve-deployment',
    {
      config: { auth: 'service' },
      schema: {
        tags: serviceTags,
        operationId: 'resolveDeployment',
        summary: "The deployment a user's MCP session meters against (cached 5 minutes per user_id)",
        security: serviceSecurity,
        querystring: S.ResolveQuery,
        response: { 200: S.ResolveReply, ...flatErrors(400, 401) },
      },
    },
    async (request) => {
      const ctx = ctxOf(request);
      return resolveDeployment(ctx, request.query.user_id);
    },
  );

  app.post(
    '/api/v1/mcp/check-entitlement',
    {
      config: { auth: 'service', idempotencyKey: 'accepts' },
      schema: {
        tags: serviceTags,
        operationId: 'checkEntitlement',
        summary: 'May this deployment run the tool, and what does it cost?',
        security: serviceSecurity,
        body: S.ServiceCheckBody,
        response: { 200: S.ServiceCheckReply, ...flatErrors(400, 401, 422) },
      },
    },
    async (request) => {
      const ctx = ctxOf(request);
      const state = await loadDeploymentState(ctx, request.body.deployment_id);
      return checkEntitlement(ctx, state, 'deployment_not_found', {
        toolName: request.body.tool_name,
        reserve: request.body.reserve,
        invocationId: invocationIdOf(request, request.body.invocation_id),
        endUserId: endUserOf(request, request.body.end_user_id, 'end_user_id'),
      });
    },
  );

  app.post(
    '/api/v1/mcp/usage',
    {
      config: { auth: 'service', idempotencyKey: 'replays' },
      schema: {
        tags: serviceTags,
        operationId: 'recordUsage',
        summary: 'Record a completed tool call and deduct its credits',
        security: serviceSecurity,
        body: S.ServiceUsageBody,
        response: { 200: S.RecordReply, ...flatErrors(400, 401, 422) },
      },
    },
    async (request, reply) => {
      const ctx = ctxOf(request);
      checkMetadata(request.body.metadata);
      const state = await loadDeploymentState(ctx, request.body.deployment_id);
      const outcome = await recordUsage(ctx, state, 'deployment_not_found', {
        toolName: request.body.tool_name,
        metadata: request.body.metadata,
        mcpUserId: endUserOf(request, request.body.mcp_user_id, 'mcp_user_id'),
        invocationId: invocationIdOf(request, request.body.invocation_id),
      });
      return sendRecord(reply, outcome);
    },
  );

  app.get(
    '/api/v1/mcp/credit-costs',
    {
      config: { auth: 'apiKeyOrService', scope: 'read' },
      schema: {
        tags: serviceTags,
        operationId: 'listCreditCosts',
        summary: 'The credit cost of every action and the tool → action map, with an ETag (service key, or an API key with read)',
        description:
          'A tool not in `tools` is metered as `platform_basic`. Send the `ETag` back as `If-None-Match`: while the table is unchanged ' +
          'the answer is 304 without a body (docs/metering.md, Prices up front).',
        security: eitherSecurity,
        headers: S.CostsHeaders,
        response: {
          200: { ...S.CostsReply, headers: { ETag: S.CostsEtag } },
          304: { description: 'Not modified: the table is the one If-None-Match names; no body', headers: { ETag: S.CostsEtag }, type: 'null' },
          ...flatErrors(400, 401, 403),
        },
      },
    },
    async (request, reply) => {
      const ctx = ctxOf(request);
      const list = priceListOf(await costTable(ctx));
      reply.header('cache-control', 'private, max-age=3600');
      reply.header('etag', list.etag);
      // No payload at all: a serialized null would still be announced as 4 bytes of content-length.
      if (matchesEtag(request.headers['if-none-match'], list.etag)) return reply.code(304).send(undefined as unknown as null);
      return { costs: list.costs, tools: list.tools };
    },
  );

  app.get(
    '/organizations/:id/credit-costs',
    {
      config: { auth: 'account' },
      schema: {
        tags: ['Usage'],
        security: anyOf('bearerAuth', 'apiKeyHeader', 'apiKey'),
        operationId: 'getOrganizationCreditCosts',
        summary: 'The credit cost of every action and the tool → action map (organization.read: every role; key scope read)',
        description:
          'The price list of GET /api/v1/mcp/credit-costs, in the envelope, for the console and the members of an organization. ' +
          'A tool not in `tools` is metered as `platform_basic` (docs/metering.md, Prices up front).',
        params: S.OrgParams,
        response: { 200: Envelope(S.CostsReply), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => ok(await organizationPriceList(ctxOf(request), request.params.id)),
  );

  /** Service key: the deployment comes from the caller; API key: the key's primary deployment, own organization only. */
  function invocationScope(request: FastifyRequest, deploymentId: string | undefined): { ctx: Ctx; scope: Scope } {
    const ctx = ctxOf(request);
    const principal = principalOf(request);
    if (!principal) {
      if (!deploymentId) {
        throw new ValidationError('deployment_id is required with the service key', [{ field: 'deployment_id', message: 'is required' }]);
      }
      return { ctx, scope: { deploymentId, organizationId: null } };
    }
    const own = principal.deployment?.deployment_id;
    // Another deployment than the key's own is "not found" (the nil UUID matches no row).
    const target = own && (deploymentId === undefined || deploymentId === own) ? own : '00000000-0000-0000-0000-000000000000';
    return { ctx, scope: { deploymentId: target, organizationId: principal.organizationId } };
  }

  app.post(
    '/api/v1/mcp/reservations/:invocation_id/release',
    {
      config: { auth: 'apiKeyOrService', scope: 'write' },
      schema: {
        tags: ['MCP reservations'],
        operationId: 'releaseReservation',
        summary: 'Release a reservation (the tool failed or was cancelled); releasing twice is harmless',
        security: eitherSecurity,
        params: S.InvocationParams,
        body: S.ReleaseBody,
        response: { 200: S.ReleaseReply, ...flatErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request) => {
      const { ctx, scope } = invocationScope(request, request.body?.deployment_id);
      return releaseInvocation(ctx, scope, request.params.invocation_id);
    },
  );

  app.get(
    '/api/v1/mcp/invocations/:invocation_id',
    {
      config: { auth: 'apiKeyOrService', scope: 'read' },
      schema: {
        tags: ['MCP reservations'],
        operationId: 'getInvocation',
        summary: 'What became of an invocation: reserved, recorded, released, expired or refunded',
        security: eitherSecurity,
        params: S.InvocationParams,
        querystring: S.ScopeQuery,
        response: { 200: S.InvocationReply, ...flatErrors(400, 401, 403, 404) },
      },
    },
    async (request) => {
      const { ctx, scope } = invocationScope(request, request.query.deployment_id);
      return getInvocation(ctx, scope, request.params.invocation_id);
    },
  );

  app.post(
    '/api/v1/mcp/usage/:usage_id/refund',
    {
      // An organization key authenticates (a read-only one is refused for scope), and is then refused
      // with 403 FORBIDDEN by the verb: only the platform refunds (credits/refunds.ts).
      config: { auth: 'apiKeyOrService', scope: 'write', idempotencyKey: 'accepts' },
      schema: {
        tags: ['MCP reservations'],
        operationId: 'refundUsage',
        summary: 'Refund a recorded usage in whole or in part (idempotent with Idempotency-Key); service key only',
        description:
          'Only the platform refunds: the service key here, or the operator API. An organization API key is refused with 403 FORBIDDEN. ' +
          'Credits go back to the bucket they came from; the monthly part of a usage from a period that has ended is settled but not given back. ' +
          'A record deleted by the usage retention is 410 USAGE_RECORD_EXPIRED.',
        security: serviceSecurity,
        params: S.UsageParams,
        body: S.RefundBody,
        response: { 200: S.RefundReply, ...flatErrors(400, 401, 403, 404, 409, 410, 422) },
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
