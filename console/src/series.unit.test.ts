import { describe, expect, it } from 'vitest';
import { dayLabel, fmtCompact, fmtNumber, parseRange, rangeQuery, rangeSearch, stackOf, topOf, type UsageSummary, zoneMidnight } from './series';

const counts = (credits: number, calls = credits) => ({ calls, successful: calls, failed: 0, credits, credits_refunded: 0, input_tokens: 0, output_tokens: 0 });

/** Two days: tools a (largest) and "other" (a tool really named so), the rest summed as the other part. */
const summary: UsageSummary = {
  organization_id: '6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f',
  deployment_id: null,
  group_by: 'day',
  from: '2026-01-01T00:00:00.000Z',
  to: '2026-01-03T00:00:00.000Z',
  tz: 'UTC',
  as_of: '2026-01-03T00:00:00.000Z',
  lag_seconds: 0,
  truncated: false,
  split_keys: ['a', 'other'],
  totals: counts(16),
  groups: [
    {
      key: '2026-01-01T00:00:00.000Z',
      ...counts(9),
      split: [
        { key: 'a', other: false, ...counts(5) },
        { key: 'other', other: false, ...counts(3) },
        { key: null, other: true, ...counts(1) },
      ],
    },
    { key: '2026-01-02T00:00:00.000Z', ...counts(7), split: [{ key: 'a', other: false, ...counts(4, 2) }, { key: null, other: true, ...counts(3) }] },
  ],
};

describe('the overview series', () => {
  it('stacks one series per split key in order, then the other part, with zeros for days without a part', () => {
    const { times, series } = stackOf(summary);
    expect(times).toEqual([Date.parse('2026-01-01T00:00:00Z') / 1000, Date.parse('2026-01-02T00:00:00Z') / 1000]);
    expect(series).toEqual([
      { name: 'a', values: [5, 4] },
      { name: 'other', values: [3, 0] }, // the tool named "other"
      { name: 'all others', values: [1, 3] }, // the rest, kept apart from it
    ]);
    // Every day's parts add up to the day.
    for (const [day, group] of summary.groups.entries()) expect(series.reduce((n, s) => n + s.values[day]!, 0)).toBe(group.credits);
  });

  it('sums each split key over the range for the top tools, leaving the other part out', () => {
    const top = topOf(summary);
    expect(top.groups.map((g) => [g.key, g.calls, g.credits])).toEqual([
      ['a', 7, 9],
      ['other', 3, 3],
    ]);
  });

  it('draws nothing for an answer without a split', () => {
    const plain: UsageSummary = { ...summary, split_keys: undefined, groups: summary.groups.map(({ split: _s, ...g }) => g) };
    expect(stackOf(plain).series).toEqual([]);
    expect(topOf(plain).groups).toEqual([]);
  });
});

describe('day labels', () => {
  it('name the local day a bucket starts on in the zone it was asked in', () => {
    // New York's 8 March starts at 05:00Z, Berlin's 9 March at 23:00Z on the 8th.
    expect(dayLabel(Date.parse('2026-03-08T05:00:00Z') / 1000, 'America/New_York')).toBe('2026-03-08');
    expect(dayLabel(Date.parse('2026-03-08T23:00:00Z') / 1000, 'Europe/Berlin')).toBe('2026-03-09');
    expect(dayLabel(Date.parse('2026-03-08T00:00:00Z') / 1000, 'UTC')).toBe('2026-03-08');
    expect(dayLabel(Date.parse('2026-03-08T00:00:00Z') / 1000, 'Not/AZone')).toBe('2026-03-08');
  });
});

describe('numbers', () => {
  it('group thousands, and go compact from 10,000 on axes and in the legend', () => {
    expect(fmtNumber(1234567)).toBe('1,234,567');
    expect(fmtCompact(9999)).toBe('9,999');
    expect(fmtCompact(12_345)).toBe('12.3K');
    expect(fmtCompact(4_500_000)).toBe('4.5M');
  });
});

describe('the overview range', () => {
  it('reads a preset or two days from the address, and 30 days for anything else', () => {
    expect(parseRange('?range=7d')).toEqual({ days: 7 });
    expect(parseRange('range=90d')).toEqual({ days: 90 });
    expect(parseRange('?range=8d')).toEqual({ days: 30 });
    expect(parseRange('')).toEqual({ days: 30 });
    expect(parseRange('?from=2026-03-01&to=2026-03-05')).toEqual({ from: '2026-03-01', to: '2026-03-05' });
    expect(parseRange('?from=2026-03-05&to=2026-03-01')).toEqual({ days: 30 }); // reversed
    expect(parseRange('?from=2026-3-1&to=2026-03-05')).toEqual({ days: 30 });
    for (const c of [{ days: 7 } as const, { from: '2026-03-01', to: '2026-03-05' }]) expect(parseRange(rangeSearch(c))).toEqual(c);
  });

  it('finds a zone’s local midnight, across a change of offset', () => {
    expect(zoneMidnight('2026-03-08', 'America/New_York').toISOString()).toBe('2026-03-08T05:00:00.000Z');
    expect(zoneMidnight('2026-03-08', 'America/New_York', 1).toISOString()).toBe('2026-03-09T04:00:00.000Z'); // after the spring change
    expect(zoneMidnight('2026-03-09', 'Europe/Berlin').toISOString()).toBe('2026-03-08T23:00:00.000Z');
    expect(zoneMidnight('2026-03-09', 'Pacific/Kiritimati').toISOString()).toBe('2026-03-08T10:00:00.000Z');
    expect(zoneMidnight('2026-03-09', 'UTC', -6).toISOString()).toBe('2026-03-03T00:00:00.000Z');
  });

  it('asks a preset from the midnight days − 1 before today up to the service’s now, chosen days to the midnight after the last', () => {
    const now = new Date('2026-03-09T12:00:00Z');
    expect(rangeQuery({ days: 7 }, 'UTC', now)).toEqual({ from: '2026-03-03T00:00:00.000Z' });
    expect(rangeQuery({ days: 7 }, 'Europe/Berlin', now)).toEqual({ from: '2026-03-02T23:00:00.000Z' });
    expect(rangeQuery({ from: '2026-03-01', to: '2026-03-05' }, 'UTC', now)).toEqual({ from: '2026-03-01T00:00:00.000Z', to: '2026-03-06T00:00:00.000Z' });
  });
});
