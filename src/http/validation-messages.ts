import type { FieldError } from '../errors.js';

/** What Ajv reports for one failed keyword (the fields we read). */
export interface AjvError {
  instancePath?: string;
  message?: string;
  keyword?: string;
  params?: Record<string, unknown>;
}

const TYPE_WORDS: Record<string, string> = {
  string: 'a string',
  integer: 'a whole number',
  number: 'a number',
  boolean: 'true or false',
  object: 'an object',
  array: 'an array',
  null: 'null',
};

const FORMAT_WORDS: Record<string, string> = {
  uuid: 'a UUID',
  'date-time': 'an ISO 8601 date-time such as 2026-01-15T12:00:00Z',
  date: 'a date such as 2026-01-15',
  email: 'an email address',
  uri: 'an absolute URL',
  url: 'an absolute URL',
};

const plural = (n: unknown, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
const list = (values: unknown[]) => values.map((v) => (typeof v === 'string' ? v : JSON.stringify(v))).join(', ');

/** One Ajv error in words a person reads after the field's name ("tier must be one of sandbox, trial, …"). */
function phrase(v: AjvError): string {
  const p = v.params ?? {};
  switch (v.keyword) {
    case 'required':
      return 'is required';
    case 'additionalProperties':
      return 'is not a known field';
    case 'type': {
      const types = String(p.type ?? '').split(',');
      return `must be ${types.map((t) => TYPE_WORDS[t] ?? t).join(' or ')}`;
    }
    case 'enum':
      return `must be one of ${list((p.allowedValues as unknown[]) ?? [])}`;
    case 'const':
      return `must be ${list([p.allowedValue])}`;
    case 'minLength':
      return p.limit === 1 ? 'must not be empty' : `must be at least ${plural(p.limit, 'character', 'characters')}`;
    case 'maxLength':
      return `must be at most ${plural(p.limit, 'character', 'characters')}`;
    case 'minimum':
      return `must be at least ${p.limit}`;
    case 'maximum':
      return `must be at most ${p.limit}`;
    case 'exclusiveMinimum':
      return `must be greater than ${p.limit}`;
    case 'exclusiveMaximum':
      return `must be less than ${p.limit}`;
    case 'multipleOf':
      return `must be a multiple of ${p.multipleOf}`;
    case 'minItems':
      return p.limit === 1 ? 'must not be empty' : `must have at least ${plural(p.limit, 'item', 'items')}`;
    case 'maxItems':
      return `must have at most ${plural(p.limit, 'item', 'items')}`;
    case 'uniqueItems':
      return 'must not repeat an item';
    case 'minProperties':
      return `must have at least ${plural(p.limit, 'field', 'fields')}`;
    case 'maxProperties':
      return `must have at most ${plural(p.limit, 'field', 'fields')}`;
    case 'format':
      return `must be ${FORMAT_WORDS[String(p.format)] ?? `a valid ${p.format}`}`;
    case 'pattern':
      return `must match the pattern ${p.pattern}`;
    case 'anyOf':
    case 'oneOf':
      return 'does not match any of the accepted forms';
    default:
      return v.message ?? 'is invalid';
  }
}

function fieldOf(v: AjvError, part: string): string {
  let field = (v.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
  const named = v.keyword === 'required' ? v.params?.missingProperty : v.keyword === 'additionalProperties' ? v.params?.additionalProperty : undefined;
  if (typeof named === 'string') field = field ? `${field}.${named}` : named;
  return field || part;
}

/**
 * Ajv's errors as one entry per field. A union (`anyOf`: a nullable value, alternatives) makes Ajv
 * report every branch ("must be string", "must be null", "must match a schema in anyOf"): the field is
 * named once, with the branch a person most likely meant — the non-null one — and the values of
 * constant branches gathered into "must be one of …".
 */
export function fieldErrorsOf(errors: AjvError[], part: string): FieldError[] {
  const byField = new Map<string, AjvError[]>();
  for (const v of errors) {
    const field = fieldOf(v, part);
    byField.set(field, [...(byField.get(field) ?? []), v]);
  }
  const out: FieldError[] = [];
  const onlyUnionNoise = (found: AjvError[]) =>
    found.every((v) => v.keyword === 'anyOf' || v.keyword === 'oneOf' || (v.keyword === 'type' && v.params?.type === 'null'));
  for (const [field, found] of byField) {
    // "body must be null" beside "body.deployment_id must be a UUID": the other branch said it better.
    if (byField.size > 1 && onlyUnionNoise(found)) continue;
    const constants = found.filter((v) => v.keyword === 'const').map((v) => v.params?.allowedValue);
    if (constants.length > 1) {
      out.push({ field, message: `must be one of ${list(constants)}` });
      continue;
    }
    const specific = found.filter((v) => v.keyword !== 'anyOf' && v.keyword !== 'oneOf');
    const notNull = specific.filter((v) => !(v.keyword === 'type' && v.params?.type === 'null'));
    const chosen = notNull[0] ?? specific[0] ?? found[0];
    if (chosen) out.push({ field, message: phrase(chosen) });
  }
  return out;
}
