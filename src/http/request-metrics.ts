import type { FastifyInstance } from 'fastify';

/** The route label of a request no route matched (404s, probes of random paths): never the raw URL. */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * creditgate_http_request_duration_seconds for every request, in one hook on the root instance (every
 * route plugin inherits it). The label is the route pattern (`/api/v1/mcp/invocations/:invocation_id`),
 * so no id, token or secret of a URL reaches the metrics; Fastify's reply.elapsedTime runs from the
 * request's arrival to the response's end.
 */
export function registerRequestMetrics(app: FastifyInstance): void {
  const histogram = app.deps.metrics.httpRequestDuration;
  // Callback style: no promise per request for work that never waits.
  app.addHook('onResponse', (request, reply, done) => {
    // routeOptions.url is undefined when no route matched (the not-found handler answered).
    const route = request.routeOptions.url ?? UNMATCHED_ROUTE;
    histogram.observe({ route, method: request.method, status_code: String(reply.statusCode) }, reply.elapsedTime / 1000);
    done();
  });
}
