import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';

/** SPEC §1: no auth, no rate limit. */
export async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        tags: ['Health'],
        summary: 'The process is up',
        response: { 200: Type.Object({ status: Type.Literal('ok') }) },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        tags: ['Health'],
        summary: 'The database (and Redis, when configured) answer; 503 names what does not',
        response: {
          200: Type.Object({ status: Type.String(), checks: Type.Record(Type.String(), Type.String()) }),
          503: Type.Object({ status: Type.String(), checks: Type.Record(Type.String(), Type.String()) }),
        },
      },
    },
    async (request, reply) => {
      const checks: Record<string, string> = {};
      try {
        await app.deps.db.ping();
        checks.database = 'ok';
      } catch {
        checks.database = 'unreachable';
      }
      const redis = await app.deps.bus.ping();
      if (redis !== null) checks.redis = redis ? 'ok' : 'unreachable';
      const ready = Object.values(checks).every((v) => v === 'ok');
      if (!ready) request.log.warn({ checks }, 'not ready');
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', checks });
    },
  );
}
