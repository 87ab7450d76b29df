import type { FastifyInstance, FastifyRequest } from 'fastify';
import { isUuid } from '../lib/ids.js';

/**
 * UUIDs are read in any case and compared in lower case (docs/input.md, UUID ids): PostgreSQL's
 * `uuid` type ignores case, but a service that compares an id from the request with one from the
 * database or a credential (`authorize`: an API key's own organization) compares strings. So every
 * top-level field a route's schema declares `format: 'uuid'` — path, query, headers and body, alone
 * or in an array — is lower-cased here, once, before validation and every handler. Only fields the
 * schema calls UUIDs: a caller's own string that happens to look like one (an end-user id) keeps
 * its case.
 */

type PropertySchema = { format?: unknown; items?: PropertySchema; anyOf?: PropertySchema[]; oneOf?: PropertySchema[] };
type PartSchema = { properties?: Record<string, PropertySchema> };
type Kind = 'one' | 'many';

const isUuidFormat = (s: PropertySchema | undefined): boolean =>
  s?.format === 'uuid' || (s?.anyOf ?? s?.oneOf ?? []).some((branch) => branch.format === 'uuid');

function kindOf(s: PropertySchema): Kind | null {
  if (isUuidFormat(s)) return 'one';
  const items = s.items ?? (s.anyOf ?? s.oneOf ?? []).find((branch) => branch.items)?.items;
  return isUuidFormat(items) ? 'many' : null;
}

const fieldsBySchema = new WeakMap<object, Array<[string, Kind]>>();

/** The top-level UUID fields of one part's schema, worked out once per schema. */
function uuidFieldsOf(schema: unknown): Array<[string, Kind]> {
  if (schema === null || typeof schema !== 'object') return [];
  let fields = fieldsBySchema.get(schema);
  if (!fields) {
    fields = [];
    for (const [name, property] of Object.entries((schema as PartSchema).properties ?? {})) {
      const kind = kindOf(property);
      if (kind) fields.push([name, kind]);
    }
    fieldsBySchema.set(schema, fields);
  }
  return fields;
}

const lower = (value: unknown): unknown => (typeof value === 'string' && isUuid(value) ? value.toLowerCase() : value);

function normalise(target: unknown, schema: unknown): void {
  if (target === null || typeof target !== 'object' || Array.isArray(target)) return;
  const record = target as Record<string, unknown>;
  for (const [name, kind] of uuidFieldsOf(schema)) {
    const value = record[name];
    if (value === undefined) continue;
    record[name] = kind === 'one' ? lower(value) : Array.isArray(value) ? value.map(lower) : value;
  }
}

export function lowerCaseUuids(request: FastifyRequest): void {
  const schema = request.routeOptions.schema;
  if (!schema) return;
  normalise(request.params, schema.params);
  normalise(request.query, schema.querystring);
  normalise(request.headers, schema.headers);
  normalise(request.body, schema.body);
}

export function registerUuidCase(app: FastifyInstance): void {
  app.addHook('preValidation', (request, _reply, done) => {
    lowerCaseUuids(request);
    done();
  });
}
