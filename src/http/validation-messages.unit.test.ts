import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { Type } from 'typebox';
import { describe, expect, it } from 'vitest';
import { Nullable, StringEnum } from './schemas.js';
import { type AjvError, fieldErrorsOf } from './validation-messages.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
const ajv = addFormats(new Ajv({ allErrors: false, strict: false }));

/** What the error handler would say for `body` against `schema`. */
function errorsFor(schema: object, body: unknown) {
  const validate = ajv.compile(schema);
  expect(validate(body)).toBe(false);
  return fieldErrorsOf((validate.errors ?? []) as AjvError[], 'body');
}

const Body = Type.Object(
  {
    tier: Type.Optional(StringEnum(['sandbox', 'trial', 'launch', 'growth', 'enterprise'])),
    reason: Type.Optional(Nullable(StringEnum(['a', 'b']))),
    old_style: Type.Optional(Type.Union([Type.Literal('x'), Type.Literal('y')])),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 5 })),
    count: Type.Optional(Type.Integer({ minimum: 1 })),
    id: Type.Optional(Type.String({ format: 'uuid' })),
    items: Type.Optional(Type.Array(Type.String(), { minItems: 1, uniqueItems: true })),
  },
  { additionalProperties: false },
);

describe('validation messages name the field once, in words', () => {
  it.each([
    [{ tier: 'gold' }, 'tier', 'must be one of sandbox, trial, launch, growth, enterprise'],
    [{ reason: 'c' }, 'reason', 'must be one of a, b'],
    [{ old_style: 'z' }, 'old_style', 'must be one of x, y'],
    [{ name: '' }, 'name', 'must not be empty'],
    [{ name: 'toolong' }, 'name', 'must be at most 5 characters'],
    [{ name: 5 }, 'name', 'must be a string'],
    [{ count: 1.5 }, 'count', 'must be a whole number'],
    [{ count: 0 }, 'count', 'must be at least 1'],
    [{ id: 'nope' }, 'id', 'must be a UUID'],
    [{ items: [] }, 'items', 'must not be empty'],
    [{ items: ['a', 'a'] }, 'items', 'must not repeat an item'],
    [{ extra: 1 }, 'extra', 'is not a known field'],
  ])('%j → %s %s', (body, field, message) => {
    expect(errorsFor(Body, body)).toEqual([{ field, message }]);
  });

  it('a missing field is required', () => {
    expect(errorsFor(Type.Object({ amount: Type.Integer() }), {})).toEqual([{ field: 'amount', message: 'is required' }]);
  });

  it('a nullable object body reports the inner field, not "body must be null"', () => {
    const schema = Type.Union([Type.Object({ deployment_id: Type.Optional(Type.String({ format: 'uuid' })) }), Type.Null()]);
    expect(errorsFor(schema, { deployment_id: 'x' })).toEqual([{ field: 'deployment_id', message: 'must be a UUID' }]);
  });
});
