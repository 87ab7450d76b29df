import { readFileSync } from 'node:fs';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import { limitClassOf } from './rate-limit.js';
import { webhooksSection } from './openapi-events.js';
import { SUCCESS_DESCRIPTIONS, TAGS } from './openapi-text.js';
import { EnvelopeError, FlatError } from './schemas.js';

/**
 * OpenAPI 3.1 generated from the route schemas (STYLE rule 6), served at /openapi.json and rendered
 * at /docs, written for code generators (docs/openapi.md): every operation has a stable operationId
 * and a declared tag, public ones say `security: []`, every answer and header is described, shapes
 * that recur are named component schemas, and the events organization webhooks receive are the
 * `webhooks` section. Redocly and Spectral lint it in the suite (test/openapi-lint.test.ts).
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route reads the Idempotency-Key header ('accepts'), and also answers a replay with
     * `Idempotent-Replayed: true` ('replays'). Documents the headers; a malformed key is refused up
     * front (http/idempotency-key.ts); the handler does the rest.
     */
    idempotencyKey?: 'accepts' | 'replays';
  }
}

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const header = (description: string, schema: Record<string, unknown> = { type: 'string' }) => ({ description, schema });

/** Response headers, declared once under components.headers and referenced by the operations. */
const HEADERS = {
  'X-RateLimit-Limit': header('Requests allowed in the window closest to refusing', { type: 'integer' }),
  'X-RateLimit-Remaining': header('Requests left in that window', { type: 'integer' }),
  'X-RateLimit-Reset': header('When that window frees a request, epoch seconds', { type: 'integer' }),
  RateLimit: header('IETF RateLimit field (draft-ietf-httpapi-ratelimit-headers): "name";r=remaining;t=seconds per window'),
  'RateLimit-Policy': header('IETF RateLimit-Policy field: "name";q=limit;w=window seconds per window'),
  'Retry-After': header('Seconds to wait before trying again', { type: 'integer', minimum: 0 }),
  'Idempotent-Replayed': header('true when this is the stored answer of an earlier request with the same key: nothing was done again', {
    type: 'string',
    enum: ['true'],
  }),
} as const;

const RATE_LIMIT_HEADERS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit', 'RateLimit-Policy'] as const;
const ref = (name: keyof typeof HEADERS) => ({ $ref: `#/components/headers/${name}` });

const IDEMPOTENCY_KEY = {
  'Idempotency-Key': {
    type: 'string',
    minLength: 1,
    maxLength: 200,
    description: 'Makes the request safe to retry: the same key within 24 h answers the first result and does nothing again',
  },
};

type Schema = Record<string, unknown> & { response?: Record<string, Record<string, unknown>>; operationId?: string };

/** Per route: what the route's configuration knows and the schema does not say (security, headers, answers). */
function documentRoute({ schema, url, route }: { schema: unknown; url: string; route: RouteOptions }): { schema: Schema; url: string } {
  const base = (schema ?? {}) as Schema;
  if (base.hide) return { schema: base, url };
  const config = (route.config ?? {}) as { auth?: string; rateLimit?: string; idempotencyKey?: 'accepts' | 'replays' };
  const out: Schema = { ...base };
  if (!out.security && (config.auth ?? 'public') === 'public') out.security = [];
  if (config.idempotencyKey) {
    const headers = (out.headers ?? { type: 'object', properties: {} }) as { properties?: Record<string, unknown> };
    out.headers = { ...headers, type: 'object', properties: { ...headers.properties, ...IDEMPOTENCY_KEY } };
  }
  const limited = limitClassOf(url) !== 'none' && config.rateLimit !== 'none';
  const response: Record<string, Record<string, unknown>> = {};
  for (const [status, answer] of Object.entries(out.response ?? {})) {
    const headers: Record<string, unknown> = {};
    const success = status.startsWith('2');
    if (limited && (success || status === '429')) for (const name of RATE_LIMIT_HEADERS) headers[name] = ref(name);
    // 429 says when the window frees; a 503 from a dependency that is away (the database, Stripe) says when to try again.
    if (status === '429' || (status === '503' && url !== '/readyz')) headers['Retry-After'] = ref('Retry-After');
    if (success && config.idempotencyKey === 'replays') headers['Idempotent-Replayed'] = ref('Idempotent-Replayed');
    // Swagger reads the answer's description from this key and leaves the (shared, titled) schema as it is.
    const described = success && !answer.description ? { 'x-response-description': SUCCESS_DESCRIPTIONS[out.operationId ?? ''] } : {};
    // A route's own headers (a CSV export's Link, Content-Disposition) stay beside the ones added here.
    const all = { ...(answer.headers as Record<string, unknown> | undefined), ...headers };
    response[status] = { ...answer, ...described, ...(Object.keys(all).length > 0 ? { headers: all } : {}) };
  }
  // The input guard and the JSON parser answer every route (docs/input.md): a NUL in a query or a
  // header, a body that is not JSON. A route that lists no 400 of its own gets one in the shape of its
  // other errors (its 500's; the AI routes' 400 is the OpenAI shape and they list it themselves).
  const fault = response['500'];
  if (out.response && !response['400'] && fault && (route.config as { errorShape?: string } | undefined)?.errorShape !== 'openai') {
    response['400'] = { ...fault, description: 'Invalid request: input no route takes (a NUL character, an unpaired surrogate, a body that is not JSON or not UTF-8; docs/input.md)' };
  }
  if (out.response) out.response = response;
  return { schema: out, url };
}

/**
 * Swagger writes each header as `{schema: …}`; a `$ref` belongs beside, not inside, the schema. And a
 * schema with a `title` (a shape the API returns in several places) becomes one component schema.
 */
function finishDocument(document: Record<string, unknown>): Record<string, unknown> {
  const components: Record<string, Record<string, unknown>> = { ...(document.components as Record<string, Record<string, unknown>>), headers: { ...HEADERS } };
  const schemas: Record<string, unknown> = { ...components.schemas };
  components.schemas = schemas;
  const hoist = (node: unknown, path: string): unknown => {
    if (Array.isArray(node)) return node.map((n, i) => hoist(n, `${path}/${i}`));
    if (!node || typeof node !== 'object') return node;
    const entries = Object.entries(node as Record<string, unknown>).map(([k, v]) => [k, hoist(v, `${path}/${k}`)] as const);
    const copy = Object.fromEntries(entries) as Record<string, unknown>;
    const title = copy.title;
    if (typeof title === 'string' && (copy.type === 'object' || copy.properties)) {
      const known = schemas[title];
      if (known && JSON.stringify(known) !== JSON.stringify(copy)) {
        throw new Error(`OpenAPI: two different schemas are titled ${title} (one at ${path}); give one another title`);
      }
      schemas[title] = copy;
      return { $ref: `#/components/schemas/${title}` };
    }
    return copy;
  };
  for (const operations of Object.values((document.paths ?? {}) as Record<string, Record<string, Record<string, unknown>>>)) {
    for (const operation of Object.values(operations)) {
      for (const answer of Object.values((operation.responses ?? {}) as Record<string, Record<string, unknown>>)) {
        const headers = answer.headers as Record<string, { schema?: Record<string, unknown> }> | undefined;
        if (headers) {
          for (const [name, value] of Object.entries(headers)) if (value.schema?.$ref) headers[name] = { $ref: value.schema.$ref } as never;
        }
      }
      if (operation.requestBody) operation.requestBody = hoist(operation.requestBody, 'requestBody');
      if (operation.responses) operation.responses = hoist(operation.responses, 'responses');
      if (operation.parameters) operation.parameters = hoist(operation.parameters, 'parameters');
    }
  }
  const webhooks = hoist(webhooksSection(), 'webhooks');
  return { ...document, components, webhooks };
}

export async function registerOpenApi(app: FastifyInstance, publicBaseUrl: string): Promise<void> {
  app.addSchema(FlatError);
  app.addSchema(EnvelopeError);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'creditgate',
        version: VERSION,
        summary: 'Credit-metered platform API for MCP servers and AI features',
        description:
          'Credit-metered platform API: MCP tool metering, entitlements, quotas, webhooks, accounts and billing. ' +
          'Errors on /api/v1 paths are flat ({error, code, message}); the application API answers with the envelope. ' +
          'Each operation has a stable operationId for generated clients; the events organization webhooks receive are under `webhooks`.',
        license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
        contact: { name: 'creditgate operators', url: publicBaseUrl },
      },
      servers: [{ url: publicBaseUrl, description: 'This installation' }],
      tags: TAGS,
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'Organization API key (cg_…)' },
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'User access token from /auth/login' },
          apiKeyHeader: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'Organization API key on the application API' },
          serviceKey: { type: 'apiKey', in: 'header', name: 'X-MCP-Service-Key', description: 'The shared service key of hosted MCP servers' },
          adminKey: { type: 'apiKey', in: 'header', name: 'X-Admin-Key', description: "The operator's key (ADMIN_API_KEY)" },
          metricsToken: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN: opens GET /metrics only, for a Prometheus scrape' },
          deploymentId: { type: 'apiKey', in: 'header', name: 'X-Deployment-ID', description: 'Deployment id; sent with X-Deployment-Secret' },
          deploymentSecret: { type: 'apiKey', in: 'header', name: 'X-Deployment-Secret', description: "The deployment's secret" },
          consoleSession: { type: 'apiKey', in: 'cookie', name: 'cg_console_refresh', description: "The console's HttpOnly session cookie (docs/console.md)" },
        },
      },
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (json.$id as string) ?? `def-${i}` },
    transform: documentRoute as never,
    transformObject: (documentObject) => finishDocument((documentObject as { openapiObject: Record<string, unknown> }).openapiObject) as never,
  });
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    theme: { title: 'creditgate API' },
    logo: { type: 'image/svg+xml', content: Buffer.from(LOGO), href: '/docs', target: '_self' },
    uiConfig: { displayOperationId: true, defaultModelsExpandDepth: 0 },
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}

const LOGO =
  '<svg xmlns="http://www.w3.org/2000/svg" width="160" height="32" viewBox="0 0 160 32">' +
  '<circle cx="16" cy="16" r="13" fill="none" stroke="#fff" stroke-width="4"/>' +
  '<text x="36" y="23" font-family="sans-serif" font-size="20" font-weight="bold" fill="#fff">creditgate</text></svg>';
