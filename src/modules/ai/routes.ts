import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type TSchema, Type } from 'typebox';
import type { Ctx } from '../../context.js';
import { AppError, NotFoundError } from '../../errors.js';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { flatErrors, Nullable } from '../../http/schemas.js';
import { modelClassOf } from '../quotas/ai-tokens.js';
import { type AiDeployment, type ChatBody, chatCompletions, type EmbeddingsBody, embeddings, generate } from './proxy.js';
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
    // SPEC §8: a suspended deployment reads but neither spends nor sends, whichever credential names it.
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

const security: Array<Record<string, string[]>> = [{ apiKey: [] }, { apiKeyHeader: [] }, { deploymentId: [], deploymentSecret: [] }];

const MaxTokens = (what: string) =>
  Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 1_000_000, description: `${what}; the proxy sends at most what the deployment can pay for` })));

const ChatMessage = Type.Object(
  {
    role: Type.String({ minLength: 1, maxLength: 64, examples: ['user'] }),
    content: Type.Optional(
      Nullable(
        Type.Union([
          Type.String(),
          Type.Array(Type.Object({ type: Type.String({ maxLength: 64 }) }, { additionalProperties: true }), { maxItems: 10_000 }),
        ]),
      ),
    ),
  },
  { additionalProperties: true },
);

const ChatBodySchema = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 256, examples: ['gpt-4o-mini'] }),
    messages: Type.Array(ChatMessage, { minItems: 1, maxItems: 100_000 }),
    max_tokens: MaxTokens('Output tokens per choice'),
    max_completion_tokens: MaxTokens('Output tokens per choice (reasoning models)'),
    n: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 128, description: 'Choices; each may use the output allowance' }))),
    stream: Type.Optional(Nullable(Type.Boolean({ description: 'Server-sent events, passed through chunk by chunk' }))),
    stream_options: Type.Optional(Nullable(Type.Object({ include_usage: Type.Optional(Nullable(Type.Boolean())) }, { additionalProperties: true }))),
  },
  {
    additionalProperties: true,
    description:
      'The OpenAI chat completion request. The fields of OpenAI\'s API reference (and AI_EXTRA_FIELDS) are forwarded; any other is 400 INVALID_REQUEST (docs/ai-proxy.md, Bounds).',
  },
);

const TokenIds = Type.Array(Type.Integer({ minimum: 0, maximum: 10_000_000 }), { minItems: 1, maxItems: 100_000 });

const EmbeddingsBodySchema = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 256, examples: ['text-embedding-3-small'] }),
    input: Type.Union([
      Type.String({ minLength: 1 }),
      Type.Array(Type.String({ minLength: 1 }), { minItems: 1, maxItems: 2048 }),
      TokenIds,
      Type.Array(TokenIds, { minItems: 1, maxItems: 2048 }),
    ]),
  },
  { additionalProperties: true, description: 'The OpenAI embeddings request (input, model, dimensions, encoding_format, user, and AI_EXTRA_FIELDS); any other field is 400 INVALID_REQUEST.' },
);

const OpenAiError = Type.Object(
  {
    error: Type.Object(
      {
        message: Type.String(),
        type: Type.String({ examples: ['invalid_request_error'] }),
        param: Nullable(Type.String({ examples: ['messages'] })),
        code: Nullable(Type.String({ examples: ['INVALID_REQUEST'] })),
      },
      { additionalProperties: true },
    ),
  },
  { title: 'OpenAiError', description: 'Bad request, in the OpenAI error shape (a provider 4xx is handed on in the same shape)' },
);

const InvalidRequest = Type.Object(
  {
    error: Type.Literal('invalid_request'),
    code: Type.Literal('INVALID_REQUEST'),
    message: Type.String({ examples: ['best_of is not a request field this server forwards (OpenAI\'s API reference, plus AI_EXTRA_FIELDS)'] }),
    param: Type.String({ description: 'The field or content part refused', examples: ['best_of', 'messages[0].content[1]'] }),
  },
  {
    title: 'AiInvalidRequest',
    description: 'A field outside OpenAI\'s API reference and AI_EXTRA_FIELDS, or a content part the proxy cannot bound (docs/ai-proxy.md, Bounds)',
  },
);

const PassedThrough = (description: string) =>
  Type.Object({}, { additionalProperties: true, description: `${description}, as the provider wrote it` });

/** The errors of the OpenAI-shaped routes: 400 OpenAI shape; 403, 429, 502, 503 flat (SPEC §5/§6). */
function aiErrors(): Record<number, TSchema> {
  const flat = flatErrors(401, 403, 404, 429, 502);
  return {
    ...flat,
    400: Type.Union([OpenAiError, InvalidRequest], { description: 'Bad input (OpenAI error shape), or a field or part the proxy cannot bound (INVALID_REQUEST)' }),
    403: Type.Ref('FlatError', { description: 'FEATURE_NOT_AVAILABLE (ai_enabled off), DEPLOYMENT_SUSPENDED, INSUFFICIENT_SCOPE' }),
    429: Type.Ref('FlatError', {
      description: 'AI_QUOTA_EXCEEDED (no tokens, no purchased credits; Retry-After up to the reset), the rate limit of §6, or the provider\'s own 429 handed on with its Retry-After',
    }),
    502: Type.Ref('FlatError', { description: 'AI_UPSTREAM_ERROR: the provider answered 5xx, timed out or could not be reached; nothing was charged' }),
    503: Type.Ref('FlatError', { description: 'AI_NOT_CONFIGURED (no AI_BASE_URL), or the database is unavailable' }),
  };
}

const ModelList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(
    Type.Object({
      id: Type.String({ examples: ['gpt-4o-mini'] }),
      object: Type.Literal('model'),
      created: Type.Integer({ description: 'Unknown to the proxy: 0' }),
      owned_by: Type.String({ examples: ['creditgate'] }),
      model_class: Type.String({ description: 'standard, advanced or premium: the credit rate past the quota (SPEC §6)' }),
    }),
  ),
}, { title: 'ModelList' });

const GenerateBodySchema = Type.Object(
  {
    prompt: Type.String({ minLength: 1, maxLength: 500_000 }),
    max_tokens: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    stream: Type.Optional(Type.Boolean({ description: 'When true the reply is a text/plain stream of the text' })),
  },
  { additionalProperties: false },
);

const GeneratedSchema = Type.Object({
  text: Type.String(),
  model: Type.String({ examples: ['gpt-4o-mini'] }),
  usage: Type.Object({ input_tokens: Type.Integer(), output_tokens: Type.Integer() }),
});

/** SPEC §6 AI proxy: the OpenAI-compatible routes under /api/v1/ai and /api/ai/generate. */
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
        response: { 200: ModelList, ...flatErrors(401, 403, 429) },
      },
    },
    async (request) => {
      const ctx = ctxOf(request);
      const { aiModels, aiModelClasses, aiDefaultModel } = ctx.config;
      const ids = aiModels.length > 0 ? aiModels : [...new Set([aiDefaultModel, ...Object.keys(aiModelClasses)])];
      return {
        object: 'list' as const,
        data: ids.map((id) => ({ id, object: 'model' as const, created: 0, owned_by: 'creditgate', model_class: modelClassOf(ctx, id) })),
      };
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
