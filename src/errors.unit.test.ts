import { describe, expect, it } from 'vitest';
import { flatErrorBody, LONGEST_RETRY_AFTER_SECONDS, refusalUntil } from './errors.js';

/** docs/ai-proxy.md, "Refusals that waiting cannot cure": the headers and `resets_at` of such a refusal. */
describe('refusalUntil', () => {
  const now = new Date('2026-01-15T12:00:00.000Z');
  const at = (ms: number) => new Date(now.getTime() + ms);
  const refuse = (resetsAt: Date | null) => refusalUntil('AI_QUOTA_EXCEEDED', 'used up', { quota_exceeded: true }, resetsAt, now);

  it('sends Retry-After (seconds to resets_at, rounded up) only when that is at most an hour', () => {
    expect(LONGEST_RETRY_AFTER_SECONDS).toBe(3600);
    expect(refuse(at(3_600_000)).headers).toEqual({ 'x-should-retry': 'false', 'retry-after': '3600' });
    expect(refuse(at(3_599_001)).headers['retry-after']).toBe('3600');
    expect(refuse(at(3_600_001)).headers).toEqual({ 'x-should-retry': 'false' });
    expect(refuse(at(30 * 24 * 3_600_000)).headers).toEqual({ 'x-should-retry': 'false' });
    expect(refuse(at(200)).headers['retry-after']).toBe('1');
  });

  it('names resets_at in the body next to the extra fields; without a reset, neither it nor Retry-After', () => {
    const err = refuse(at(3_600_000));
    expect(err.status).toBe(429);
    expect(flatErrorBody(err)).toEqual({
      error: 'quota_exceeded',
      code: 'AI_QUOTA_EXCEEDED',
      message: 'used up',
      quota_exceeded: true,
      resets_at: '2026-01-15T13:00:00.000Z',
    });
    const lasting = refuse(null);
    expect(lasting.headers).toEqual({ 'x-should-retry': 'false' });
    expect(lasting.extra).toEqual({ quota_exceeded: true });
  });
});
