import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { creditsForTokens, splitAiCharge } from './ai-usage.js';
import { owedPayment, owedPieces } from './owed.js';

/**
 * docs/ai-proxy.md, "What a provider's over-report costs": the pure parts. How a call's tokens are
 * paid (quota, then purchased credits, the rest short), how much of an addition pays what is owed,
 * and which usage records a payment names.
 */
const classes = ['standard', 'advanced', 'premium'] as const;

describe('splitAiCharge: quota tokens, then purchased credits, the rest owed', () => {
  it('the attack: 100,008 tokens on a 300-token quota with no credits owes 100 standard credits', () => {
    expect(splitAiCharge(100_008, 300, 'standard', 0)).toEqual({ inQuota: 300, overLimit: 99_708, due: 100, charged: 0, short: 100 });
  });

  it('never charges more than is payable; charged + short is always the rounded-up price of the tokens past the quota', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 32 }),
        fc.option(fc.integer({ min: 0, max: 1_000_000 }), { nil: null }),
        fc.constantFrom(...classes),
        fc.integer({ min: 0, max: 1_000_000 }),
        (tokens, free, cls, payable) => {
          const s = splitAiCharge(tokens, free, cls, payable);
          expect(s.inQuota + s.overLimit).toBe(tokens);
          expect(s.inQuota).toBeLessThanOrEqual(free ?? tokens);
          expect(s.due).toBe(creditsForTokens(s.overLimit, cls));
          expect(s.charged + s.short).toBe(s.due);
          expect(s.charged).toBeLessThanOrEqual(payable);
          expect(s.short).toBeGreaterThanOrEqual(0);
          // Something is short only when everything payable was taken.
          if (s.short > 0) expect(s.charged).toBe(payable);
          if (free === null) expect(s.due).toBe(0);
        },
      ),
    );
  });
});

const row = (over: Partial<Parameters<typeof owedPayment>[0]> = {}) => ({
  monthly_allocation: 100 as number | null,
  monthly_used: 0,
  purchased_balance: 0,
  reserved: 0,
  ai_credits_reserved: 0,
  credits_owed: 0,
  ...over,
});

describe('owedPayment: what an addition pays of credits_owed', () => {
  it('a period reset pays from the new allocation; a grant from the grant; never more than was added', () => {
    expect(owedPayment(row({ credits_owed: 40 }), { monthly: 100, purchased: 0 })).toEqual({ monthly: 40, purchased: 0 });
    expect(owedPayment(row({ credits_owed: 140 }), { monthly: 100, purchased: 0 })).toEqual({ monthly: 100, purchased: 0 });
    // 30 purchased were there before the grant of 50: only the 50 added pay.
    expect(owedPayment(row({ monthly_used: 100, purchased_balance: 80, credits_owed: 70 }), { monthly: 0, purchased: 50 })).toEqual({
      monthly: 0,
      purchased: 50,
    });
  });

  it('an unlimited allocation pays everything owed; nothing added pays nothing', () => {
    expect(owedPayment(row({ monthly_allocation: null, credits_owed: 500 }), { monthly: null, purchased: 0 })).toEqual({ monthly: 500, purchased: 0 });
    expect(owedPayment(row({ credits_owed: 5 }), { monthly: 0, purchased: 0 })).toEqual({ monthly: 0, purchased: 0 });
  });

  it('never takes what open holds were promised', () => {
    // 20 held by MCP reservations against a bucket of 100 that was just refilled: 80 can pay.
    expect(owedPayment(row({ reserved: 20, credits_owed: 100 }), { monthly: 100, purchased: 0 })).toEqual({ monthly: 80, purchased: 0 });
    // An AI call holds 10 purchased credits: a grant of 10 on top of them pays 10, not the held ones.
    expect(
      owedPayment(row({ monthly_used: 100, purchased_balance: 20, reserved: 10, ai_credits_reserved: 10, credits_owed: 50 }), { monthly: 0, purchased: 10 }),
    ).toEqual({ monthly: 0, purchased: 10 });
  });

  it('property: pays at most what is owed and what was added, and leaves every hold covered', () => {
    fc.assert(
      fc.property(
        fc.option(fc.integer({ min: 0, max: 10_000 }), { nil: null }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 10_000 }),
        (allocation, used, purchased, mcpHeld, aiHeld, owed, addedPurchased) => {
          // A consistent row: AI holds are purchased credits; every hold is covered.
          const b = row({
            monthly_allocation: allocation,
            monthly_used: used,
            purchased_balance: purchased + aiHeld,
            reserved: 0,
            ai_credits_reserved: aiHeld,
            credits_owed: owed,
          });
          const monthlyLeft = allocation === null ? Number.POSITIVE_INFINITY : Math.max(0, allocation - used);
          b.reserved = aiHeld + Math.min(mcpHeld, monthlyLeft + purchased);
          const added = { monthly: allocation === null ? null : Math.min(monthlyLeft, 5_000), purchased: Math.min(addedPurchased, b.purchased_balance) };
          const pay = owedPayment(b, added);
          expect(pay.monthly).toBeGreaterThanOrEqual(0);
          expect(pay.purchased).toBeGreaterThanOrEqual(0);
          expect(pay.monthly + pay.purchased).toBeLessThanOrEqual(owed);
          if (added.monthly !== null) expect(pay.monthly).toBeLessThanOrEqual(added.monthly);
          expect(pay.purchased).toBeLessThanOrEqual(added.purchased);
          const left = allocation === null ? Number.POSITIVE_INFINITY : Math.max(0, allocation - used - pay.monthly);
          expect(b.purchased_balance - pay.purchased).toBeGreaterThanOrEqual(aiHeld);
          expect(left + b.purchased_balance - pay.purchased).toBeGreaterThanOrEqual(b.reserved);
        },
      ),
    );
  });
});

describe('owedPieces: a payment names the oldest unpaid records', () => {
  // Newest first, as payOwed reads them: c (newest) owes 30, b 20, a (oldest) 50.
  const records = [
    { id: 'c', short: 30 },
    { id: 'b', short: 20 },
    { id: 'a', short: 50 },
  ];

  it('with everything unpaid, the oldest record is paid first, then the next', () => {
    expect(owedPieces(records, 100, 60)).toEqual([
      { usageId: 'a', amount: 50 },
      { usageId: 'b', amount: 10 },
    ]);
  });

  it('what was paid before is the oldest part: only the newest records make up what is still owed', () => {
    // 40 owed: c's 30 and 10 of b's 20 (a and half of b were paid).
    expect(owedPieces(records, 40, 40)).toEqual([
      { usageId: 'b', amount: 10 },
      { usageId: 'c', amount: 30 },
    ]);
    expect(owedPieces(records, 40, 5)).toEqual([{ usageId: 'b', amount: 5 }]);
  });

  it('refuses a debt the records do not explain', () => {
    expect(() => owedPieces(records, 101, 1)).toThrow(/more than the usage records/);
  });

  it('property: pieces sum to the payment, each within what its record still owes, oldest unpaid first', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 1000 }), { minLength: 1, maxLength: 20 }), fc.nat(), fc.nat(), (shorts, a, b) => {
        const newestFirst = shorts.map((short, i) => ({ id: `r${i}`, short }));
        const total = shorts.reduce((x, y) => x + y, 0);
        const owed = a % (total + 1);
        const pay = b % (owed + 1);
        const pieces = owedPieces(newestFirst, owed, pay);
        expect(pieces.reduce((x, p) => x + p.amount, 0)).toBe(pay);
        const index = (id: string) => newestFirst.findIndex((r) => r.id === id);
        for (const p of pieces) expect(p.amount).toBeLessThanOrEqual(newestFirst[index(p.usageId)]!.short);
        // Oldest first: indexes (newest first) go down.
        for (let i = 1; i < pieces.length; i++) expect(index(pieces[i]!.usageId)).toBeLessThan(index(pieces[i - 1]!.usageId));
      }),
    );
  });
});
