import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical-json.js';

/** The definition, written plainly: the stored request hashes of idempotent records depend on this text. */
function reference(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(reference).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${reference(v)}`).join(',')}}`;
}

/** The same object with its keys inserted in reverse order, at every depth. */
function reversed(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(reversed);
  return Object.fromEntries(Object.entries(value).reverse().map(([k, v]) => [k, reversed(v)]));
}

const json = fc.jsonValue();
// Objects with undefined members and arrays with undefined elements, as a parsed body with optional fields gives.
const withUndefined = fc.letrec((tie) => ({
  value: fc.oneof({ depthSize: 'small' }, fc.constant(undefined), fc.string(), fc.integer(), fc.boolean(), fc.constant(null), tie('array'), tie('object')),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.dictionary(fc.string({ maxLength: 6 }), tie('value'), { maxKeys: 5 }),
})).object;

describe('canonicalJson', () => {
  it('is the plain definition: sorted keys at every depth, undefined members left out', () => {
    fc.assert(
      fc.property(fc.oneof(json, withUndefined), (value) => {
        expect(canonicalJson(value)).toBe(reference(value));
      }),
      { numRuns: 500 },
    );
  });

  it('does not depend on key order, and parses back to the same value', () => {
    fc.assert(
      fc.property(json, (value) => {
        const text = canonicalJson(value);
        expect(canonicalJson(reversed(value))).toBe(text);
        expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(value)));
      }),
      { numRuns: 500 },
    );
  });

  it('writes a record body as its stored hashes were made', () => {
    expect(canonicalJson({ tool_name: 'search', mcp_user_id: null, metadata: { b: 1, a: [2, { d: undefined, c: 'x' }] } })).toBe(
      '{"mcp_user_id":null,"metadata":{"a":[2,{"c":"x"}],"b":1},"tool_name":"search"}',
    );
    expect(canonicalJson([undefined, 1])).toBe('[null,1]');
  });
});
