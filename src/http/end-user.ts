import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../errors.js';
import { onlyOnce } from './idempotency-key.js';

/**
 * The end user of a call (docs/budgets.md): the body's field (`end_user_id`, or service usage's
 * `mcp_user_id`) or the `X-End-User-Id` header; both sent, they must be equal. `*` means "each end
 * user" in a budget and is no one's id.
 */
export function endUserOf(request: FastifyRequest, bodyId: string | null | undefined, field: string): string | null {
  const header = endUserHeader(request);
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


/**
 * The `X-End-User-Id` header as its sender wrote it. Node reads a header's bytes as latin1, while
 * clients send text as UTF-8: "José" arrives as "JosÃ©", another end user than the body's "José".
 * Bytes that are valid UTF-8 are read as UTF-8; any others stay as read (latin1, as before).
 */
export function endUserHeader(request: Pick<FastifyRequest, 'headers'> & { raw?: Pick<FastifyRequest['raw'], 'rawHeaders'> }): string | undefined {
  if (request.raw) onlyOnce({ raw: request.raw }, 'X-End-User-Id');
  const raw = request.headers['x-end-user-id'];
  const header = Array.isArray(raw) ? raw[0] : raw;
  // ASCII (one byte a character) reads the same either way.
  if (header === undefined || Buffer.byteLength(header, 'utf8') === header.length) return header;
  const bytes = Buffer.from(header, 'latin1');
  const text = bytes.toString('utf8');
  return Buffer.from(text, 'utf8').equals(bytes) ? text : header;
}
