import { type TSchema, Type } from 'typebox';
import { ERROR_STATUS, type ErrorCode } from '../errors.js';

/** The flat error body of every /api/v1 path (docs/openapi.md, Shapes). */
export const FlatError = Type.Object(
  {
    error: Type.String({ description: 'lower_snake error word', examples: ['unauthorized'] }),
    code: Type.String({ description: 'UPPER_SNAKE machine-readable code', examples: ['UNAUTHORIZED'] }),
    message: Type.String({ description: 'What went wrong, for a person' }),
    fields: Type.Optional(
      Type.Array(Type.Object({ field: Type.String(), message: Type.String() }), {
        description: 'Validation errors by field (INVALID_REQUEST)',
      }),
    ),
    upgrade_url: Type.Optional(Type.String()),
    request_id: Type.Optional(Type.String()),
    invocation_status: Type.Optional(
      Type.Union([Type.Literal('recorded'), Type.Literal('refunded')], {
        description:
          'IDEMPOTENCY_KEY_REUSED of a reservation: the invocation was recorded (a retry of a paid call) or recorded and refunded (a new run is a new call)',
      }),
    ),
  },
  { $id: 'FlatError', additionalProperties: true, description: 'Error body of the /api/v1 paths' },
);

/** The envelope error of the application API (docs/openapi.md, Shapes). */
export const EnvelopeError = Type.Object(
  {
    success: Type.Literal(false),
    error: Type.Object({ code: Type.String(), message: Type.String() }),
    details: Type.Object({ timestamp: Type.String({ format: 'date-time' }) }, { additionalProperties: true }),
  },
  { $id: 'EnvelopeError', description: 'Error envelope of the application API' },
);

const DESCRIPTIONS: Record<number, string> = {
  400: 'Invalid request (INVALID_REQUEST): malformed JSON, wrong types, unknown fields, sizes over the limits',
  401: 'Missing or invalid credentials',
  403: 'Forbidden (scope, feature flag, or credits)',
  404: 'Not found',
  409: 'Conflict',
  410: 'Gone: a usage record deleted by the usage retention (USAGE_RECORD_EXPIRED), or a top-up link no longer valid',
  422: 'Idempotency key reused with a different request',
  429: 'Rate or quota limit reached',
  500: 'Internal error (no details on the wire)',
  502: 'Stripe refused a request the service made (PAYMENT_PROVIDER_ERROR: a configuration problem); nothing was changed',
  503: 'A dependency (the database, Redis, Stripe) is unavailable, or billing is not configured (BILLING_NOT_CONFIGURED); nothing was changed',
};

/** The error responses of a route, for its schema (STYLE rule 6: every route lists its errors). */
export function flatErrors(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {};
  for (const status of [...statuses, 500, 503]) {
    out[status] = Type.Ref('FlatError', { description: DESCRIPTIONS[status] ?? 'Error' });
  }
  return out;
}

export function codesFor(status: number): ErrorCode[] {
  return (Object.keys(ERROR_STATUS) as ErrorCode[]).filter((c) => ERROR_STATUS[c] === status);
}

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/**
 * A closed set of strings as `{type: 'string', enum: [...]}`: what code generators turn into one enum
 * type (a union of literals comes out as `anyOf` of constants: one class per value in some generators)
 * and what lets a validation error say "must be one of a, b, c" once.
 */
export const StringEnum = <const T extends readonly [string, ...string[]]>(
  values: T,
  options: { description?: string; default?: T[number]; examples?: T[number][] } = {},
) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options });

/**
 * docs/input.md, URLs users store: a URL a user stores and others' browsers may open (`avatar_url`,
 * `website`, `logo_url`) is http or https only: `javascript:`, `data:`, `file:` and the rest are refused with 400
 * naming the field. An absolute URI (RFC 3986) whose scheme, in any case, is http or https.
 */
export const StoredUrl = (description: string) =>
  Type.String({
    format: 'uri',
    pattern: '^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\s]',
    maxLength: 2000,
    description: `${description} (http or https, up to 2,000 characters)`,
    examples: ['https://example.com/logo.png'],
  });

export const InvocationId = Type.String({
  minLength: 1,
  maxLength: 200,
  description: 'Idempotency id of this tool call; the Idempotency-Key header is its equal',
  examples: ['inv_01J9Z3'],
});

export const ToolName = Type.String({
  minLength: 1,
  maxLength: 200,
  description: 'MCP tool name',
  examples: ['rag_query'],
});

export const Metadata = Nullable(
  Type.Record(Type.String(), Type.Unknown(), {
    description: 'Arbitrary JSON object kept with the usage record (at most 16 KiB serialized)',
  }),
);

/** An OpenAPI security requirement list: any one of the named schemes. */
export const anyOf = (...schemes: string[]): Array<Record<string, string[]>> => schemes.map((s) => ({ [s]: [] }));
