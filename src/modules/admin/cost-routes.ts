import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { flatErrors, Nullable } from '../../http/schemas.js';
import { adminListCreditCosts, adminListToolActions } from './lists.js';
import { security, tags } from './routes.js';
import * as A from './service.js';

/** A list without parameters still refuses unknown ones (docs/input.md). */
const NoQuery = Type.Object({}, { additionalProperties: false });

/** The operator's cost table and tool mappings (docs/operator.md): list, set, map, unmap. */
export async function adminCostRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  const CostReply = Type.Object({ action: Type.String(), credits: Type.Integer(), description: Nullable(Type.String()) });
  app.get(
    '/api/v1/admin/credit-costs',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminListCreditCosts',
        summary: 'The credit cost table as stored now, by action',
        querystring: NoQuery,
        response: {
          200: Type.Object({
            credit_costs: Type.Array(
              Type.Object({ action: Type.String(), credits: Type.Integer(), description: Nullable(Type.String()), updated_at: Type.String({ format: 'date-time' }) }),
            ),
          }),
          ...flatErrors(400, 401),
        },
      },
    },
    async (request) => ({ credit_costs: await adminListCreditCosts(ctxOf(request)) }),
  );

  app.put(
    '/api/v1/admin/credit-costs/:action',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminSetCreditCost',
        summary: 'Set the credit cost of an action (creates it if new)',
        params: Type.Object({ action: Type.String({ pattern: '^[a-z0-9_.-]{1,100}$' }) }),
        body: Type.Object(
          { credits: Type.Integer({ minimum: 0, maximum: 1_000_000 }), description: Type.Optional(Nullable(Type.String({ maxLength: 500 }))) },
          { additionalProperties: false },
        ),
        response: { 200: CostReply, ...flatErrors(400, 401) },
      },
    },
    async (request) => A.adminPutCreditCost(ctxOf(request), request.params.action, request.body),
  );

  const ToolParams = Type.Object({ tool_name: Type.String({ minLength: 1, maxLength: 200 }) });
  app.get(
    '/api/v1/admin/tool-actions',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminListToolActions',
        summary: 'Every tool mapping with its action and cost, by tool name (an unmapped tool is metered as platform_basic)',
        querystring: NoQuery,
        response: {
          200: Type.Object({
            tool_actions: Type.Array(
              Type.Object({
                tool_name: Type.String(),
                action: Type.String(),
                credits: Type.Integer({ description: 'The cost of the action now' }),
                updated_at: Type.String({ format: 'date-time' }),
              }),
            ),
          }),
          ...flatErrors(400, 401),
        },
      },
    },
    async (request) => ({ tool_actions: await adminListToolActions(ctxOf(request)) }),
  );

  app.put(
    '/api/v1/admin/tool-actions/:tool_name',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminMapTool',
        summary: 'Map a tool to an action',
        params: ToolParams,
        body: Type.Object({ action: Type.String({ minLength: 1, maxLength: 100 }) }, { additionalProperties: false }),
        response: { 200: Type.Object({ tool_name: Type.String(), action: Type.String() }), ...flatErrors(400, 401) },
      },
    },
    async (request) => A.adminPutToolAction(ctxOf(request), request.params.tool_name, request.body.action),
  );

  app.delete(
    '/api/v1/admin/tool-actions/:tool_name',
    {
      config: { auth: 'admin' },
      schema: {
        tags,
        security,
        operationId: 'adminUnmapTool',
        summary: 'Remove a mapping (the tool is metered as platform_basic again)',
        params: ToolParams,
        response: { 204: Type.Null(), ...flatErrors(401, 404) },
      },
    },
    async (request, reply) => {
      await A.adminDeleteToolAction(ctxOf(request), request.params.tool_name);
      return reply.code(204).send(null);
    },
  );
}
