import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ValidationError } from '../errors.js';

/**
 * The `Idempotency-Key` header (docs/metering.md, Idempotency; docs/webhooks.md, The proxy), the equal of a body's idempotency field: 1 to 200
 * characters, or absent. One reader for every route that takes it.
 */
export function idempotencyKeyHeader(request: FastifyRequest): string | undefined {
  onlyOnce(request, 'Idempotency-Key');
  const raw = request.headers['idempotency-key'];
  const key = Array.isArray(raw) ? raw[0] : raw;
  if (key !== undefined && (key.length === 0 || key.length > 200)) {
    throw new ValidationError('Idempotency-Key must be 1 to 200 characters', [{ field: 'Idempotency-Key', message: 'must be 1 to 200 characters' }]);
  }
  return key;
}

/**
 * A header that names one thing (a key, an end user) sent more than once is refused (docs/input.md):
 * Node joins repeated headers it does not know into one value with `, `, so two keys `a` and `b`
 * would be read as a third, `a, b`, and a retry that sends only `a` would be another call.
 */
export function onlyOnce(request: { raw: Pick<FastifyRequest['raw'], 'rawHeaders'> }, name: string): void {
  const lower = name.toLowerCase();
  const raw = request.raw.rawHeaders;
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === lower.length && raw[i]!.toLowerCase() === lower) seen += 1;
  if (seen > 1) throw new ValidationError(`Send the ${name} header once`, [{ field: name, message: 'is sent more than once' }]);
}

/**
 * A route that takes the header (`config.idempotencyKey`, which also documents it in the OpenAPI
 * document) refuses a malformed one before its handler reads anything: a bad key is bad input whether
 * or not the body carries its own idempotency field or names a row that exists. After validation, so a
 * malformed path id is still the 404 it always is (docs/input.md), whatever the headers say.
 */
export function registerIdempotencyKeyCheck(app: FastifyInstance): void {
  // Callback style: no promise per request for work that never waits.
  app.addHook('preHandler', (request, _reply, done) => {
    try {
      if (request.routeOptions.config?.idempotencyKey) idempotencyKeyHeader(request);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  });
}
