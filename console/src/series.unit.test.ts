import { describe, expect, it } from 'vitest';
import { dayLabel, stackOf, topOf, type UsageSummary } from './series';

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
