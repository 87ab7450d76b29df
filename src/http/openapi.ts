import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { EnvelopeError, FlatError } from './schemas.js';

/** OpenAPI 3.1 generated from the route schemas (STYLE rule 6), served at /openapi.json and rendered at /docs. */
export async function registerOpenApi(app: FastifyInstance, publicBaseUrl: string): Promise<void> {
  app.addSchema(FlatError);
  app.addSchema(EnvelopeError);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'creditgate',
        version: '0.1.0',
        description:
          'Credit-metered platform API: MCP tool metering, entitlements, quotas, webhooks, accounts and billing. ' +
          'Errors on /api/v1 paths are flat ({error, code, message}); the application API answers with the envelope.',
      },
      servers: [{ url: publicBaseUrl }],
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'Organization API key (cg_…)' },
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'User access token from /auth/login' },
          apiKeyHeader: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'Organization API key on the application API' },
          serviceKey: { type: 'apiKey', in: 'header', name: 'X-MCP-Service-Key' },
          adminKey: { type: 'apiKey', in: 'header', name: 'X-Admin-Key' },
          deploymentId: { type: 'apiKey', in: 'header', name: 'X-Deployment-ID' },
          deploymentSecret: { type: 'apiKey', in: 'header', name: 'X-Deployment-Secret' },
        },
      },
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (json.$id as string) ?? `def-${i}` },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}
