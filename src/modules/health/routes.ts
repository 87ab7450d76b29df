import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { envelopeErrors } from '../../http/envelope.js';

/** What the input guard answers any route (docs/input.md), in these routes' shape. */
const BadInput = Type.Ref('EnvelopeError', { description: 'VALIDATION_ERROR: input no route takes (a NUL character in the query or a header; docs/input.md)' });

/** No auth, no rate limit (docs/limits.md, Rate limits; metrics: a scraper's METRICS_TOKEN or the operator key). */
export async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        tags: ['Health'],
        operationId: 'getHealth',
        summary: 'The process is up',
        response: { 200: Type.Object({ status: Type.Literal('ok') }), 400: BadInput },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        tags: ['Health'],
        operationId: 'getReadiness',
        summary: 'The database (and Redis, when configured) answer; 503 names what does not',
        response: {
          200: Type.Object({ status: Type.String(), checks: Type.Record(Type.String(), Type.String()) }),
          400: BadInput,
          503: Type.Object(
            { status: Type.String(), checks: Type.Record(Type.String(), Type.String()) },
            { description: 'Not ready: checks names the dependency that does not answer' },
          ),
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

  app.get(
    '/metrics',
    {
      config: { auth: 'metrics' },
      schema: {
        tags: ['Health'],
        operationId: 'getMetrics',
        summary: 'Prometheus metrics: process, HTTP requests by route, deductions, reservations, outboxes, webhooks, upstreams, rate limits',
        description:
          'The Prometheus text exposition format (version 0.0.4), for a stock Prometheus scrape: `Authorization: Bearer <METRICS_TOKEN>` ' +
          '(a credential that opens this route only; set METRICS_TOKEN) or the operator key `X-Admin-Key`. Every series is described in ' +
          'docs/operations-metrics.md. The outbox gauges are read from the database at scrape time; if that read fails, the scrape still ' +
          'answers 200 without them and `creditgate_scrape_collector_success{collector="outbox"}` is 0.',
        security: [{ metricsToken: [] }, { adminKey: [] }],
        produces: ['text/plain'],
        response: { 200: Type.String({ description: 'Prometheus text exposition format' }), ...envelopeErrors(401) },
      },
    },
    async (_request, reply) => {
      const { metrics } = app.deps;
      return reply.type(metrics.registry.contentType).send(await metrics.scrape());
    },
  );
}
