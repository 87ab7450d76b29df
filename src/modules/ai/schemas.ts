import { type TSchema, Type } from 'typebox';
import { flatErrors, Nullable } from '../../http/schemas.js';

/** TypeBox schemas of the AI proxy's routes (routes.ts); the OpenAPI document comes from them. */

export const security: Array<Record<string, string[]>> = [{ apiKey: [] }, { apiKeyHeader: [] }, { deploymentId: [], deploymentSecret: [] }];

export const MaxTokens = (what: string) =>
  Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 1_000_000, description: `${what}; the proxy sends at most what the deployment can pay for` })));

export const ChatMessage = Type.Object(
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

export const ChatBodySchema = Type.Object(
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

export const TokenIds = Type.Array(Type.Integer({ minimum: 0, maximum: 10_000_000 }), { minItems: 1, maxItems: 100_000 });

export const EmbeddingsBodySchema = Type.Object(
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

export const OpenAiError = Type.Object(
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

export const InvalidRequest = Type.Object(
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

export const PassedThrough = (description: string) =>
  Type.Object({}, { additionalProperties: true, description: `${description}, as the provider wrote it` });

/** The errors of the OpenAI-shaped routes: 400 OpenAI shape; 403, 429, 502, 503 flat (docs/ai-proxy.md, Errors). */
export function aiErrors(): Record<number, TSchema> {
  const flat = flatErrors(401, 403, 404, 429, 502);
  return {
    ...flat,
    400: Type.Union([OpenAiError, InvalidRequest], { description: 'Bad input (OpenAI error shape), or a field or part the proxy cannot bound (INVALID_REQUEST)' }),
    403: Type.Ref('FlatError', { description: 'FEATURE_NOT_AVAILABLE (ai_enabled off), DEPLOYMENT_SUSPENDED, INSUFFICIENT_SCOPE' }),
    429: Type.Ref('FlatError', {
      description: 'AI_QUOTA_EXCEEDED (no tokens and no purchased credits, or credits owed: x-should-retry false, resets_at in the body, Retry-After only when that is within the hour; what the call needs only held by calls in progress: the message says so, no x-should-retry), the per-minute rate limit, too many large prompts being counted (RATE_LIMITED with Retry-After), or the provider\'s own 429 handed on with its Retry-After',
    }),
    502: Type.Ref('FlatError', { description: 'AI_UPSTREAM_ERROR: the provider answered 5xx, timed out or could not be reached; nothing was charged' }),
    503: Type.Ref('FlatError', { description: 'AI_NOT_CONFIGURED (no AI_BASE_URL), or the database is unavailable' }),
  };
}

export const ModelObject = Type.Object(
  {
    id: Type.String({ examples: ['gpt-4o-mini'] }),
    object: Type.Literal('model'),
    created: Type.Integer({ description: 'Unknown to the proxy: 0' }),
    owned_by: Type.String({ examples: ['creditgate'] }),
    model_class: Type.String({ description: 'standard, advanced or premium: the credit rate past the quota' }),
  },
  { title: 'AiModel', description: 'A model the proxy offers, in the OpenAI model shape' },
);

export const ModelList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(ModelObject),
}, { title: 'ModelList' });

export const ModelParams = Type.Object({
  model: Type.String({
    minLength: 1,
    maxLength: 256,
    description: 'The model id, percent-encoded where it holds a `/` (the OpenAI SDKs encode it; `:` may stay as it is)',
    examples: ['gpt-4o-mini', 'ft:gpt-4o:acme::abc123', 'openai%2Fo3'],
  }),
});

export const ModelNotFound = Type.Object(
  {
    error: Type.Object({
      message: Type.String(),
      type: Type.Literal('invalid_request_error'),
      param: Type.Null(),
      code: Type.Literal('model_not_found'),
    }),
  },
  { title: 'AiModelNotFound', description: 'A model the proxy does not offer, in the OpenAI error shape (the SDKs raise NotFoundError)' },
);

const Item = Type.Object({}, { additionalProperties: true });

export const ResponsesBodySchema = Type.Object(
  {
    model: Type.String({ minLength: 1, maxLength: 256, examples: ['gpt-4o-mini'] }),
    input: Type.Optional(
      Type.Union([Type.String(), Type.Array(Item, { maxItems: 100_000 })], {
        description:
          'Text, or items: messages (input_text, input_image, input_file, input_audio parts), function_call / function_call_output, custom tool calls and reasoning items. Every part counts in the prompt hold; stored files (file_id), files by URL and item references are 400 (docs/ai-proxy.md, Responses API).',
      }),
    ),
    instructions: Type.Optional(Nullable(Type.String({ description: 'A system (developer) message; counted in the prompt hold' }))),
    max_output_tokens: MaxTokens('Output tokens, reasoning included'),
    stream: Type.Optional(Nullable(Type.Boolean({ description: 'Server-sent events (response.created … response.completed), passed through as they come' }))),
    store: Type.Optional(Nullable(Type.Boolean({ description: 'Forced to false upstream: nothing is stored, so nothing can be referred to later' }))),
    background: Type.Optional(Nullable(Type.Boolean({ description: 'true is 400: a background response outlives the call that pays for it' }))),
    tools: Type.Optional(
      Type.Array(Type.Object({ type: Type.String({ maxLength: 64, examples: ['function'] }) }, { additionalProperties: true }), {
        maxItems: 10_000,
        description: 'Function and custom tools; hosted tools (web_search, file_search, code_interpreter, image_generation, computer_use, mcp, …) are 400',
      }),
    ),
  },
  {
    additionalProperties: true,
    description:
      "The OpenAI Responses API request, stateless only: previous_response_id, conversation, prompt (stored prompts) and background: true are 400 naming the field, store is forced to false. The fields of OpenAI's API reference (and AI_EXTRA_FIELDS) are forwarded; any other is 400 INVALID_REQUEST (docs/ai-proxy.md).",
  },
);

export const GenerateBodySchema = Type.Object(
  {
    prompt: Type.String({ minLength: 1, maxLength: 500_000 }),
    max_tokens: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    stream: Type.Optional(Type.Boolean({ description: 'When true the reply is a text/plain stream of the text' })),
  },
  { additionalProperties: false },
);

export const GeneratedSchema = Type.Object({
  text: Type.String(),
  model: Type.String({ examples: ['gpt-4o-mini'] }),
  usage: Type.Object({ input_tokens: Type.Integer(), output_tokens: Type.Integer() }),
});
