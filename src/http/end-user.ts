import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../errors.js';

/**
 * The end user of a call (docs/budgets.md): the body's field (`end_user_id`, or service usage's
 * `mcp_user_id`) or the `X-End-User-Id` header; both sent, they must be equal. `*` means "each end
 * user" in a budget and is no one's id.
 */
export function endUserOf(request: FastifyRequest, bodyId: string | null | undefined, field: string): string | null {
  const raw = request.headers['x-end-user-id'];
  const header = Array.isArray(raw) ? raw[0] : raw;
  if (header !== undefined && (header.length < 1 || header.length > 200 || header === '*')) {
    throw new ValidationError('X-End-User-Id must be 1 to 200 characters and not "*"', [{ field: 'X-End-User-Id', message: 'must be 1 to 200 characters and not "*"' }]);
  }
  // Service usage's mcp_user_id takes any id it always took.
  if (bodyId === '*' && field === 'end_user_id') throw new ValidationError(`${field} must not be "*"`, [{ field, message: 'must not be "*"' }]);
  if (header !== undefined && bodyId != null && header !== bodyId) {
    throw new ValidationError(`${field} and the X-End-User-Id header differ`, [{ field, message: 'differs from X-End-User-Id' }]);
  }
  return bodyId ?? header ?? null;
}

