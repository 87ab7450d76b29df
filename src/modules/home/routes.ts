import type { FastifyInstance } from 'fastify';
import { consoleIsBuilt } from '../console/routes.js';

/**
 * `GET /` sends a person who opens the service's address to the console (docs/console.md), or to the
 * API reference when the console is not built. Hidden from the OpenAPI document: it is a link for
 * browsers, not an operation.
 */
export async function homeRoutes(app: FastifyInstance, options: { consoleRoot: string }): Promise<void> {
  const target = consoleIsBuilt(options.consoleRoot) ? '/console/' : '/docs';
  app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.redirect(target, 302));
}
