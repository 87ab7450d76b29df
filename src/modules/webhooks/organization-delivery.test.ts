import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, dispatchAllPending, type Harness, json } from '../../../test/harness.js';
import { headerSet, hooksUrl, naiveSignature, startWebhookHarness, webhookFixtures, worker } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { appendEvent, dispatchPending } from '../events/outbox.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: the outbox fan-out and a signed delivery
 * (independent HMAC and the standardwebhooks package).
 * Shared helpers: test/organization-webhook-fixtures.ts.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { owner, createHook, emit, deliveriesOf, delivery, byDelivery, drain } = fx;

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

describe('events and deliveries', () => {
  it('fans an event out to each subscribed active webhook and delivers it signed, once', async () => {
    const o = await owner();
    const a = await createHook(o, { url: `${rx.url}/a`, events: ['api_key.created'] });
    const plainSecret = 'a-plain-shared-secret-of-some-length';
    const b = await createHook(o, { url: `${rx.url}/b`, events: ['api_key.revoked', 'api_key.created'], secret: plainSecret });
    const unsubscribed = await createHook(o, { url: `${rx.url}/c`, events: ['api_key.revoked'] });
    const inactive = await createHook(o, { url: `${rx.url}/d`, events: ['api_key.created'], is_active: false });
    // Another organization subscribed to the same type gets nothing from this organization's event.
    const stranger = await owner();
    const theirs = await createHook(stranger, { url: `${rx.url}/e` });

    const at = h.clock.now();
    const data = { api_key_id: 'key_123', name: 'CI', scopes: ['read'], nested: { n: 1 } };
    const eventId = await emit(o.organizationId, data);
    const [da] = await deliveriesOf(a.id);
    const [db] = await deliveriesOf(b.id);
    expect(await deliveriesOf(a.id)).toHaveLength(1);
    expect(await deliveriesOf(b.id)).toHaveLength(1);
    expect(await deliveriesOf(unsubscribed.id)).toHaveLength(0);
    expect(await deliveriesOf(inactive.id)).toHaveLength(0);
    expect(await deliveriesOf(theirs.id)).toHaveLength(0);
    for (const d of [da!, db!]) {
      expect(d).toMatchObject({ event_id: eventId, event_type: 'api_key.created', status: 'pending', attempt_count: 0, delivered_at: null });
      expect(d.next_retry_at!.getTime()).toBe(at.getTime());
    }
    const [event] = await h.deps.db.query<{ dispatched_at: Date | null }>('SELECT dispatched_at FROM outbox_events WHERE id = $1', [eventId]);
    expect(event!.dispatched_at).not.toBeNull();

    rx.script({ status: 200, body: 'thanks' });
    await drain();
    expect(rx.received).toHaveLength(2);
    for (const [d, hook, secret] of [
      [da!, a, a.secret],
      [db!, b, plainSecret],
    ] as const) {
      const got = byDelivery(d.id);
      expect(got).toHaveLength(1);
      const r = got[0]!;
      expect(r.method).toBe('POST');
      expect(`${rx.url}${r.path}`).toBe(hook.url);
      // Body: exactly {id, type, created_at, data}, in that order.
      const raw = r.body.toString('utf8');
      const parsed = JSON.parse(raw) as Record<string, unknown>;
      expect(Object.keys(parsed)).toEqual(['id', 'type', 'created_at', 'data']);
      expect(parsed).toEqual({ id: eventId, type: 'api_key.created', created_at: at.toISOString(), data });
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers['x-service-event']).toBe('api_key.created');
      expect(r.headers['x-service-delivery']).toBe(d.id);
      expect(r.headers['webhook-id']).toBe(d.id);
      // Independent HMAC over the raw bytes, keyed with the secret as shown (the generated one's whsec_ included).
      expect(r.headers['x-service-signature']).toBe(naiveSignature(secret, r.body));
      // Standard Webhooks, by the reference library: whsec_ decoded by the library, any other secret raw.
      const wh = secret.startsWith('whsec_') ? new Webhook(secret) : new Webhook(Buffer.from(secret, 'utf8'), { format: 'raw' });
      expect(wh.verify(raw, headerSet(r))).toEqual(parsed);
      expect(() => new Webhook(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(raw, headerSet(r))).toThrow();

      const row = await delivery(d.id);
      expect(row).toMatchObject({ status: 'delivered', attempt_count: 1, status_code: 200, response_body: 'thanks', error: null, next_retry_at: null });
      expect(row.delivered_at!.getTime()).toBe(h.clock.now().getTime());
    }

    // The delivery list (envelope page) shows the record.
    const list = await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${a.id}/deliveries`, headers: bearer(o.accessToken) });
    expect(list.statusCode).toBe(200);
    const page = json<{ success: boolean; message: string; data: Array<Record<string, unknown>>; meta: { next_cursor: string | null } }>(list);
    expect(page).toMatchObject({ success: true, meta: { next_cursor: null } });
    expect(page.data).toEqual([
      expect.objectContaining({
        id: da!.id,
        webhook_id: a.id,
        event_type: 'api_key.created',
        payload: { id: eventId, type: 'api_key.created', created_at: at.toISOString(), data },
        status: 'delivered',
        status_code: 200,
        attempt_count: 1,
        error: null,
        next_retry_at: null,
        delivered_at: h.clock.now().toISOString(),
      }),
    ]);

    // Nothing is sent twice, now or later.
    h.clock.advance(2 * 3_600_000);
    await drain();
    expect(rx.received).toHaveLength(2);
  });

  it('an event is written with its deliveries or not at all (same transaction), and a dedupe key makes a repeat a no-op', async () => {
    const o = await owner();
    const hook = await createHook(o);
    await expect(
      h.deps.db.transaction(async (tx) => {
        await appendEvent(tx, { organizationId: o.organizationId, deploymentId: null, type: 'api_key.created', data: {}, dedupeKey: null, at: h.clock.now() });
        throw new Error('the change failed');
      }),
    ).rejects.toThrow('the change failed');
    expect(await h.deps.db.query('SELECT 1 FROM outbox_events WHERE organization_id = $1', [o.organizationId])).toHaveLength(0);
    expect(await deliveriesOf(hook.id)).toHaveLength(0);

    const key = `dedupe-${hook.id}`;
    const append = () =>
      h.deps.db.transaction((tx) =>
        appendEvent(tx, { organizationId: o.organizationId, deploymentId: null, type: 'api_key.created', data: { n: 1 }, dedupeKey: key, at: h.clock.now() }),
      );
    expect(await append()).not.toBeNull();
    expect(await append()).toBeNull();
    expect(await deliveriesOf(hook.id)).toHaveLength(1);
  });

  it('the dispatcher fans out events written without deliveries, once; the catalog workers deliver them', async () => {
    const o = await owner();
    const hook = await createHook(o, { events: ['quota.threshold'] });
    // Events pending before ours, as earlier files of a worker leave them on its database: more than one
    // pass of the dispatcher takes, so the test dispatches until nothing is left (dispatchAllPending).
    const other = await owner();
    await h.deps.db.query(
      `INSERT INTO outbox_events (organization_id, type, data, created_at)
       SELECT $1, 'quota.threshold', '{}'::jsonb, $2 FROM generate_series(1, 150)`,
      [other.organizationId, new Date(h.clock.now().getTime() - 60_000)],
    );
    // As the one-statement deduction writes quota.threshold: the event row only.
    const [ev] = await h.deps.db.query<{ id: string }>(
      `INSERT INTO outbox_events (organization_id, type, data, created_at) VALUES ($1, 'quota.threshold', $2, $3) RETURNING id`,
      [o.organizationId, JSON.stringify({ threshold: 80 }), h.clock.now()],
    );
    expect(await deliveriesOf(hook.id)).toHaveLength(0);
    expect(await dispatchAllPending(h.deps.db, h.clock.now())).toBeGreaterThanOrEqual(1);
    const rows = await deliveriesOf(hook.id);
    expect(rows).toEqual([expect.objectContaining({ event_id: ev!.id, event_type: 'quota.threshold', status: 'pending' })]);
    const [event] = await h.deps.db.query<{ dispatched_at: Date | null }>('SELECT dispatched_at FROM outbox_events WHERE id = $1', [ev!.id]);
    expect(event!.dispatched_at).not.toBeNull();
    // Again (and through the catalog's event-dispatch worker): no second delivery.
    await dispatchPending(h.deps.db, h.clock.now(), 100);
    await worker('event-dispatch').run(h.deps);
    expect(await deliveriesOf(hook.id)).toHaveLength(1);

    expect(await worker('webhook-delivery').run(h.deps)).toBeGreaterThanOrEqual(1);
    expect(byDelivery(rows[0]!.id)).toHaveLength(1);
    expect(JSON.parse(byDelivery(rows[0]!.id)[0]!.body.toString())).toMatchObject({ id: ev!.id, type: 'quota.threshold', data: { threshold: 80 } });
    expect((await delivery(rows[0]!.id)).status).toBe('delivered');
  });
});
