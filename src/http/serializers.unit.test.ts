import { describe, expect, it } from 'vitest';
import { buildSerializer } from './serializers.js';

/** Response serializers made once per schema in a process (http/serializers.ts). */
describe('buildSerializer', () => {
  const route = (schema: unknown, httpStatus = '200') => ({ method: 'GET', url: '/x', httpStatus, schema });
  const shared = { E: { $id: 'E', type: 'object', properties: { code: { type: 'string' } } } };
  const schema = () => ({ type: 'object', properties: { a: { type: 'integer' } } });

  it('gives a second app the serializer the first made for the same schema, even a new object of it', () => {
    const first = buildSerializer(shared, {})(route(schema()));
    const second = buildSerializer(JSON.parse(JSON.stringify(shared)), {})(route(schema()));
    expect(second).toBe(first);
    // Only the schema's fields are written.
    expect(first({ a: 1, secret: 's' })).toBe('{"a":1}');
  });

  it('makes another for another schema, status, shared schemas or options', () => {
    const made = buildSerializer(shared, {})(route(schema()));
    const other = buildSerializer(shared, {})(route({ type: 'object', properties: { b: { type: 'integer' } } }));
    expect(other).not.toBe(made);
    expect(other({ a: 1, b: 2 })).toBe('{"b":2}');
    expect(buildSerializer(shared, {})(route(schema(), '201'))).not.toBe(made);
    expect(buildSerializer({}, {})(route(schema()))).not.toBe(made);
    expect(buildSerializer(shared, { rounding: 'floor' })(route(schema()))).not.toBe(made);
  });
});
