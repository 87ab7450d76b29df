import type { FastifyInstance } from 'fastify';

/**
 * `GET /` sends a person who opens the service's address to the API reference. A console will take
 * this place later. Hidden from the OpenAPI document: it is a link for browsers, not an operation.
 */
export async function homeRoutes(app: FastifyInstance): Promise<void> {
  app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/docs', 302));
}
