import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { anyOf, flatErrors } from '../../http/schemas.js';
import { BudgetParams, BudgetSchema, CreateBudgetBody, OrgParams, UpdateBudgetBody } from './schemas.js';
import { createBudget, deleteBudget, listBudgets, readBudget, updateBudget } from './service.js';

const tags = ['Budgets'];
const WHO =
  'Every role reads (usage.read; an API key needs read); owners and admins manage (billing.manage; an API key needs admin, ' +
  'and cannot change or delete an api_key budget on itself). Viewers see end user ids as "***" (docs/budgets.md, API).';
const READS = 'Each budget with what its window in progress has counted: spent and remaining, window_start, resets_at.';

/** An organization's budgets (docs/budgets.md, API), in the application API's envelope. */
export async function budgetRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const security = anyOf('bearerAuth', 'apiKeyHeader', 'apiKey');
  const config = { auth: 'account' as const };
  const one = { 200: Envelope(BudgetSchema), ...envelopeErrors(400, 401, 403, 404) };

  app.get(
    '/organizations/:id/budgets',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'listBudgets',
        summary: "The organization's budgets, oldest first, with their windows in progress",
        description: `${READS} ${WHO}`,
        params: OrgParams,
        response: { 200: Envelope(Type.Array(BudgetSchema)), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) => ok(await listBudgets(ctxOf(request), request.params.id)),
  );

  app.post(
    '/organizations/:id/budgets',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'createBudget',
        summary: 'Create a budget: a cap on what the organization, a deployment, an API key, end users or tools spend in a window',
        description: `A missing or foreign deployment_id or api_key_id, an id the scope does not take, or no limit is 400 naming the field; nothing is written. ${WHO}`,
        params: OrgParams,
        body: CreateBudgetBody,
        response: { 201: Envelope(BudgetSchema), ...envelopeErrors(400, 401, 403, 404, 409) },
      },
    },
    async (request, reply) => reply.code(201).send(ok(await createBudget(ctxOf(request), request.params.id, request.body), 'Budget created')),
  );

  app.get(
    '/organizations/:id/budgets/:budgetId',
    {
      config,
      schema: { tags, security, operationId: 'getBudget', summary: 'One budget with its window in progress', description: `${READS} ${WHO}`, params: BudgetParams, response: one },
    },
    async (request) => ok(await readBudget(ctxOf(request), request.params.id, request.params.budgetId)),
  );

  app.put(
    '/organizations/:id/budgets/:budgetId',
    {
      config,
      schema: {
        tags,
        security,
        operationId: 'updateBudget',
        summary: 'Change limits, window, mode or alert thresholds; fields left out keep their values',
        description: `scope, deployment_id, api_key_id, end_user_id and tool_name cannot change (400 when sent different). Windows already counted are kept. ${WHO}`,
        params: BudgetParams,
        body: UpdateBudgetBody,
        response: one,
      },
    },
    async (request) => ok(await updateBudget(ctxOf(request), request.params.id, request.params.budgetId, request.body)),
  );

  app.delete(
    '/organizations/:id/budgets/:budgetId',
    {
      config,
      schema: { tags, security, operationId: 'deleteBudget', summary: 'Delete a budget and its windows', description: WHO, params: BudgetParams, response: one },
    },
    async (request) => ok(await deleteBudget(ctxOf(request), request.params.id, request.params.budgetId), 'Budget deleted'),
  );
}

/** The same for the operator (docs/operator.md): any organization, the flat /api/v1 shapes, every call audited. */
export async function adminBudgetRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const security = [{ adminKey: [] }];
  const config = { auth: 'admin' as const };
  const adminTags = ['Operator'];
  const one = { 200: BudgetSchema, ...flatErrors(400, 401, 404) };

  app.get(
    '/api/v1/admin/organizations/:id/budgets',
    {
      config,
      schema: {
        tags: adminTags,
        security,
        operationId: 'adminListBudgets',
        summary: "An organization's budgets with their windows in progress",
        description: READS,
        params: OrgParams,
        response: { 200: Type.Object({ budgets: Type.Array(BudgetSchema) }), ...flatErrors(400, 401, 404) },
      },
    },
    async (request) => ({ budgets: await listBudgets(ctxOf(request), request.params.id) }),
  );

  app.post(
    '/api/v1/admin/organizations/:id/budgets',
    {
      config,
      schema: {
        tags: adminTags,
        security,
        operationId: 'adminCreateBudget',
        summary: 'Create a budget for an organization',
        description: 'The rules of POST /organizations/{id}/budgets (docs/budgets.md, API).',
        params: OrgParams,
        body: CreateBudgetBody,
        response: { 201: BudgetSchema, ...flatErrors(400, 401, 404) },
      },
    },
    async (request, reply) => reply.code(201).send(await createBudget(ctxOf(request), request.params.id, request.body)),
  );

  app.get(
    '/api/v1/admin/organizations/:id/budgets/:budgetId',
    {
      config,
      schema: { tags: adminTags, security, operationId: 'adminGetBudget', summary: 'One budget of an organization', description: READS, params: BudgetParams, response: one },
    },
    async (request) => readBudget(ctxOf(request), request.params.id, request.params.budgetId),
  );

  app.put(
    '/api/v1/admin/organizations/:id/budgets/:budgetId',
    {
      config,
      schema: {
        tags: adminTags,
        security,
        operationId: 'adminUpdateBudget',
        summary: "Change a budget's limits, window, mode or alert thresholds",
        description: 'The rules of PUT /organizations/{id}/budgets/{budgetId} (docs/budgets.md, API).',
        params: BudgetParams,
        body: UpdateBudgetBody,
        response: one,
      },
    },
    async (request) => updateBudget(ctxOf(request), request.params.id, request.params.budgetId, request.body),
  );

  app.delete(
    '/api/v1/admin/organizations/:id/budgets/:budgetId',
    {
      config,
      schema: { tags: adminTags, security, operationId: 'adminDeleteBudget', summary: "Delete an organization's budget and its windows", params: BudgetParams, response: one },
    },
    async (request) => deleteBudget(ctxOf(request), request.params.id, request.params.budgetId),
  );
}
