/**
 * PostgreSQL array literals (`{…}`) for statements that take whole columns as arrays
 * (`unnest($1::uuid[], …)`, credits/engine/write.ts). Passing the literal as text is what node-postgres and
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

function element(value: Exclude<ArrayElement, Date>): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'string') return NEEDS_ESCAPE.test(value) ? `"${value.replace(ESCAPED, '\\$&')}"` : `"${value}"`;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`array element ${value} is not a finite number`);
    return String(value);
  }
  return value ? 't' : 'f';
}

/**
 * The array literal of `values`, for a `$n::type[]` parameter. A batch's columns of instants repeat
 * (every request of a batch shares the period start, and requests within one millisecond their time),
 * so a Date equal to the one before it reuses its text instead of formatting it again.
 */
export function pgArray(values: readonly ArrayElement[]): string {
  let out = '{';
  let lastTime = Number.NaN;
  let lastText = '';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const value = values[i];
    if (value instanceof Date) {
      const time = value.getTime();
      if (time !== lastTime) {
        lastTime = time;
        lastText = `"${value.toISOString()}"`;
      }
      out += lastText;
    } else out += element(value);
  }
  return `${out}}`;
}
