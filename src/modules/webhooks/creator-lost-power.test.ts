import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, type Harness, signUpAsMember } from '../../../test/harness.js';
import { eventually, hooksUrl, startWebhookHarness, webhookFixtures, worker } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';

/**
 * A member who no longer manages webhooks holds none (docs/accounts.md, Powers), as the attack a
 * security review found: an admin pointed a webhook at their own receiver, was removed (their keys
 * revoked), and went on getting the organization's events.
 */
let h: Harness;
let rx: Receiver;
const f = webhookFixtures(
  () => h,
  () => rx,
);
beforeAll(async () => {
  h = await startWebhookHarness();
  rx = await startReceiver();
});
afterAll(async () => {
  await rx?.close();
  await h?.close();
});
beforeEach(() => f.resetEach());
afterEach(() => f.cleanUpEach());

const webhookRow = async (id: string) =>
  (await h.deps.db.query<{ is_active: boolean; disabled_reason: string | null }>('SELECT is_active, disabled_reason FROM webhooks WHERE id = $1', [id]))[0];

describe('webhooks of a member who lost the power to manage them', () => {
  it('a removed admin’s webhook is turned off (audited, owners mailed) and gets none of the events after; another admin’s stays on', async () => {
    const o = await f.owner();
    const leaving = await signUpAsMember(h, o.organizationId, 'admin');
    const staying = await signUpAsMember(h, o.organizationId, 'admin');
    const make = async (accessToken: string, path: string) => {
      const res = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(accessToken), payload: { url: `${rx.url}${path}`, events: ['api_key.created'] } });
      expect(res.statusCode, res.body).toBe(201);
      return (res.json() as { data: { id: string } }).data.id;
    };
    const theirs = await make(leaving.accessToken, '/exfil');
    const kept = await make(staying.accessToken, '/kept');

    const removed = await h.request({ method: 'DELETE', url: `/organizations/${o.organizationId}/users/${leaving.userId}`, headers: bearer(o.accessToken) });
    expect(removed.statusCode, removed.body).toBe(200);
    expect(await webhookRow(theirs)).toEqual({ is_active: false, disabled_reason: 'its creator no longer manages webhooks in this organization' });
    expect(await webhookRow(kept)).toMatchObject({ is_active: true });
    const audit = await h.deps.db.query<{ action: string; metadata: Record<string, unknown> }>(
      "SELECT action, metadata FROM audit_logs WHERE resource_type = 'webhook' AND resource_id = $1 AND action = 'disable'",
      [theirs],
    );
    expect(audit).toEqual([{ action: 'disable', metadata: expect.objectContaining({ reason: 'creator_lost_power', created_by: leaving.userId }) }]);
    const mails = await h.deps.db.query<{ to: string }>(
      `SELECT "to" FROM email_outbox WHERE organization_id = $1 AND template = 'webhook_disabled'`,
      [o.organizationId],
    );
    expect(mails.map((m) => m.to)).toEqual([o.email]);

    rx.script({ status: 200, body: 'ok' });
    await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { name: 'prod-billing-key', scopes: ['read'] });
    // The workers claim every organization's due rows, and on PGlite other files' rows share the
    // database: run passes until the kept webhook got its event (bounded), not a fixed one pass each.
    await eventually(async () => {
      await worker('event-dispatch').run(h.deps);
      await worker('webhook-delivery').run(h.deps);
      return rx.received.some((r) => r.path === '/kept');
    });
    expect(rx.received.filter((r) => r.path === '/exfil')).toEqual([]);
    expect(await f.deliveriesOf(theirs)).toEqual([]);
  });

  it('a removal that commits while the admin creates a webhook leaves them none: refused, or taken back with the removal', async () => {
    const o = await f.owner();
    const admin = await signUpAsMember(h, o.organizationId, 'admin');
    const db = h.deps.db;
    const original = db.transaction.bind(db);
    let removal: { statusCode: number } | undefined;
    // The owner's removal of the admin commits after the admin's request was authorized, before its transaction.
    db.transaction = (async (fn: Parameters<typeof original>[0], options?: Parameters<typeof original>[1]) => {
      db.transaction = original;
      removal = await h.request({ method: 'DELETE', url: `/organizations/${o.organizationId}/users/${admin.userId}`, headers: bearer(o.accessToken) });
      return original(fn, options);
    }) as typeof db.transaction;
    let created: { statusCode: number; body: string };
    try {
      created = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(admin.accessToken), payload: { url: `${rx.url}/late`, events: ['api_key.created'] } });
    } finally {
      db.transaction = original;
    }
    expect(removal?.statusCode).toBe(200);
    expect(created.statusCode, created.body).toBe(403);
    expect(await h.deps.db.query('SELECT 1 FROM webhooks WHERE organization_id = $1 AND is_active', [o.organizationId])).toEqual([]);
  });

  it('a webhook made through an admin’s API key is theirs: their removal turns it off too', async () => {
    const o = await f.owner();
    const admin = await signUpAsMember(h, o.organizationId, 'admin');
    const key = await createKeyOverHttp(h, bearer(admin.accessToken), o.organizationId, { name: 'admin-key', scopes: ['read', 'write', 'admin'] });
    const res = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(key.key), payload: { url: `${rx.url}/by-key`, events: ['api_key.created'] } });
    expect(res.statusCode, res.body).toBe(201);
    const id = (res.json() as { data: { id: string } }).data.id;
    const [row] = await h.deps.db.query<{ created_by: string | null }>('SELECT created_by FROM webhooks WHERE id = $1', [id]);
    expect(row!.created_by).toBe(admin.userId);
    const removed = await h.request({ method: 'DELETE', url: `/organizations/${o.organizationId}/users/${admin.userId}`, headers: bearer(o.accessToken) });
    expect(removed.statusCode, removed.body).toBe(200);
    expect(await webhookRow(id)).toMatchObject({ is_active: false });
  });

  it('an admin demoted to member, or denied webhooks.manage, has their webhooks turned off too', async () => {
    const o = await f.owner();
    for (const change of [{ role: 'member' }, { permissions: { 'webhooks.manage': false } }]) {
      const admin = await signUpAsMember(h, o.organizationId, 'admin');
      const res = await h.request({ method: 'POST', url: hooksUrl(o.organizationId), headers: bearer(admin.accessToken), payload: { url: `${rx.url}/x`, events: ['api_key.created'] } });
      expect(res.statusCode, res.body).toBe(201);
      const id = (res.json() as { data: { id: string } }).data.id;
      const changed = await h.request({ method: 'PUT', url: `/organizations/${o.organizationId}/users/${admin.userId}`, headers: bearer(o.accessToken), payload: change });
      expect(changed.statusCode, changed.body).toBe(200);
      expect(await webhookRow(id), JSON.stringify(change)).toMatchObject({ is_active: false });
    }
  });
});
