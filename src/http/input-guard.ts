import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type FieldError, ValidationError } from '../errors.js';

/**
 * No input reaches a 5xx, at one depth for every route (docs/input.md):
 *   - a string PostgreSQL cannot store — a NUL character (U+0000) or an unpaired UTF-16 surrogate —
 *     anywhere in the body (values and keys, at any depth), the query, the path or the headers is a
 *     400 naming the field: `metadata.a.b`, `query.user_id`, `params.id`, `headers.x-foo`;
 *   - a JSON body nested deeper than MAX_JSON_DEPTH is a 400, before JSON.stringify, Ajv or the
 *     database can recurse into it (JSON.parse itself is not recursive in V8, and Fastify's
 *     secure-json-parse scan is iterative, so parsing such a body is safe; what comes after is not).
 *
 * Where it runs: one `preValidation` hook, registered after authentication (onRequest) and the rate
 * limit (preValidation), before schema validation and every handler. So an unauthenticated caller
 * still gets 401 and learns nothing else (test/auth-matrix.test.ts), bad requests still count
 * against the rate limit (http/rate-limit.ts), and no handler or service ever sees such input. It is
 * not in the JSON content-type parser because query, path and headers do not pass through there, and
 * replacing Fastify's parser would mean re-implementing its prototype-poisoning checks and error codes.
 * Authentication reads its own headers before this hook and refuses a malformed credential with 401
 * without touching the database (well-formedness checks in auth), which is what a bad credential is.
 */

/** Levels of arrays/objects a JSON body may nest, the body itself being level 1. Generous for any metadata or payload. */
export const MAX_JSON_DEPTH = 64;

type StringFault = 'nul' | 'surrogate';

/** The first reason PostgreSQL would refuse this string (text and jsonb alike), or null. */
export function stringFaultOf(value: string): StringFault | null {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code === 0) return 'nul';
    if (code < 0xd800 || code > 0xdfff) continue;
    const next = value.charCodeAt(i + 1);
    if (code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
      i++; // a well-formed pair
      continue;
    }
    return 'surrogate';
  }
  return null;
}

const FAULT_MESSAGE: Record<StringFault, string> = {
  nul: 'contains a NUL character (U+0000)',
  surrogate: 'contains an unpaired UTF-16 surrogate',
};

interface Frame {
  value: unknown;
  /** Arrays/objects enclosing this value. */
  depth: number;
  key: string | number | null;
  parent: Frame | null;
}

/** A key as it may be echoed back: the refused characters written as \uXXXX, and not over 64 characters. */
function printable(key: string | number): string {
  let text = '';
  for (const ch of String(key)) {
    // for…of yields well-formed pairs whole and lone surrogates alone.
    text += ch.length === 1 && stringFaultOf(ch) ? `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}` : ch;
    if (text.length > 64) return `${text.slice(0, 64)}…`;
  }
  return text;
}

function fieldOf(frame: Frame, root: string): string {
  const keys: string[] = [];
  for (let f: Frame | null = frame; f && f.key !== null; f = f.parent) keys.push(printable(f.key));
  keys.reverse();
  if (root === '') return keys.length > 0 ? keys.join('.') : 'body';
  return [root, ...keys].join('.');
}

/**
 * The first value in `input` PostgreSQL could not store, or a nesting past `maxDepth`. Iterative (an
 * explicit stack), so a document nested 500,000 deep costs memory in proportion, not stack frames.
 * `root` prefixes the field names; the body's are bare, as in the schema validator's (`metadata.a`).
 */
export function findInputFault(input: unknown, root: string, maxDepth = MAX_JSON_DEPTH): FieldError | null {
  const stack: Frame[] = [{ value: input, depth: 0, key: null, parent: null }];
  while (stack.length > 0) {
    const frame = stack.pop() as Frame;
    const { value } = frame;
    if (typeof value === 'string') {
      const fault = stringFaultOf(value);
      if (fault) return { field: fieldOf(frame, root), message: FAULT_MESSAGE[fault] };
      continue;
    }
    if (value === null || typeof value !== 'object' || ArrayBuffer.isView(value)) continue;
    const depth = frame.depth + 1;
    if (depth > maxDepth) {
      // Name the outermost field (the full path would be dozens of segments long); a nested array as the whole body is `body`.
      let top = frame;
      while (top.parent?.parent) top = top.parent;
      if (Array.isArray(top.parent?.value)) top = top.parent as Frame;
      return { field: fieldOf(top, root), message: `is nested deeper than ${maxDepth} levels` };
    }
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], depth, key: i, parent: frame });
      continue;
    }
    for (const key of Object.keys(value)) {
      const child: Frame = { value: (value as Record<string, unknown>)[key], depth, key, parent: frame };
      const fault = stringFaultOf(key);
      if (fault) return { field: fieldOf(child, root), message: `is a key that ${FAULT_MESSAGE[fault]}` };
      stack.push(child);
    }
  }
  return null;
}

/** Path first (the resource), then query, headers and body. Throws the 400 the error handler shapes per path. */
export function guardRequest(request: FastifyRequest): void {
  const parts: Array<[unknown, string]> = [
    [request.params, 'params'],
    [request.query, 'query'],
    [request.headers, 'headers'],
    [request.body, ''],
  ];
  for (const [value, root] of parts) {
    const fault = findInputFault(value, root);
    if (fault) throw ValidationError.forField(fault.field, fault.message);
  }
}

export function registerInputGuard(app: FastifyInstance): void {
  // Callback style: no promise per request for work that never waits.
  app.addHook('preValidation', (request, _reply, done) => {
    try {
      guardRequest(request);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  });
}
