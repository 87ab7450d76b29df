import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../errors.js';

/**
 * The `Idempotency-Key` header (SPEC §4, §7), the equal of a body's idempotency field: 1 to 200
 * characters, or absent. One reader for every route that takes it.
 */
export function idempotencyKeyHeader(request: FastifyRequest): string | undefined {
  const raw = request.headers['idempotency-key'];
  const key = Array.isArray(raw) ? raw[0] : raw;
  if (key !== undefined && (key.length === 0 || key.length > 200)) {
    throw new ValidationError('Idempotency-Key must be 1 to 200 characters', [{ field: 'Idempotency-Key', message: 'must be 1 to 200 characters' }]);
  }
  return key;
}
