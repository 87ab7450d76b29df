import { describe, expect, it } from 'vitest';
import { periodFor } from './terms.js';

/**
 * The period past a subscription's unreported end (docs/decisions.md, Period with a subscription):
 * monthly anniversaries of its end, where Stripe's next period starts; of its start's day when the end
 * was clamped to a month's last day (Stripe's cycle from Jan 31 ends Feb 28, then Mar 31).
 */
const at = (iso: string) => new Date(`${iso}T10:00:00.000Z`);
const anchor = { billing_anchor: at('2025-06-03') };
const next = (start: string, end: string, now: string) => {
  const p = periodFor(anchor, at(now), { current_period_start: at(start), current_period_end: at(end) });
  return [p.start.toISOString().slice(0, 10), p.end.toISOString().slice(0, 10)];
};

describe('periodFor past a subscription’s end', () => {
  it('a cycle anchored on the 31st goes on to the month’s last day and back to the 31st', () => {
    expect(next('2026-01-31', '2026-02-28', '2026-03-01')).toEqual(['2026-02-28', '2026-03-31']);
    expect(next('2026-01-31', '2026-02-28', '2026-04-02')).toEqual(['2026-03-31', '2026-04-30']);
    expect(next('2026-02-28', '2026-03-31', '2026-04-01')).toEqual(['2026-03-31', '2026-04-30']);
    expect(next('2026-04-30', '2026-05-31', '2026-06-01')).toEqual(['2026-05-31', '2026-06-30']);
    expect(next('2026-01-30', '2026-02-28', '2026-03-01')).toEqual(['2026-02-28', '2026-03-30']);
    expect(next('2028-01-31', '2028-02-29', '2028-03-01')).toEqual(['2028-02-29', '2028-03-31']);
  });

  it('an end that was not clamped stays the anchor (a first period prorated to another anchor day, a cycle on the 28th)', () => {
    expect(next('2026-01-10', '2026-02-01', '2026-02-02')).toEqual(['2026-02-01', '2026-03-01']);
    expect(next('2026-01-28', '2026-02-28', '2026-03-01')).toEqual(['2026-02-28', '2026-03-28']);
    expect(next('2026-01-15', '2026-02-15', '2026-02-16')).toEqual(['2026-02-15', '2026-03-15']);
  });

  it('inside the subscription’s period, that period', () => {
    expect(next('2026-01-31', '2026-02-28', '2026-02-27')).toEqual(['2026-01-31', '2026-02-28']);
  });
});
