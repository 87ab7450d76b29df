import { describe, expect, it } from 'vitest';
import { denialInfo, META_DENIAL, META_PAYMENT_REQUIRED, refusalResult } from '../src/mcp/results.js';
import type { PaymentRequired } from '../src/types.js';

/**
 * The sentences of a refusal with `payment_required` (docs/client.md, "What the middleware puts in _meta"),
 * word for word: the Python `metered` (packages/python/tests/test_payment_required.py) says the same.
 */
describe('a refusal with payment_required', () => {
  it('for credits names the price and the balance, and the link when there is one', () => {
    const payment: PaymentRequired = { reason: 'insufficient_credits', credits_required: 1, credits_available: 0 };
    expect(denialInfo('insufficient_credits', 'search', 'launch', undefined, undefined, undefined, payment).message).toBe(
      'Not enough credits to run "search": it costs 1 credit and the balance is 0 credits. Buy credits or wait for the monthly allocation to reset, then call the tool again.',
    );
    const linked: PaymentRequired = { ...payment, credits_required: 3, credits_available: null, top_up_url: 'https://cg.example/console/top-up/abc' };
    expect(denialInfo('insufficient_credits', 'search', 'launch', undefined, undefined, undefined, linked).message).toBe(
      'Not enough credits to run "search": it costs 3 credits and the balance is unlimited or unknown. Buy credits at https://cg.example/console/top-up/abc (the link is valid for 30 minutes), then call the tool again.',
    );
  });

  it('for a budget names the budget and when it resets', () => {
    const payment: PaymentRequired = { reason: 'budget_exceeded', credits_required: 2, credits_available: null, budget_id: 'b-1', resets_at: '2026-03-02T00:00:00.000Z' };
    expect(denialInfo('budget_exceeded', 'search', null, undefined, undefined, undefined, payment).message).toBe(
      '"search" would go over the spending budget b-1 of this workspace (it costs 2 credits), so it did not run and nothing was charged. The budget\'s window resets at 2026-03-02T00:00:00.000Z. Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it.',
    );
  });

  it('the result carries payment_required as given, beside the denial; without one only the denial', () => {
    const payment: PaymentRequired = { reason: 'insufficient_credits', credits_required: 1, credits_available: 0, top_up_url: 'https://cg.example/console/top-up/abc' };
    const info = denialInfo('insufficient_credits', 'search', 'launch', undefined, undefined, undefined, payment);
    const result = refusalResult(info, false, payment);
    expect(result).toEqual({ isError: true, content: [{ type: 'text', text: info.message }], _meta: { [META_DENIAL]: info, [META_PAYMENT_REQUIRED]: payment } });
    expect(result._meta?.[META_PAYMENT_REQUIRED]).toBe(payment);
    const plain = denialInfo('sandbox_tier', 'search', 'sandbox', undefined);
    expect(refusalResult(plain, false)._meta).toEqual({ [META_DENIAL]: plain });
  });
});
