import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../errors.js';
import { bucketStarts, parseInstant, recordRange, summaryRange } from './range.js';

const NOW = new Date('2026-01-15T12:34:56.000Z');
const fieldOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (e) {
    if (e instanceof ValidationError) return e.fields[0]?.field;
    throw e;
  }
  return undefined;
};

describe('usage ranges', () => {
  it('read RFC 3339 with any offset as an instant; refuse what Date cannot read', () => {
    expect(parseInstant('2026-01-15T02:00:00+02:00', 'from')?.toISOString()).toBe('2026-01-15T00:00:00.000Z');
    expect(parseInstant('2026-01-15t00:00:00z', 'from')?.toISOString()).toBe('2026-01-15T00:00:00.000Z');
    expect(parseInstant('2026-01-15 00:00:00Z', 'from')?.toISOString()).toBe('2026-01-15T00:00:00.000Z');
    expect(parseInstant(undefined, 'from')).toBeUndefined();
    expect(fieldOf(() => parseInstant('2026-06-30T23:59:60Z', 'to'))).toBe('to');
    expect(fieldOf(() => parseInstant('1969-12-31T23:59:59Z', 'from'))).toBe('from');
  });

  it('take instants before 9999-01-01 only, so rounding up or an offset never reaches year 10000 (docs/input.md, Dates)', () => {
    expect(parseInstant('9998-12-31T23:59:59.999Z', 'to')?.toISOString()).toBe('9998-12-31T23:59:59.999Z');
    expect(fieldOf(() => parseInstant('9999-01-01T00:00:00Z', 'to'))).toBe('to');
    expect(fieldOf(() => parseInstant('9998-12-31T23:59:59-23:59', 'from'))).toBe('from');
    expect(fieldOf(() => summaryRange({ to: '9999-12-31T23:59:59Z' }, 'day', NOW))).toBe('to');
    expect(fieldOf(() => recordRange({ to: '9999-12-31T23:59:59-23:59' }))).toBe('to');
  });

  it('default to the 30 days ending now, and refuse empty or over-long ranges naming the parameter', () => {
    expect(summaryRange({}, 'day', NOW)).toEqual({ from: new Date('2025-12-16T12:34:56.000Z'), to: NOW });
    expect(summaryRange({ to: '2026-01-01T00:00:00Z' }, 'hour', NOW).from.toISOString()).toBe('2025-12-02T00:00:00.000Z');
    expect(fieldOf(() => summaryRange({ from: '2026-01-15T12:34:56Z' }, 'day', NOW))).toBe('from');
    expect(fieldOf(() => summaryRange({ from: '2026-01-02T00:00:00Z', to: '2026-01-01T00:00:00Z' }, 'tool', NOW))).toBe('from');
    expect(summaryRange({ from: '2025-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z' }, 'day', NOW).from.toISOString()).toBe('2025-01-01T00:00:00.000Z');
    expect(fieldOf(() => summaryRange({ from: '2025-01-01T00:00:00Z', to: '2026-01-02T00:00:01Z' }, 'day', NOW))).toBe('from');
    expect(summaryRange({ from: '2026-01-01T00:00:00Z', to: '2026-02-01T00:00:00Z' }, 'hour', NOW).to.toISOString()).toBe('2026-02-01T00:00:00.000Z');
    expect(fieldOf(() => summaryRange({ from: '2026-01-01T00:00:00Z', to: '2026-02-01T00:00:01Z' }, 'hour', NOW))).toBe('from');
    expect(recordRange({})).toEqual({ from: null, to: null });
    expect(recordRange({ to: '2026-01-01T00:00:00Z' }).to?.toISOString()).toBe('2026-01-01T00:00:00.000Z');
    expect(fieldOf(() => recordRange({ from: '2026-01-01T00:00:00Z', to: '2026-01-01T00:00:00Z' }))).toBe('from');
  });

  it('bucket starts cover the range in UTC, the first rounded down', () => {
    const starts = bucketStarts(new Date('2026-01-01T10:30:00Z'), new Date('2026-01-01T13:00:00Z'), 3_600_000);
    expect(starts.map((d) => d.toISOString())).toEqual(['2026-01-01T10:00:00.000Z', '2026-01-01T11:00:00.000Z', '2026-01-01T12:00:00.000Z']);
    expect(bucketStarts(new Date('2026-01-01T00:00:00Z'), new Date('2026-02-01T00:00:01Z'), 3_600_000)).toHaveLength(745);
  });
});
