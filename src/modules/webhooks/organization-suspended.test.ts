import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, type Harness, json, signUpWithOrganization } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { type DeliveryView, TEST_EVENT_TYPE } from './organization.js';

/**
 * A suspended deployment may read but not send (docs/webhooks.md, "Suspended deployments"): the
 * organization-level sends on request — the webhook test and the manual retry — act for the
 * organization's primary deployment and are refused while it is suspended. The review sent a test
 * from an organization whose deployment the operator had suspended; that request is replayed here.
 */
let h: Harness;
let rx: Receiver;

beforeAll(async () => {
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 1000 }, new Date().toISOString());
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

async function createHook(o: Owner): Promise<string> {
  const res = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(o.accessToken), payload: { url: `${rx.url}/hooks`, events: ['api_key.created'] } });
  expect(res.statusCode, res.body).toBe(201);
  return json<{ data: { id: string } }>(res).data.id;
}

const testSend = (o: Owner, webhookId: string) => h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${webhookId}/test`, headers: bearer(o.accessToken) });
const retry = (o: Owner, webhookId: string, deliveryId: string) =>
  h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${webhookId}/deliveries/${deliveryId}/retry`, headers: bearer(o.accessToken) });
const setStatus = async (o: Owner, status: 'active' | 'suspended') => {
  const res = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${o.deploymentId}`, headers: adminHeaders(h), payload: { status } });
  expect(res.statusCode, res.body).toBe(200);
};
const deliveries = (webhookId: string) =>
  h.deps.db.query<{ id: string; status: string; attempt_count: number }>('SELECT id, status, attempt_count FROM webhook_deliveries WHERE webhook_id = $1 AND event_type = $2', [
    webhookId,
    TEST_EVENT_TYPE,
  ]);
const testAudits = (o: Owner) =>
  h.deps.db.query(`SELECT id FROM audit_logs WHERE organization_id = $1 AND action = 'test' AND resource_type = 'webhook'`, [o.organizationId]);

function expectSuspended(res: { statusCode: number; body: string }): void {
  expect(res.statusCode, res.body).toBe(403);
  expect(JSON.parse(res.body)).toMatchObject({ success: false, error: { code: 'DEPLOYMENT_SUSPENDED', message: expect.stringContaining('suspended') } });
}

describe('organization webhooks while the primary deployment is suspended', () => {
  it('the test send is 403 DEPLOYMENT_SUSPENDED: nothing sent, recorded or audited; reading goes on; it sends again once reactivated', async () => {
    const o = await signUpWithOrganization(h, 'ws');
    const hook = await createHook(o);
    await setStatus(o, 'suspended');

    expectSuspended(await testSend(o, hook));
    expect(rx.received).toHaveLength(0);
    expect(await deliveries(hook)).toEqual([]);
    expect(await testAudits(o)).toEqual([]);
    for (const url of [hooksUrl(o.organizationId), `${hooksUrl(o.organizationId)}/${hook}`, `${hooksUrl(o.organizationId)}/${hook}/deliveries`]) {
      expect((await h.request({ method: 'GET', url, headers: bearer(o.accessToken) })).statusCode, url).toBe(200);
    }
    // Another organization's owner still learns nothing: 404 before the suspension is looked at.
    const stranger = await signUpWithOrganization(h, 'ws');
    const foreign = await h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hook}/test`, headers: bearer(stranger.accessToken) });
    expect(foreign.statusCode).toBe(404);

    await setStatus(o, 'active');
    const res = await testSend(o, hook);
    expect(res.statusCode, res.body).toBe(200);
    expect(json<{ data: DeliveryView }>(res).data).toMatchObject({ status: 'delivered' });
    expect(rx.received).toHaveLength(1);
  });

  it('a failed test cannot be re-sent by the manual retry while suspended', async () => {
    const o = await signUpWithOrganization(h, 'ws');
    const hook = await createHook(o);
    rx.script({ status: 500, body: 'down' });
    const failed = json<{ data: DeliveryView }>(await testSend(o, hook)).data;
    expect(failed).toMatchObject({ status: 'failed', attempt_count: 1 });
    await setStatus(o, 'suspended');

    expectSuspended(await retry(o, hook, failed.id));
    expect(await deliveries(hook)).toEqual([{ id: failed.id, status: 'failed', attempt_count: 1 }]);

    await setStatus(o, 'active');
    const res = await retry(o, hook, failed.id);
    expect(res.statusCode, res.body).toBe(200);
    expect(json<{ data: DeliveryView }>(res).data).toMatchObject({ status: 'pending' });
  });
});
