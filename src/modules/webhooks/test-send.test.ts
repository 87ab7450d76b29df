import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, createPassesHarness, type Harness, json, signUpAsMember, signUpWithOrganization } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { deliverDue, type DeliveryView, TEST_EVENT_TYPE } from './organization.js';

/**
 * The test send (POST /organizations/{id}/webhooks/{webhookId}/test, docs/webhooks.md): one signed
 * webhook.test delivery to that webhook, answered with its record; a disabled webhook is 409; who
 * may send it; its audit row; a failed test retried once the receiver recovers.
 */
let h: Harness;
let rx: Receiver;

beforeAll(async () => {
  // Real time as the start: the Standard Webhooks library checks the timestamp against its own clock.
  // The delivery worker runs here with the clock moved on: a database of its own (createPassesHarness).
  h = await createPassesHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 1000 }, new Date().toISOString());
  rx = await startReceiver();
});
afterAll(async () => {
  await rx?.close();
  await h?.close();
});
beforeEach(() => {
  h.clock.set(Date.now());
  rx.script({ status: 200, body: 'ok' });
});

type Owner = Awaited<ReturnType<typeof signUpWithOrganization>>;
const hooksUrl = (orgId: string) => `/organizations/${orgId}/webhooks`;

async function createHook(o: Owner, path = '/hooks'): Promise<{ id: string; secret: string }> {
  const res = await h.request({
    method: 'POST',
    url: hooksUrl(o.organizationId),
    headers: bearer(o.accessToken),
    payload: { url: `${rx.url}${path}`, events: ['api_key.created'] },
  });
  expect(res.statusCode, res.body).toBe(201);
  return json<{ data: { id: string; secret: string } }>(res).data;
}

const testSend = (orgId: string, webhookId: string, headers: Record<string, string>) =>
  h.request({ method: 'POST', url: `${hooksUrl(orgId)}/${webhookId}/test`, headers });

function expectError(res: { statusCode: number; body: string }, status: number, code: string): void {
  expect(res.statusCode, res.body).toBe(status);
  expect((JSON.parse(res.body) as { error: { code: string } }).error.code).toBe(code);
}

const testRows = (webhookId: string) =>
  h.deps.db.query<{ id: string; status: string }>('SELECT id, status FROM webhook_deliveries WHERE webhook_id = $1 AND event_type = $2', [
    webhookId,
    TEST_EVENT_TYPE,
  ]);

describe('webhook test send', () => {
  it('delivers one webhook.test event signed as docs/webhooks.md says, and writes an audit row', async () => {
    const o = await owner();
    const hook = await createHook(o, '/signed');
    rx.script({ status: 204 });
    const res = await testSend(o.organizationId, hook.id, bearer(o.accessToken));
    expect(res.statusCode, res.body).toBe(200);
    const d = json<{ data: DeliveryView }>(res).data;
    expect(d).toMatchObject({ webhook_id: hook.id, event_type: TEST_EVENT_TYPE, status: 'delivered', status_code: 204, attempt_count: 1 });

    expect(rx.received).toHaveLength(1);
    const r = rx.received[0]!;
    expect(r.path).toBe('/signed');
    const raw = r.body.toString();
    // x-service-signature: hex HMAC-SHA256 of the raw body keyed with the secret as shown; and Standard Webhooks.
    expect(r.headers['x-service-signature']).toBe(createHmac('sha256', hook.secret).update(r.body).digest('hex'));
    const verified = new Webhook(hook.secret).verify(raw, {
      'webhook-id': String(r.headers['webhook-id']),
      'webhook-timestamp': String(r.headers['webhook-timestamp']),
      'webhook-signature': String(r.headers['webhook-signature']),
    });
    expect(verified).toEqual(d.payload);
    expect(verified).toMatchObject({
      type: TEST_EVENT_TYPE,
      data: { organization_id: o.organizationId, webhook_id: hook.id, message: 'This is a test event' },
    });
    expect(r.headers['x-service-event']).toBe(TEST_EVENT_TYPE);
    expect(r.headers['x-service-delivery']).toBe(d.id);
    // webhook-id is the delivery id, not the event id (the body's id): docs/webhooks.md, Delivery worker.
    expect(r.headers['webhook-id']).toBe(d.id);
    expect((verified as { id: string }).id).not.toBe(d.id);

    const audit = await h.deps.db.query<{ actor: string; metadata: Record<string, unknown> }>(
      `SELECT actor, metadata FROM audit_logs WHERE organization_id = $1 AND action = 'test' AND resource_type = 'webhook' AND resource_id = $2`,
      [o.organizationId, hook.id],
    );
    expect(audit).toEqual([{ actor: `user:${o.userId}`, metadata: { delivery_id: d.id, url: `${rx.url}/signed` } }]);
  });

  it('a disabled webhook is 409 CONFLICT: nothing is sent or recorded; enabled again, it sends', async () => {
    const o = await owner();
    const hook = await createHook(o);
    const off = await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: bearer(o.accessToken), payload: { is_active: false } });
    expect(off.statusCode, off.body).toBe(200);
    expectError(await testSend(o.organizationId, hook.id, bearer(o.accessToken)), 409, 'CONFLICT');
    expect(rx.received).toHaveLength(0);
    expect(await testRows(hook.id)).toEqual([]);

    await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: bearer(o.accessToken), payload: { is_active: true } });
    expect((await testSend(o.organizationId, hook.id, bearer(o.accessToken))).statusCode).toBe(200);
    expect(rx.received).toHaveLength(1);
  });

  it('needs webhooks.manage (a member 403, a read+write key 403, an admin key 200); another organization 404; a bad id 404', async () => {
    const o = await owner();
    const hook = await createHook(o);
    const member = await signUpAsMember(h, o.organizationId, 'member');
    expectError(await testSend(o.organizationId, hook.id, bearer(member.accessToken)), 403, 'FORBIDDEN');
    const rw = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write'] });
    expectError(await testSend(o.organizationId, hook.id, { 'x-api-key': rw.key }), 403, 'FORBIDDEN');
    const stranger = await owner();
    expectError(await testSend(o.organizationId, hook.id, bearer(stranger.accessToken)), 404, 'NOT_FOUND');
    // The other organization's webhook under the stranger's own organization: not found either.
    expectError(await testSend(stranger.organizationId, hook.id, bearer(stranger.accessToken)), 404, 'NOT_FOUND');
    expectError(await testSend(o.organizationId, 'not-a-uuid', bearer(o.accessToken)), 404, 'NOT_FOUND');
    expect(rx.received).toHaveLength(0);
    expect(await testRows(hook.id)).toEqual([]);

    const admin = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write', 'admin'] });
    expect((await testSend(o.organizationId, hook.id, { 'x-api-key': admin.key })).statusCode).toBe(200);
  });

  it('a failed test is final after one attempt, with the receiver’s status and body; a manual retry sends it again', async () => {
    const o = await owner();
    const hook = await createHook(o);
    rx.script({ status: 500, body: 'receiver is down' });
    const res = await testSend(o.organizationId, hook.id, bearer(o.accessToken));
    expect(res.statusCode, res.body).toBe(200);
    const failed = json<{ data: DeliveryView }>(res).data;
    expect(failed).toMatchObject({ status: 'failed', status_code: 500, response_body: 'receiver is down', attempt_count: 1, next_retry_at: null });
    // No worker picks a failed test up by itself, even past the first retry delay (30 s ± 20 %).
    h.clock.advance(10 * 60_000);
    // (Other suites' due rows share the database: only this delivery's requests count.)
    const mine = () => rx.received.filter((r) => r.headers['x-service-delivery'] === failed.id);
    await deliverDue(h.deps, 100);
    expect(await statusOf(failed.id)).toMatchObject({ status: 'failed', attempt_count: 1 });
    expect(mine()).toHaveLength(1);
    const firstId = mine()[0]!.headers['webhook-id'];

    rx.script({ status: 200, body: 'back' });
    const retried = await h.request({
      method: 'POST',
      url: `${hooksUrl(o.organizationId)}/${hook.id}/deliveries/${failed.id}/retry`,
      headers: bearer(o.accessToken),
    });
    expect(retried.statusCode, retried.body).toBe(200);
    expect(json<{ data: DeliveryView }>(retried).data.status).toBe('pending');
    // Worker passes (their due rows may come first).
    for (let pass = 0; pass < 20 && (await statusOf(failed.id)).status === 'pending'; pass++) await deliverDue(h.deps, 100);
    expect(await statusOf(failed.id)).toEqual({ status: 'delivered', status_code: 200, attempt_count: 2 });
    // Both attempts carry the same webhook-id, the delivery id (receivers deduplicate by it).
    expect([firstId, ...mine().map((r) => r.headers['webhook-id'])]).toEqual([failed.id, failed.id]);
  });
});

async function statusOf(id: string): Promise<{ status: string; status_code: number | null; attempt_count: number }> {
  const rows = await h.deps.db.query<{ status: string; status_code: number | null; attempt_count: number }>(
    'SELECT status, status_code, attempt_count FROM webhook_deliveries WHERE id = $1',
    [id],
  );
  return rows[0]!;
}

async function owner(): Promise<Owner> {
  return signUpWithOrganization(h, 'wt');
}
