import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { Ctx } from '../../context.js';
import { AppError, NotFoundError } from '../../errors.js';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { flatErrors } from '../../http/schemas.js';
import { modelClassOf } from '../quotas/ai-tokens.js';
import { offeredModels } from './models.js';
import { type AiDeployment, type ChatBody, chatCompletions, type EmbeddingsBody, embeddings, generate } from './proxy.js';
import { createResponse, modelNotFound, type ResponsesBody } from './responses.js';
import {
  aiErrors,
  ChatBodySchema,
  EmbeddingsBodySchema,
  GeneratedSchema,
  GenerateBodySchema,
  ModelList,
  ModelNotFound,
  ModelObject,
  ModelParams,
  OpenAiError,
  PassedThrough,
  ResponsesBodySchema,
  security,
} from './schemas.js';
import { loadEncodingFor } from './tokens.js';
import { AiUpstream } from './upstream.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** 'openai': a 400 answers in the OpenAI error shape, so the OpenAI SDKs raise their BadRequestError. */
    errorShape?: 'openai';
  }
}

/** The deployment an AI call acts for: the deployment headers', or the API key's organization's primary one. */
function aiDeploymentOf(request: FastifyRequest): { ctx: Ctx; deployment: AiDeployment } {
  const auth = request.authResult;
  if (auth?.kind === 'deployment') return { ctx: auth.ctx, deployment: auth.deployment };
  if (auth?.kind === 'apiKey') {
    const d = auth.principal.deployment;
    if (!d) throw new NotFoundError("This API key's organization has no primary deployment, which");
    // A suspended deployment reads but neither spends nor sends (docs/decisions.md, Suspended deployments), whichever credential names it.
    if (d.status !== 'active') {
      throw new AppError('DEPLOYMENT_SUSPENDED', 'This deployment is suspended: it can read its quotas and entitlements, but not spend or send');
    }
    return {
      ctx: auth.ctx,
      deployment: {
        id: d.deployment_id,
        organization_id: d.organization_id,
        status: d.status,
        flag_overrides: d.flag_overrides,
        tier: d.tier,
        billing_anchor: d.billing_anchor,
        override_monthly_credits: d.override_monthly_credits,
        override_api_rate_limit: d.override_api_rate_limit,
        override_ai_tokens_limit: d.override_ai_tokens_limit,
        override_expires_at: d.override_expires_at,
      },
    };
  }
  throw new Error(`route ${request.url} is not an AI route`);
}

function modelObject(ctx: Ctx, id: string) {
  return { id, object: 'model' as const, created: 0, owned_by: 'creditgate', model_class: modelClassOf(ctx, id) };
}

/** The AI proxy (docs/ai-proxy.md, Routes): the OpenAI-compatible routes under /api/v1/ai and /api/ai/generate. */
export async function aiRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const upstream = AiUpstream.fromConfig(fastify.deps.config, fastify.deps.metrics);
  if (upstream) {
    // The tokenizer's ranks take about a second to build: start now rather than in the first call.
    fastify.addHook('onReady', async () => {
      void loadEncodingFor(fastify.deps.config.aiDefaultModel);
    });
    fastify.addHook('onClose', async () => upstream.close());
  }
  const config = { auth: 'deploymentOrApiKey', scope: 'write', spends: true, errorShape: 'openai' } as const;

  app.post(
    '/api/v1/ai/chat/completions',
    {
      config,
      schema: {
        tags: ['AI'],
        operationId: 'createChatCompletion',
        summary: 'OpenAI chat completion through the proxy, metered against the AI token quota (streams pass through)',
        description:
          'Point an OpenAI SDK at `{base}/api/v1/ai` with an organization API key. The prompt plus the output allowance are held before the call and settled to the provider\'s usage after it (docs/ai-proxy.md).',
        security,
        body: ChatBodySchema,
        response: {
          200: {
            description: 'The provider\'s chat.completion, or with stream:true its text/event-stream of chat.completion.chunk events',
            content: {
              'application/json': { schema: PassedThrough('A chat.completion object') },
              'text/event-stream': { schema: Type.String({ description: 'data: {chat.completion.chunk}\\n\\n … data: [DONE]\\n\\n' }) },
            },
          },
          ...aiErrors(),
        },
      },
    },
    async (request, reply) => {
      const { ctx, deployment } = aiDeploymentOf(request);
      return chatCompletions({ ctx, deployment, upstream, request, reply }, request.body as ChatBody);
    },
  );

  app.post(
    '/api/v1/ai/embeddings',
    {
      config,
      schema: {
        tags: ['AI'],
        operationId: 'createEmbeddings',
        summary: 'OpenAI embeddings through the proxy, metered against the AI token quota',
        security,
        body: EmbeddingsBodySchema,
        response: { 200: PassedThrough('The provider\'s embedding list'), ...aiErrors() },
      },
    },
    async (request, reply) => {
      const { ctx, deployment } = aiDeploymentOf(request);
      return embeddings({ ctx, deployment, upstream, request, reply }, request.body as EmbeddingsBody);
    },
  );

  app.get(
    '/api/v1/ai/models',
    {
      config: { auth: 'deploymentOrApiKey', scope: 'read', errorShape: 'openai' },
      schema: {
        tags: ['AI'],
        operationId: 'listAiModels',
        summary: 'The models the proxy offers (AI_MODELS, else the model-class map), in the OpenAI list shape',
        security,
        response: { 200: ModelList, ...flatErrors(401, 403, 429), 400: OpenAiError },
      },
    },
    async (request) => {
      const ctx = ctxOf(request);
      return { object: 'list' as const, data: offeredModels(ctx.config).map((id) => modelObject(ctx, id)) };
    },
  );

  app.get(
    '/api/v1/ai/models/:model',
    {
      config: { auth: 'deploymentOrApiKey', scope: 'read', errorShape: 'openai' },
      schema: {
        tags: ['AI'],
        operationId: 'retrieveAiModel',
        summary: 'One model the proxy offers, in the OpenAI model shape (answered from configuration, like the list)',
        description: 'What `client.models.retrieve(id)` calls. A model the proxy does not offer is 404 `model_not_found` in the OpenAI error shape.',
        security,
        params: ModelParams,
        response: {
          200: ModelObject,
          ...flatErrors(401, 403, 429),
          400: OpenAiError,
          404: ModelNotFound,
        },
      },
    },
    async (request) => {
      const ctx = ctxOf(request);
      const { model } = request.params;
      if (!offeredModels(ctx.config).includes(model)) throw modelNotFound(model);
      return modelObject(ctx, model);
    },
  );

  app.post(
    '/api/v1/ai/responses',
    {
      config,
      schema: {
        tags: ['AI'],
        operationId: 'createResponse',
        summary: 'OpenAI Responses API through the proxy, stateless, metered against the AI token quota (streams pass through)',
        description:
          'What current OpenAI and Vercel AI SDKs call by default. The prompt plus `max_output_tokens` (the allowance) are held before the call and settled to the usage of `response.completed` / `response.incomplete` / `response.failed` (docs/ai-proxy.md, Responses API). No `GET`/`DELETE /responses/{id}`: nothing is stored.',
        security,
        body: ResponsesBodySchema,
        response: {
          200: {
            description: "The provider's response object, or with stream:true its text/event-stream of typed events",
            content: {
              'application/json': { schema: PassedThrough('A response object') },
              'text/event-stream': {
                schema: Type.String({ description: 'event: response.created … event: response.output_text.delta … event: response.completed (or response.incomplete / response.failed)' }),
              },
            },
          },
          ...aiErrors(),
          501: Type.Ref('FlatError', { description: 'AI_ROUTE_NOT_SUPPORTED: the provider has no Responses API (it answered 404/405 for /responses); nothing was charged' }),
        },
      },
    },
    async (request, reply) => {
      const { ctx, deployment } = aiDeploymentOf(request);
      return createResponse({ ctx, deployment, upstream, request, reply }, request.body as ResponsesBody);
    },
  );

  app.post(
    '/api/ai/generate',
    {
      config: { auth: 'deploymentOrApiKey', scope: 'write', spends: true },
      schema: {
        tags: ['AI'],
        operationId: 'generateText',
        summary: 'Generate text with AI_DEFAULT_MODEL (self-hosted path; envelope, or a text/plain stream)',
        security,
        body: GenerateBodySchema,
        response: {
          200: {
            description: 'The envelope with the text, or with stream:true a text/plain chunked stream of it',
            content: {
              'application/json': { schema: Envelope(GeneratedSchema) },
              'text/plain': { schema: Type.String() },
            },
          },
          ...envelopeErrors(400, 401, 403, 404, 429, 502),
        },
      },
    },
    async (request, reply) => {
      const { ctx, deployment } = aiDeploymentOf(request);
      const result = await generate({ ctx, deployment, upstream, request, reply }, request.body);
      // null: the reply is a stream already under way. (The reply itself must not be returned through an
      // awaited async function: a Fastify reply is thenable and resolves to undefined once sent.)
      return result === null ? reply : ok(result, 'Generated');
    },
  );
}
