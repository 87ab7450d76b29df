import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, json, type Tenant } from '../../../test/harness.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';

/**
 * A suspended deployment may read (quotas, entitlements) but not spend or send (docs/decisions.md,
 * Suspended deployments). A security review found the webhook proxy delivering and charging for one.
 */
let h: Harness;
let rx: Receiver;
beforeAll(async () => {
  h = await createHarness({ webhookAllowPrivateNetworks: true });
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});

const creds = (t: Tenant) => ({ 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret });
const send = (t: Tenant) =>
  h.request({ method: 'POST', url: '/api/v1/proxy/webhooks/send', headers: creds(t), payload: { url: `${rx.url}/hook`, payload: { n: 1 } } });
const setStatus = async (t: Tenant, status: 'active' | 'suspended') => {
  const res = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h), payload: { status } });
  expect(res.statusCode).toBe(200);
};
const balance = (t: Tenant) =>
  h.deps.db.query('SELECT monthly_used, purchased_balance, reserved FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);

describe('a suspended deployment', () => {
  it('cannot send through the webhook proxy: 403 DEPLOYMENT_SUSPENDED, nothing delivered, charged or recorded', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    await setStatus(t, 'suspended');
    const before = await balance(t);
    rx.script({ status: 200 });
    const res = await send(t);
    expect(res.statusCode).toBe(403);
    expect(json(res)).toEqual({ error: 'deployment_suspended', code: 'DEPLOYMENT_SUSPENDED', message: expect.any(String) });
    expect(rx.received).toHaveLength(0);
    expect(await balance(t)).toEqual(before);
    expect(await h.deps.db.query('SELECT id FROM usage_records WHERE deployment_id = $1', [t.deploymentId])).toEqual([]);
    expect(await h.deps.db.query('SELECT id FROM webhook_deliveries WHERE deployment_id = $1', [t.deploymentId])).toEqual([]);
  });

  it('still reads its quotas and entitlements; sends again once reactivated', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    await setStatus(t, 'suspended');
    for (const url of ['/api/v1/proxy/webhooks/quota', '/api/v1/ai/quota']) {
      const res = await h.request({ method: 'GET', url, headers: creds(t) });
      expect(res.statusCode, url).toBe(200);
    }
    const check = await h.request({
      method: 'POST',
      url: '/api/v1/entitlements/check',
      payload: { deployment_id: t.deploymentId, deployment_secret: t.deploymentSecret },
    });
    expect(check.statusCode).toBe(200);

    await setStatus(t, 'active');
    rx.script({ status: 200 });
    const res = await send(t);
    expect(res.statusCode).toBe(200);
    expect(json(res)).toMatchObject({ success: true, creditsUsed: 1 });
    expect(rx.received).toHaveLength(1);
  });
});
