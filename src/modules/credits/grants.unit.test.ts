import { describe, expect, it } from 'vitest';
import { type Lot, permanentCredits, refillLots, refundToLots, settleLots, takenFromLots } from './grants.js';

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

describe('removing purchased credits takes those that never expire first (docs/metering.md, Expiring grants)', () => {
  it('the credits that never expire are the purchased credits less what the settled lots hold', () => {
    // 1,000 of a promotion, 1,000 bought; 300 spent took the promotion first.
    expect(permanentCredits(1700, [lot('promo', 1000, 0, 10)], 300)).toBe(1000);
    expect(permanentCredits(40, [], 0)).toBe(40);
  });

  it('a take-back the credits that never expire cover takes nothing from the lots', () => {
    expect(takenFromLots(1000, 2000, [lot('promo', 1000, 0, 10)], 0)).toBe(0);
  });

  it('only what they cannot cover comes out of the lots', () => {
    // 200 never expire, 500 in the promotion: a take-back of 500 takes 300 of the promotion.
    expect(takenFromLots(500, 700, [lot('promo', 500, 800, 10)], 800)).toBe(300);
    expect(takenFromLots(700, 700, [lot('promo', 500, 800, 10)], 800)).toBe(500);
  });
});

/** A charge after every lot of these tests was made. */
const LATER = new Date(Date.UTC(2027, 0, 1));

describe('refillLots: a refund goes back to the open lots first (docs/metering.md, Expiring grants)', () => {
  it('soonest expiry first, each up to its amount; the rest never expires', () => {
    // late 5 (day 20), soon 5 (day 10); 8 spent: soon 0, late 2. A refund of 6 fills soon, then late by 1.
    const { remaining, taken } = refillLots([lot('late', 5, 0, 20), lot('soon', 5, 0, 10)], 8, 6, LATER);
    expect(Object.fromEntries(remaining)).toEqual({ soon: 5, late: 3 });
    expect(taken).toBe(6);
  });

  it('a lot never spent takes nothing back; a refund past what the lots lack never expires', () => {
    expect(refillLots([lot('full', 5, 3, 10)], 3, 3, LATER)).toEqual({ remaining: new Map([['full', 5]]), taken: 0 });
    const { remaining, taken } = refillLots([lot('a', 5, 0, 10)], 2, 10, LATER);
    expect(remaining.get('a')).toBe(5);
    expect(taken).toBe(2);
  });

  it('a lot made after the charge did not pay for it: it takes nothing back, the refund never expires', () => {
    // 'before' (made at minute 0) and 'after' (minute 5); both partly spent. A charge at minute 3 paid by neither 'after'.
    const lots = [lot('before', 5, 0, 20), lot('after', 5, 5, 10)];
    const chargedAt = new Date(Date.UTC(2026, 0, 1, 0, 3));
    const { remaining, taken } = refillLots(lots, 12, 10, chargedAt);
    expect(remaining.get('after')).toBe(settleLots(lots, 12).get('after'));
    expect(remaining.get('before')).toBe(5);
    expect(taken).toBe(5 - settleLots(lots, 12).get('before')!);
  });

  it('a deployment without open lots sends no statement', async () => {
    const tx = { query: () => Promise.reject(new Error('no statement expected')) };
    await expect(refundToLots(tx as never, [], 7, 3, LATER)).resolves.toBe(0);
  });
});
