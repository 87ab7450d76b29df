/**
 * The instants the API takes from a caller (docs/input.md, Dates): from 1970-01-01 (nothing was
 * recorded before, and the API never hands out an earlier time) up to, not including,
 * 9999-01-01. The upper bound leaves a year of room below year 10000, which an offset (`-23:59`),
 * rounding a range up to its day or hour, or a period added to an expiry would otherwise reach:
 * `Date#toISOString` then writes `+010000-…`, which PGlite refuses (SQLSTATE 22009) and a client may
 * not read.
 */
export const EARLIEST_INSTANT = Date.UTC(1970, 0, 1);
export const LATEST_INSTANT = Date.UTC(9999, 0, 1);

/** Why `at` is outside the instants the API takes (a message for a field error), or null. */
export function instantBoundFault(at: Date): string | null {
  const t = at.getTime();
  if (t < EARLIEST_INSTANT) return 'must not be before 1970-01-01T00:00:00Z';
  if (t >= LATEST_INSTANT) return 'must be before 9999-01-01T00:00:00Z';
  return null;
}
