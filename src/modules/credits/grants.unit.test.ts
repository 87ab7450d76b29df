import { describe, expect, it } from 'vitest';
import { type Lot, settleLots } from './grants.js';

const lot = (id: string, amount: number, mark: number, expiresDay: number, remaining = amount): Lot => ({
  id,
  amount,
  remaining,
  consumed_mark: mark,
  expires_at: new Date(Date.UTC(2026, 0, expiresDay)),
  created_at: new Date(Date.UTC(2026, 0, 1, 0, mark)),
});

describe('settleLots: spending takes the soonest-expiring grant first', () => {
  it('attributes spending since the mark to the soonest expiry first', () => {
    const out = settleLots([lot('late', 50, 0, 20), lot('soon', 30, 0, 10)], 40);
    expect(Object.fromEntries(out)).toEqual({ soon: 0, late: 40 });
  });

  it('spending before a grant existed never touches it', () => {
    // 30 spent (from credits that never expire), then a grant of 10 arrives at mark 30.
    const out = settleLots([lot('g', 10, 30, 10)], 30);
    expect(out.get('g')).toBe(10);
  });

  it('spending past every grant comes from credits that never expire', () => {
    const out = settleLots([lot('a', 5, 0, 10), lot('b', 5, 2, 12)], 100);
    expect(Object.fromEntries(out)).toEqual({ a: 0, b: 0 });
  });

  it('spending between two grants only reaches the earlier one', () => {
    // a exists from mark 0; 4 spent; b arrives at mark 4 (expires sooner than a); 3 more spent.
    const out = settleLots([lot('a', 10, 0, 20), lot('b', 10, 4, 5)], 7);
    expect(Object.fromEntries(out)).toEqual({ a: 6, b: 7 });
  });

  it('starts from a settled remaining', () => {
    expect(settleLots([lot('a', 10, 8, 20, 3)], 9).get('a')).toBe(2);
  });
});
