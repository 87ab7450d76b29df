import { describe, expect, it } from 'vitest';
import { testOutcome } from './Webhooks';

const url = 'https://example.com/hook';

describe("a webhook test send's outcome", () => {
  it('delivered is a success', () => {
    expect(testOutcome(url, { status: 'delivered', status_code: 200, error: null })).toEqual({ tone: 'success', text: `Test sent to ${url}: delivered, HTTP 200.` });
  });

  it('failed is a failure, and the words say it failed', () => {
    expect(testOutcome(url, { status: 'failed', status_code: 503, error: 'Receiver answered 503' })).toEqual({ tone: 'failure', text: `Test send failed: ${url} answered HTTP 503.` });
    expect(testOutcome(url, { status: 'failed', status_code: null, error: 'connect ECONNREFUSED' })).toEqual({
      tone: 'failure',
      text: `Test send failed: ${url} could not be reached (connect ECONNREFUSED).`,
    });
  });

  it('anything else is neither', () => {
    expect(testOutcome(url, { status: 'pending', status_code: null, error: null }).tone).toBe('neutral');
  });
});
