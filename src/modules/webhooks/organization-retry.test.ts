import { createHmac } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Harness } from '../../../test/harness.js';
import { standardKeyOf, startWebhookHarness, webhookFixtures } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { MAX_ATTEMPTS } from './organization.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: the retry schedule, driven by a moved clock.
 * Shared helpers: test/organization-webhook-fixtures.ts.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { owner, createHook, emit, deliveriesOf, delivery, hookRow, byDelivery, drain } = fx;

beforeAll(async () => {
  h = await startWebhookHarness();
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});
beforeEach(() => fx.resetEach());
afterEach(() => fx.cleanUpEach());

describe('retry schedule', () => {
  it('30 s, 2 min (Retry-After honoured), 10 min (Retry-After bounded), 1 h, then failed for good; one webhook-id throughout', async () => {
    const o = await owner();
    const hook = await createHook(o);
    rx.script(
      { status: 500, body: 'boom' },
      { status: 503, headers: { 'retry-after': '100' } },
      { status: 500, headers: { 'retry-after': '5' } },
      { status: 502 },
    );
    const t0 = h.clock.now().getTime();
    await emit(o.organizationId);
    const id = (await deliveriesOf(hook.id))[0]!.id;

    /** Asserts nothing is sent just before the row is due, then runs the due attempt; returns the row after it. */
    const attemptAtDue = async (expectedSoFar: number) => {
      const due = (await delivery(id)).next_retry_at!.getTime();
      h.clock.set(due - 1);
      await drain();
      expect(byDelivery(id)).toHaveLength(expectedSoFar);
      h.clock.set(due);
      await drain();
      expect(byDelivery(id)).toHaveLength(expectedSoFar + 1);
      return delivery(id);
    };

    await drain();
    let row = await delivery(id);
    expect(byDelivery(id)).toHaveLength(1);
    expect(row).toMatchObject({ status: 'pending', attempt_count: 1, status_code: 500, response_body: 'boom', delivered_at: null });
    expect(row.error).toContain('500');
    let wait = row.next_retry_at!.getTime() - t0;
    expect(wait).toBeGreaterThanOrEqual(24_000);
    expect(wait).toBeLessThanOrEqual(36_000);
    // Less than the wait: nothing.
    h.clock.advance(23_000);
    await drain();
    expect(byDelivery(id)).toHaveLength(1);

    // 2nd attempt: 503 with Retry-After: 100 → within 2 min ±20 %, so 100 s exactly.
    row = await attemptAtDue(1);
    let at = h.clock.now().getTime();
    expect(row).toMatchObject({ status: 'pending', attempt_count: 2, status_code: 503 });
    wait = row.next_retry_at!.getTime() - at;
    expect(wait).toBeGreaterThanOrEqual(96_000);
    expect(wait).toBeLessThanOrEqual(144_000);
    expect(wait).toBe(100_000);

    // 3rd attempt: Retry-After: 5 is below 10 min −20 %: bounded to 480 s.
    row = await attemptAtDue(2);
    at = h.clock.now().getTime();
    expect(row).toMatchObject({ status: 'pending', attempt_count: 3, status_code: 500 });
    expect(row.next_retry_at!.getTime() - at).toBe(480_000);

    // 4th attempt: 502 → 1 h ±20 %.
    row = await attemptAtDue(3);
    at = h.clock.now().getTime();
    expect(row).toMatchObject({ status: 'pending', attempt_count: 4, status_code: 502 });
    wait = row.next_retry_at!.getTime() - at;
    expect(wait).toBeGreaterThanOrEqual(2_880_000);
    expect(wait).toBeLessThanOrEqual(4_320_000);

    // 5th attempt: the last.
    row = await attemptAtDue(4);
    expect(row).toMatchObject({ status: 'failed', attempt_count: MAX_ATTEMPTS, status_code: 502, next_retry_at: null, delivered_at: null });
    h.clock.advance(24 * 3_600_000);
    await drain();
    expect(byDelivery(id)).toHaveLength(MAX_ATTEMPTS);
    expect((await delivery(id)).attempt_count).toBe(MAX_ATTEMPTS);

    // One webhook-id (the delivery id) and one body across attempts; fresh timestamps, each signed.
    const sent = byDelivery(id);
    expect(new Set(sent.map((r) => r.headers['webhook-id']))).toEqual(new Set([id]));
    expect(new Set(sent.map((r) => r.body.toString()))).toHaveProperty('size', 1);
    const stamps = sent.map((r) => Number(r.headers['webhook-timestamp']));
    expect([...stamps].sort((x, y) => x - y)).toEqual(stamps);
    expect(new Set(stamps).size).toBe(MAX_ATTEMPTS);
    for (const r of sent) {
      const expected = createHmac('sha256', standardKeyOf(hook.secret)).update(`${id}.${r.headers['webhook-timestamp']}.`).update(r.body).digest('base64');
      expect(r.headers['webhook-signature']).toBe(`v1,${expected}`);
    }
    // A little over an hour of failing is far from the 5-day limit: still active.
    expect((await hookRow(hook.id)).is_active).toBe(true);
  });

  it('the first wait is jittered within 24–36 s', async () => {
    const o = await owner();
    const hook = await createHook(o);
    rx.script({ status: 500 });
    const t0 = h.clock.now().getTime();
    for (let i = 0; i < 8; i++) await emit(o.organizationId, { i });
    await drain();
    const waits = (await deliveriesOf(hook.id)).map((d) => d.next_retry_at!.getTime() - t0);
    expect(waits).toHaveLength(8);
    for (const w of waits) {
      expect(w).toBeGreaterThanOrEqual(24_000);
      expect(w).toBeLessThanOrEqual(36_000);
    }
    expect(new Set(waits).size).toBeGreaterThan(1);
  });
});
