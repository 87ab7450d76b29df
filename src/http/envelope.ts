import { type TSchema, Type } from 'typebox';
import { ValidationError } from '../errors.js';
import { instantBoundFault } from '../lib/instants.js';

/**
 * The success side of the envelope (docs/openapi.md, Shapes): `{success: true, data, message}`, and for lists
 * `meta.next_cursor`. (The error side is written by the error handler.)
 */
export function ok<T>(data: T, message = 'OK'): { success: true; data: T; message: string } {
  return { success: true, data, message };
}

export function page<T>(
  data: T[],
  nextCursor: string | null,
  message = 'OK',
): { success: true; data: T[]; message: string; meta: { next_cursor: string | null } } {
  return { success: true, data, message, meta: { next_cursor: nextCursor } };
}

/** A named payload names its envelope too (`Organization` → `OrganizationEnvelope`): one component schema per shape in the OpenAPI document. */
const titled = (schema: TSchema, suffix: string) => {
  const title = (schema as { title?: unknown }).title;
  return typeof title === 'string' ? { title: `${title}${suffix}` } : {};
};

export const Envelope = <T extends TSchema>(data: T) =>
  Type.Object({ success: Type.Literal(true), data, message: Type.String() }, titled(data, 'Envelope'));

const PageMeta = Type.Object(
  { next_cursor: Type.Union([Type.String(), Type.Null()], { description: 'Pass as ?cursor= for the next page' }) },
  { title: 'PageMeta' },
);

export const PageEnvelope = <T extends TSchema>(item: T) =>
  Type.Object({ success: Type.Literal(true), data: Type.Array(item), message: Type.String(), meta: PageMeta }, titled(item, 'Page'));

const DESCRIPTIONS: Record<number, string> = {
  400: 'VALIDATION_ERROR (details.fields names the fields)',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN or FEATURE_NOT_AVAILABLE',
  404: 'NOT_FOUND (also for another organization\'s rows)',
  409: 'CONFLICT',
  422: 'IDEMPOTENCY_KEY_REUSED (the key was used for a different request)',
  429: 'RATE_LIMITED',
  502: 'PAYMENT_PROVIDER_ERROR (Stripe refused a request the service made)',
  503: 'SERVICE_UNAVAILABLE (a dependency such as Stripe) or BILLING_NOT_CONFIGURED',
};

/** The envelope error responses of a route, for its schema. */
export function envelopeErrors(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {};
  for (const status of [...statuses, 500, 503]) {
    out[status] = Type.Ref('EnvelopeError', { description: DESCRIPTIONS[status] ?? 'Error' });
  }
  return out;
}

export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'Page size (1–100)' })),
    cursor: Type.Optional(Type.String({ maxLength: 500, description: 'meta.next_cursor of the previous page' })),
  },
  { additionalProperties: false },
);

/** A decoded keyset position over (timestamp, uuid id), ready to bind as query parameters. */
export interface KeysetPosition {
  at: Date;
  id: string;
}

/** Keyset cursors over (timestamp, id): stable under inserts, opaque to clients. */
export function encodeCursor(at: Date, id: string): string {
  return Buffer.from(JSON.stringify({ at: at.toISOString(), id })).toString('base64url');
}

const CANONICAL_ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Only cursors this API could have written (canonical ISO time from 1970 and before 9999-01-01, UUID
 * id) pass; anything else — garbage, or a cursor edited by hand that SQL would choke on or that one
 * database takes and the other refuses (year 0000) — is 400 naming `cursor` (docs/input.md, Dates).
 */
export function decodeCursor(cursor: string | undefined): KeysetPosition | null {
  if (cursor === undefined) return null;
  try {
    const parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as { at?: unknown; id?: unknown };
    if (typeof parsed.at === 'string' && typeof parsed.id === 'string' && CANONICAL_ISO.test(parsed.at) && UUID.test(parsed.id)) {
      const at = new Date(parsed.at);
      if (!Number.isNaN(at.getTime()) && at.toISOString() === parsed.at && instantBoundFault(at) === null) return { at, id: parsed.id };
    }
  } catch {
    // fall through
  }
  throw new ValidationError('Invalid cursor', [{ field: 'cursor', message: 'is not a cursor this API gave out' }]);
}

/** Fetch limit+1 rows, return a page and the cursor of its last row when there is more. */
export function pageOf<R extends { id: string }>(rows: R[], limit: number, at: (row: R) => Date): { items: R[]; next: string | null } {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, next: rows.length > limit && last ? encodeCursor(at(last), last.id) : null };
}
