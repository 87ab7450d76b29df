/**
 * PostgreSQL array literals (`{…}`) for statements that take whole columns as arrays
 * (`unnest($1::uuid[], …)`, credits/batcher.ts). Passing the literal as text is what node-postgres and
 * PGlite would send for a JS array too, but they build it element by element through their generic
 * value encoders, a large part of a batch's CPU on the server's thread
 * (docs/benchmarks.md, "Two round trips per batch"). Here each element type has one short path.
 *
 * Every element round-trips exactly: text is always quoted (so `NULL`, `""`, commas, braces and spaces
 * stay text) with `\` and `"` escaped; numbers must be finite; a Date is written as its ISO 8601 UTC
 * instant; `null` and `undefined` are SQL NULL.
 */
export type ArrayElement = string | number | boolean | Date | null | undefined;

const NEEDS_ESCAPE = /[\\"]/;
const ESCAPED = /[\\"]/g;

function element(value: ArrayElement): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'string') return NEEDS_ESCAPE.test(value) ? `"${value.replace(ESCAPED, '\\$&')}"` : `"${value}"`;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`array element ${value} is not a finite number`);
    return String(value);
  }
  if (typeof value === 'boolean') return value ? 't' : 'f';
  return `"${value.toISOString()}"`;
}

/** The array literal of `values`, for a `$n::type[]` parameter. */
export function pgArray(values: readonly ArrayElement[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    out += element(values[i]);
  }
  return `${out}}`;
}
