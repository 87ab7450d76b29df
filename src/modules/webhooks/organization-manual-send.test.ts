import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, type Harness, json, signUpAsMember } from '../../../test/harness.js';
import { type DeliveryRow, eventually, expectError, headerSet, hooksUrl, naiveSignature, startWebhookHarness, type WebhookView, webhookFixtures } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { buildApp } from '../../app.js';
import type { Database, Queryable } from '../../db/client.js';
import { deliverDue, MAX_ATTEMPTS } from './organization.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: manual retry and test send.
 * Shared helpers: test/organization-webhook-fixtures.ts.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { create, owner, createHook, emit, deliveriesOf, delivery, byDelivery, drain, login } = fx;

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

describe('manual retry and test send', () => {
  it('retries a failed delivery with fewer than 5 attempts now; a delivered one or one with 5 attempts is 409', async () => {
    const o = await owner();
    const auth = bearer(o.accessToken);
    const hook = await createHook(o);
    const retryUrl = (webhookId: string, deliveryId: string) => `${hooksUrl(o.organizationId)}/${webhookId}/deliveries/${deliveryId}/retry`;
    // A 410 leaves a failed delivery with one attempt (and disables the webhook).
    rx.script({ status: 410 });
    await emit(o.organizationId);
    await drain();
    const id = (await deliveriesOf(hook.id))[0]!.id;
    expect(await delivery(id)).toMatchObject({ status: 'failed', attempt_count: 1 });
    // The receiver is fixed and the webhook enabled again; the retry makes the delivery due now.
    await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: auth, payload: { is_active: true } });
    rx.script({ status: 200 });
    h.clock.advance(5 * 60_000);
    const retried = await h.request({ method: 'POST', url: retryUrl(hook.id, id), headers: auth });
    expect(retried.statusCode, retried.body).toBe(200);
    expect(json<{ success: boolean; data: Record<string, unknown> }>(retried)).toMatchObject({
      success: true,
      data: { id, status: 'pending', attempt_count: 1, next_retry_at: h.clock.now().toISOString() },
    });
    await drain();
    expect(rx.received).toHaveLength(1);
    expect(rx.received[0]!.headers['webhook-id']).toBe(id);
    expect(await delivery(id)).toMatchObject({ status: 'delivered', attempt_count: 2, status_code: 200 });
    // Delivered: 409.
    expectError(await h.request({ method: 'POST', url: retryUrl(hook.id, id), headers: auth }), 409, 'CONFLICT');

    // Five failed attempts: 409.
    rx.script({ status: 500 });
    await emit(o.organizationId);
    const exhausted = (await deliveriesOf(hook.id)).find((d) => d.status === 'pending')!.id;
    for (let i = 0; i < MAX_ATTEMPTS; i++) {
      await drain();
      h.clock.advance(2 * 3_600_000);
    }
    expect(await delivery(exhausted)).toMatchObject({ status: 'failed', attempt_count: MAX_ATTEMPTS });
    const fresh = await login(o);
    expectError(await h.request({ method: 'POST', url: retryUrl(hook.id, exhausted), headers: fresh }), 409, 'CONFLICT');
    expect((await delivery(exhausted)).status).toBe('failed');

    // Unknown ids and another webhook's delivery: 404; a member may not retry.
    const otherRes = await create(fresh, o.organizationId, { url: `${rx.url}/other`, events: ['api_key.created'] });
    const otherId = json<{ data: WebhookView }>(otherRes).data.id;
    expectError(await h.request({ method: 'POST', url: retryUrl(otherId, exhausted), headers: fresh }), 404, 'NOT_FOUND');
    expectError(await h.request({ method: 'POST', url: retryUrl(hook.id, crypto.randomUUID()), headers: fresh }), 404, 'NOT_FOUND');
    const member = await signUpAsMember(h, o.organizationId, 'member');
    expectError(await h.request({ method: 'POST', url: retryUrl(hook.id, exhausted), headers: bearer(member.accessToken) }), 403, 'FORBIDDEN');
  });

  // A row in flight is leased (leased_until): a manual retry then must not make it due for a second worker,
  // or the slower attempt's record would overwrite the faster one's.
  it('a manual retry of a delivery in flight is refused (409) and does not send it again', async () => {
    const o = await owner();
    const hook = await createHook(o);
    await emit(o.organizationId);
    const id = (await deliveriesOf(hook.id))[0]!.id;
    rx.script({ status: 200, delayMs: 300 }, { status: 500, delayMs: 800 });
    const first = deliverDue(h.deps, 20, [o.organizationId]);
    await eventually(() => rx.received.length >= 1, 5_000);
    const retried = await h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hook.id}/deliveries/${id}/retry`, headers: bearer(o.accessToken) });
    expect(retried.statusCode, retried.body).toBe(409);
    const second = deliverDue(h.deps, 20, [o.organizationId]);
    await Promise.all([first, second]);
    expect(byDelivery(id), `retry answered ${retried.statusCode}`).toHaveLength(1);
    expect(await delivery(id)).toMatchObject({ status: 'delivered', status_code: 200 });
  });

  it('the test send delivers a signed webhook.test event at once and answers its record', async () => {
    const o = await owner();
    const hook = await createHook(o, { url: `${rx.url}/test-target` });
    rx.script({ status: 202, body: 'got it' });
    const res = await h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hook.id}/test`, headers: bearer(o.accessToken) });
    expect(res.statusCode, res.body).toBe(200);
    const data = json<{ success: boolean; data: Record<string, unknown> & { id: string; payload: Record<string, unknown> } }>(res).data;
    expect(data).toMatchObject({
      webhook_id: hook.id,
      event_type: 'webhook.test',
      status: 'delivered',
      status_code: 202,
      response_body: 'got it',
      attempt_count: 1,
      payload: { type: 'webhook.test', data: { webhook_id: hook.id } },
    });
    expect(rx.received).toHaveLength(1);
    const r = rx.received[0]!;
    expect(r.path).toBe('/test-target');
    expect(r.headers['x-service-event']).toBe('webhook.test');
    expect(r.headers['x-service-delivery']).toBe(data.id);
    const raw = r.body.toString();
    expect(Object.keys(JSON.parse(raw))).toEqual(['id', 'type', 'created_at', 'data']);
    expect(JSON.parse(raw)).toEqual(data.payload);
    // The generated whsec_ secret, as shown: the naive HMAC rule and the Standard Webhooks library both verify.
    expect(hook.secret).toMatch(/^whsec_/);
    expect(r.headers['x-service-signature']).toBe(naiveSignature(hook.secret, r.body));
    expect(new Webhook(hook.secret).verify(raw, headerSet(r))).toEqual(data.payload);
    // The record is kept like any other, and no worker sends it again.
    const list = json<{ data: Array<{ id: string }> }>(
      await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${hook.id}/deliveries`, headers: bearer(o.accessToken) }),
    );
    expect(list.data.map((d) => d.id)).toEqual([data.id]);
    h.clock.advance(3_600_000);
    await drain();
    expect(rx.received).toHaveLength(1);
  });

  it('a test send racing a worker pass is sent once', async () => {
    // A second app whose database lets the worker claim the test row between its insert and the endpoint's own claim.
    const o = await owner();
    const hook = await createHook(o);
    rx.script({ status: 200, delayMs: 300 });
    const base = h.deps.db;
    let workerPass: Promise<number> | null = null;
    const racing = new Proxy(base, {
      get(target, prop) {
        if (prop === 'transaction') {
          // The test row and its audit row commit in one transaction; the worker's pass starts right after.
          return async (fn: (tx: Queryable) => Promise<unknown>) => {
            const result = await target.transaction(fn);
            if (workerPass === null && (result as { event_type?: unknown } | null)?.event_type === 'webhook.test') {
              workerPass = deliverDue(h.deps, 20, [o.organizationId]);
              // The worker has claimed the row and its request is at the receiver.
              await eventually(() => rx.received.length >= 1, 5_000);
            }
            return result;
          };
        }
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    }) as Database;
    const app = await buildApp({ config: h.config, db: racing, clock: h.clock });
    try {
      await app.ready();
      const res = await app.inject({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hook.id}/test`, headers: bearer(o.accessToken) });
      await workerPass;
      const [row] = await h.deps.db.query<DeliveryRow>(`SELECT * FROM webhook_deliveries WHERE webhook_id = $1 AND event_type = 'webhook.test'`, [hook.id]);
      expect(byDelivery(row!.id), `endpoint answered ${res.statusCode} ${res.body}`).toHaveLength(1);
      expect(row).toMatchObject({ status: 'delivered', attempt_count: 1 });
      // The worker got there first: the endpoint says so (409) rather than sending a second copy.
      expectError(res, 409, 'CONFLICT');
    } finally {
      await app.close();
    }
  });
});
