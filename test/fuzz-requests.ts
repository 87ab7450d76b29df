import fc from 'fast-check';

/**
 * Request generators for test/fuzz.test.ts, driven by the OpenAPI document: a noisy request for an
 * operation plus exactly one defect (the "poison") that makes it invalid by construction, with the
 * status and field name the defect must produce. Noise is guard-clean (well-formed, no NUL, shallow)
 * so the poison alone decides the answer.
 */
export interface SchemaNode {
  type?: string | string[];
  properties?: Record<string, SchemaNode>;
  required?: string[];
  additionalProperties?: unknown;
  anyOf?: SchemaNode[];
  oneOf?: SchemaNode[];
  items?: SchemaNode;
  format?: string;
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
}

export interface Poison {
  kind: string;
  part: 'body' | 'query' | 'params' | 'headers';
  name: string;
  /** What the defect must be answered with (unless rate limited); none for a request without a defect. */
  status?: 400 | 404;
  /** The field the 400 must name, when the defect decides it. */
  field?: string;
  value?: unknown;
  /** Already URL-encoded, for query and path defects. */
  raw?: string;
  levels?: number;
}

export interface FuzzRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  payload?: string;
  poison: Poison;
}

interface OperationLike {
  method: string;
  path: string;
  parameters?: Array<{ in: string; name: string; schema?: SchemaNode }>;
  requestBody?: { content?: Record<string, { schema?: SchemaNode }> };
}

export interface FuzzContext {
  credentials: Array<Record<string, string>>;
  knownIds: Record<string, string>;
  deploymentId: string;
}

/** Drops what the guard refuses (NUL, lone surrogates), so noise never decides the answer. */
function wellFormed(s: string): string {
  let out = '';
  for (const ch of s) {
    const code = ch.charCodeAt(0);
    if (code === 0 || (ch.length === 1 && code >= 0xd800 && code <= 0xdfff)) continue;
    out += ch;
  }
  return out;
}

const text = (min = 0, max = 30) => fc.string({ unit: 'binary', minLength: min, maxLength: max }).map(wellFormed);

function cleanJson(value: unknown): unknown {
  if (typeof value === 'string') return wellFormed(value);
  if (Array.isArray(value)) return value.map(cleanJson);
  // Prototype keys are refused by the JSON parser before the guard runs: noise must not decide the answer.
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).filter(([k]) => k !== '__proto__' && k !== 'constructor').map(([k, v]) => [wellFormed(k), cleanJson(v)]));
  }
  return value;
}
const jsonish = fc.jsonValue({ maxDepth: 3 }).map(cleanJson);

/** Well-typed but wrong: other types, huge, negative and fractional numbers, empty and over-long strings. */
const wrong: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, true, false, 0, -1, -(2 ** 31), 2 ** 31, 2 ** 53, 2 ** 63, 1e308, -1e308, 0.5, '', ' ', [], {}, '-1', 'null'),
  fc.constant('x'.repeat(10_001)),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  text(0, 60),
  fc.array(text(0, 5), { maxLength: 3 }),
);

const typeOf = (s: SchemaNode) => (Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type);
const variantsOf = (s: SchemaNode) => s.anyOf ?? s.oneOf;

function typed(schema: SchemaNode, ctx: FuzzContext): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum?.length) return fc.constantFrom(...schema.enum);
  const variants = variantsOf(schema);
  if (variants?.length) return fc.oneof(...variants.map((v) => typed(v, ctx)));
  switch (typeOf(schema)) {
    case 'string':
      if (schema.format === 'uuid') return fc.oneof(fc.uuid(), fc.constantFrom(...Object.values(ctx.knownIds)));
      if (schema.format === 'date-time') return fc.date({ min: new Date(Date.UTC(1, 0, 1)), max: new Date(Date.UTC(9999, 11, 31)), noInvalidDate: true }).map((d) => d.toISOString());
      if (schema.format === 'email') return fc.emailAddress();
      if (schema.format === 'uri') return fc.webUrl();
      return text(schema.minLength ?? 0, Math.min(schema.maxLength ?? 40, 40));
    case 'integer': {
      const min = schema.minimum ?? -1e12;
      const max = schema.maximum ?? 1e12;
      const lo = Math.max(min, -(2 ** 31));
      const hi = Math.min(max, 2 ** 31 - 1);
      return lo <= hi ? fc.oneof(fc.constantFrom(min, max), fc.integer({ min: lo, max: hi })) : fc.constantFrom(min, max);
    }
    case 'number':
      return fc.double({ noNaN: true, noDefaultInfinity: true });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return fc.array(typed(schema.items ?? {}, ctx), { maxLength: 3 });
    case 'object':
      return schema.properties ? objectOf(schema, ctx) : fc.dictionary(text(1, 10), jsonish, { maxKeys: 4 }).map(cleanJson);
    default:
      return jsonish;
  }
}

const noisy = (schema: SchemaNode, ctx: FuzzContext) => fc.oneof({ arbitrary: typed(schema, ctx), weight: 3 }, { arbitrary: wrong, weight: 1 });

function objectOf(schema: SchemaNode, ctx: FuzzContext): fc.Arbitrary<Record<string, unknown>> {
  const model = Object.fromEntries(Object.entries(schema.properties ?? {}).map(([k, s]) => [k, noisy(s, ctx)]));
  return fc.record(model, { requiredKeys: (schema.required ?? []).filter((k) => k in model) }) as fc.Arbitrary<Record<string, unknown>>;
}

/** A JSON body's object schema (the first object variant of a union such as "object or null"). */
function bodySchemaOf(op: OperationLike): SchemaNode | null {
  const schema = op.requestBody?.content?.['application/json']?.schema;
  if (!schema) return null;
  return variantsOf(schema)?.find((v) => typeOf(v) === 'object') ?? schema;
}

const BAD_CHARS = ['\u0000', '\ud800', '\udbff', '\udc00', '\udfff'];
const printable = (bad: string) => `\\u${bad.charCodeAt(0).toString(16).padStart(4, '0')}`;
const NOT_UUIDS = ['not-a-uuid', '-1', '0', '00000000-0000-0000-0000-00000000000g', 'aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaaa', ' '];
const BAD_FORMAT: Record<string, string> = { 'date-time': 'tomorrow', email: 'not-an-email', uri: 'not a uri' };
const OTHER_TYPE: Record<string, unknown[]> = {
  string: [5, true, null, [], {}],
  integer: ['5', 1.5, true, null, [], {}],
  number: ['5', true, null, [], {}],
  boolean: ['true', 1, null, [], {}],
  array: ['x', 5, {}, null],
  object: ['x', 5, [], true],
};

/** Every defect this operation can carry, each a sure way to be refused. */
function poisonsFor(op: OperationLike, body: SchemaNode | null): Array<fc.Arbitrary<Poison>> {
  const params = op.parameters ?? [];
  const ofPart = (part: string) => params.filter((p) => p.in === part);
  const out: Array<fc.Arbitrary<Poison>> = [];
  // NUL or a lone surrogate in a header: every route has headers.
  out.push(
    fc.record({ name: fc.constantFrom('x-fuzz', 'idempotency-key', 'user-agent', 'accept-language'), bad: fc.constantFrom(...BAD_CHARS) }).map(({ name, bad }) => ({
      kind: 'bad-char', part: 'headers', name, status: 400, field: `headers.${name}`, value: `a${bad}b`,
    })),
  );
  // NUL in the query (a URL cannot carry a lone surrogate: it is UTF-8).
  const queryNames = [...ofPart('query').map((p) => p.name), 'fuzz'];
  out.push(fc.constantFrom(...queryNames).map((name) => ({ kind: 'nul', part: 'query', name, status: 400, field: `query.${name}`, raw: 'a%00b' })));
  for (const p of ofPart('path')) {
    out.push(fc.constant<Poison>({ kind: 'nul', part: 'params', name: p.name, status: 400, field: `params.${p.name}`, raw: `x%00${p.name}` }));
    out.push(fc.constantFrom('%ED%A0%80', '%FF', '%C0%80').map((raw) => ({ kind: 'bad-encoding', part: 'params', name: p.name, status: 400, raw })));
    if (p.schema?.format === 'uuid') out.push(fc.constantFrom(...NOT_UUIDS).map((value) => ({ kind: 'uuid', part: 'params', name: p.name, status: 404, value })));
  }
  for (const p of [...ofPart('query'), ...ofPart('header')]) {
    const part = p.in === 'query' ? 'query' : 'headers';
    if (p.schema?.format === 'uuid') out.push(fc.constantFrom(...NOT_UUIDS.slice(0, 5)).map((value) => ({ kind: 'uuid', part, name: p.name, status: 400, value })));
    if (p.schema?.maxLength) out.push(fc.constant<Poison>({ kind: 'range', part, name: p.name, status: 400, value: 'x'.repeat(p.schema.maxLength + 1) }));
    if (typeOf(p.schema ?? {}) === 'integer') out.push(fc.constantFrom('abc', '1.5', '1e400', String(p.schema?.maximum !== undefined ? p.schema.maximum + 1 : 'x')).map((value) => ({ kind: 'type', part, name: p.name, status: 400, value })));
  }
  if (!body) return out;
  const props = Object.entries(body.properties ?? {});
  const names = [...props.map(([k]) => k), 'fuzz_extra'];
  out.push(
    fc.record({ name: fc.constantFrom(...names), bad: fc.constantFrom(...BAD_CHARS), shape: fc.constantFrom('value', 'nested', 'key', 'top-key') }).map(({ name, bad, shape }): Poison => {
      if (shape === 'value') return { kind: 'bad-char', part: 'body', name, status: 400, field: name, value: `a${bad}b` };
      if (shape === 'nested') return { kind: 'bad-char', part: 'body', name, status: 400, field: `${name}.k.1`, value: { k: ['ok', `a${bad}`] } };
      if (shape === 'key') return { kind: 'bad-key', part: 'body', name, status: 400, field: `${name}.k${printable(bad)}`, value: { [`k${bad}`]: 1 } };
      return { kind: 'bad-key', part: 'body', name: `k${bad}`, status: 400, field: `k${printable(bad)}`, value: 1 };
    }),
  );
  // Malformed JSON: cut short, with trailing text, or with a prototype key (refused by the parser).
  out.push(fc.constantFrom('truncated', 'trailing', 'proto').map((name) => ({ kind: 'malformed', part: 'body', name, status: 400, field: 'body' })));
  out.push(fc.record({ name: fc.constantFrom(...names), levels: fc.integer({ min: 65, max: 20_000 }) }).map(({ name, levels }) => ({ kind: 'deep', part: 'body', name, status: 400, field: name, levels })));
  if (body.additionalProperties === false) out.push(fc.constant<Poison>({ kind: 'extra', part: 'body', name: 'fuzz_unknown', status: 400, value: 1 }));
  for (const name of body.required ?? []) out.push(fc.constant<Poison>({ kind: 'missing', part: 'body', name, status: 400 }));
  for (const [name, s] of props) {
    const type = variantsOf(s) || typeof s.type !== 'string' ? undefined : s.type;
    if (type && OTHER_TYPE[type] && !s.enum && s.const === undefined) out.push(fc.constantFrom(...OTHER_TYPE[type]).map((value) => ({ kind: 'type', part: 'body', name, status: 400, value })));
    const plain = variantsOf(s)?.find((v) => typeOf(v) !== 'null') ?? s;
    if (plain.format === 'uuid') out.push(fc.constantFrom(...NOT_UUIDS).map((value) => ({ kind: 'uuid', part: 'body', name, status: 400, value })));
    if (plain.maximum !== undefined) out.push(fc.constant<Poison>({ kind: 'range', part: 'body', name, status: 400, value: plain.maximum + 1 }));
    if (plain.minimum !== undefined) out.push(fc.constant<Poison>({ kind: 'range', part: 'body', name, status: 400, value: plain.minimum - 1 }));
    if (plain.maxLength !== undefined) out.push(fc.constant<Poison>({ kind: 'range', part: 'body', name, status: 400, value: 'x'.repeat(plain.maxLength + 1) }));
    const badFormat = plain.format ? BAD_FORMAT[plain.format] : undefined;
    if (badFormat) out.push(fc.constant<Poison>({ kind: 'format', part: 'body', name, status: 400, value: badFormat }));
  }
  return out;
}

/** The tenant's own ids where a path names one, so requests get past authorization to their defect. */
function baselineParam(path: string, param: { name: string; schema?: SchemaNode }, ctx: FuzzContext): string {
  if (path.startsWith('/api/v1/admin/deployments/')) return ctx.deploymentId;
  if (path.startsWith('/api/v1/admin/users/')) return ctx.knownIds.userId ?? 'x';
  return ctx.knownIds[param.name] ?? (param.schema?.format === 'uuid' ? '6f1c3d2e-0000-4000-8000-00000000f022' : `fuzz-${param.name}`);
}

const DEEP = '"__fuzz_deep__"';
const MALFORM: Record<string, (json: string) => string> = {
  truncated: (json) => json.slice(0, -1),
  trailing: (json) => `${json} {}`,
  proto: (json) => `{"__proto__":{"polluted":true},${json.slice(1)}`.replace(',}', '}'),
};

const NO_POISON: Poison = { kind: 'none', part: 'headers', name: '' };

/**
 * A noisy request for `op` with one defect; with `defect: false`, noise only (then it may be valid:
 * use it only on operations that cannot spend, grant or lock the fuzz tenant out).
 */
export function fuzzRequest(op: OperationLike, ctx: FuzzContext, defect = true): fc.Arbitrary<FuzzRequest> {
  const body = bodySchemaOf(op);
  const queryParams = (op.parameters ?? []).filter((p) => p.in === 'query');
  const pathParams = new Map((op.parameters ?? []).filter((p) => p.in === 'path').map((p) => [p.name, p]));
  const queryNoise = fc.record(Object.fromEntries(queryParams.map((p) => [p.name, noisy(p.schema ?? {}, ctx).map((v) => (typeof v === 'string' ? v : JSON.stringify(v)))])), {
    requiredKeys: [],
  }) as fc.Arbitrary<Record<string, string>>;
  return fc
    .record({
      credentials: fc.constantFrom(...ctx.credentials),
      body: body ? objectOf(body, ctx) : fc.constant(null),
      query: queryNoise,
      headers: fc.dictionary(fc.constantFrom('x-fuzz-a', 'x-request-id', 'accept-language', 'idempotency-key'), fc.string({ unit: 'grapheme-ascii', maxLength: 40 }), { maxKeys: 2 }),
      poison: defect ? fc.oneof(...poisonsFor(op, body)) : fc.constant(NO_POISON),
    })
    .map(({ credentials, body: noise, query, headers, poison }) => {
      const encoded = (v: unknown) => encodeURIComponent(typeof v === 'string' ? v : JSON.stringify(v));
      const at = (part: string, name: string) => poison.kind !== 'none' && poison.part === part && poison.name === name;
      const url = op.path.replace(/\{([^}]+)\}/g, (_m, name: string) =>
        at('params', name) ? (poison.raw ?? encoded(poison.value)) : encodeURIComponent(baselineParam(op.path, pathParams.get(name) ?? { name }, ctx)),
      );
      const pairs = Object.entries(query).filter(([name]) => !at('query', name)).map(([k, v]) => `${k}=${encodeURIComponent(v)}`);
      if (poison.kind !== 'none' && poison.part === 'query') pairs.push(`${poison.name}=${poison.raw ?? encoded(poison.value)}`);
      const allHeaders: Record<string, string> = { ...headers, ...credentials };
      if (poison.kind !== 'none' && poison.part === 'headers') allHeaders[poison.name] = String(poison.value);
      let payload: string | undefined;
      if (body) {
        const object: Record<string, unknown> = { ...(noise ?? {}) };
        if (poison.kind === 'missing') delete object[poison.name];
        else if (poison.kind === 'deep') object[poison.name] = '__fuzz_deep__';
        else if (poison.part === 'body') object[poison.name] = poison.value;
        payload = JSON.stringify(object);
        const levels = poison.levels ?? 0;
        const halves = Math.floor(levels / 2);
        if (poison.kind === 'deep') payload = payload.replace(DEEP, `${'[{"a":'.repeat(halves)}${'['.repeat(levels % 2)}1${']'.repeat(levels % 2)}${'}]'.repeat(halves)}`);
        if (poison.kind === 'malformed') payload = MALFORM[poison.name]?.(payload) ?? payload;
        allHeaders['content-type'] = 'application/json';
      }
      return { method: op.method, url: pairs.length > 0 ? `${url}?${pairs.join('&')}` : url, headers: allHeaders, payload, poison };
    });
}
