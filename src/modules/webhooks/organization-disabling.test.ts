import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, type Harness, json, signUpAsMember } from '../../../test/harness.js';
import { hooksUrl, startWebhookHarness, type WebhookView, webhookFixtures } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { DISABLE_AFTER_MS } from './organization.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: 410 and 5-day disabling with owner mails.
 * Shared helpers: test/organization-webhook-fixtures.ts.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { owner, createHook, emit, deliveriesOf, delivery, hookRow, byDelivery, drain, login } = fx;

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

describe('disabling', () => {
  it('410 Gone disables the webhook at once; later events skip it until it is enabled again', async () => {
    const o = await owner();
    const hook = await createHook(o);
    rx.script({ status: 410, body: 'gone' });
    await emit(o.organizationId, { n: 1 });
    await emit(o.organizationId, { n: 2 });
    await drain();
    // One request: the first answer disabled the webhook, the other delivery is not sent.
    expect(rx.received).toHaveLength(1);
    const rows = await deliveriesOf(hook.id);
    expect(rows.map((r) => r.status)).toEqual(['failed', 'failed']);
    const sent = rows.find((r) => r.id === rx.received[0]!.headers['x-service-delivery'])!;
    expect(sent).toMatchObject({ attempt_count: 1, status_code: 410, next_retry_at: null });
    expect(rows.find((r) => r.id !== sent.id)).toMatchObject({ attempt_count: 0, next_retry_at: null });

    const view = json<{ data: WebhookView }>(await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: bearer(o.accessToken) })).data;
    expect(view.is_active).toBe(false);
    expect(view.disabled_reason).toMatch(/410/);
    // The owner is told, as for any disabling.
    const mails = await h.deps.db.query<{ to: string; body: string }>(
      `SELECT "to", body FROM email_outbox WHERE organization_id = $1 AND template = 'webhook_disabled'`,
      [o.organizationId],
    );
    expect(mails.map((m) => m.to)).toEqual([o.email]);
    expect(mails[0]!.body).toContain('410');

    await emit(o.organizationId, { n: 3 });
    expect(await deliveriesOf(hook.id)).toHaveLength(2);
    h.clock.advance(3_600_000);
    await drain();
    expect(rx.received).toHaveLength(1);

    // Enabling clears the reason; events flow again.
    const enabled = await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: await login(o), payload: { is_active: true } });
    expect(enabled.statusCode, enabled.body).toBe(200);
    expect(json<{ data: WebhookView }>(enabled).data).toMatchObject({ is_active: true, disabled_reason: null });
    rx.script({ status: 200 });
    await emit(o.organizationId, { n: 4 });
    await drain();
    expect(rx.received).toHaveLength(1);
    expect(JSON.parse(rx.received[0]!.body.toString()).data).toEqual({ n: 4 });
    expect((await deliveriesOf(hook.id)).filter((r) => r.status === 'delivered')).toHaveLength(1);
  });

  it('five days of failure disable the webhook and mail each owner (and nobody else)', async () => {
    const o = await owner();
    const secondOwner = await signUpAsMember(h, o.organizationId, 'owner');
    const admin = await signUpAsMember(h, o.organizationId, 'admin');
    const hook = await createHook(o);
    rx.script({ status: 500 });
    const t0 = h.clock.now();
    await emit(o.organizationId);
    await drain();
    const id = (await deliveriesOf(hook.id))[0]!.id;
    expect((await hookRow(hook.id)).failing_since!.getTime()).toBe(t0.getTime());
    expect((await hookRow(hook.id)).is_active).toBe(true);

    // Just under five days later, still failing: still active.
    h.clock.set(t0.getTime() + DISABLE_AFTER_MS - 60_000);
    await drain();
    expect(byDelivery(id)).toHaveLength(2);
    expect((await hookRow(hook.id)).is_active).toBe(true);
    const mailsBefore = await h.deps.db.query('SELECT 1 FROM email_outbox WHERE organization_id = $1 AND template = $2', [o.organizationId, 'webhook_disabled']);
    expect(mailsBefore).toHaveLength(0);

    // Past five days (and past the 2-min retry), another failure: disabled.
    h.clock.set(t0.getTime() + DISABLE_AFTER_MS + 5 * 60_000);
    await drain();
    expect(byDelivery(id)).toHaveLength(3);
    const row = await hookRow(hook.id);
    expect(row.is_active).toBe(false);
    expect(row.disabled_reason).toMatch(/5 days/);
    expect(await delivery(id)).toMatchObject({ status: 'failed', attempt_count: 3, next_retry_at: null });

    const mails = await h.deps.db.query<{ to: string; subject: string; body: string; template: string }>(
      `SELECT "to", subject, body, template FROM email_outbox WHERE organization_id = $1 AND template = 'webhook_disabled'`,
      [o.organizationId],
    );
    expect(mails.map((m) => m.to).sort()).toEqual([o.email, secondOwner.email].sort());
    expect(mails.map((m) => m.to)).not.toContain(admin.email);
    for (const m of mails) {
      expect(m.subject).toMatch(/disabled/i);
      expect(m.body).toContain(hook.url);
      expect(m.body).toContain('5 days');
    }
    // Nothing more is sent and no second mail is written.
    h.clock.advance(3_600_000);
    await emit(o.organizationId);
    await drain();
    expect(rx.received.filter((r) => r.path === '/hooks')).toHaveLength(3);
    expect(await h.deps.db.query('SELECT 1 FROM email_outbox WHERE organization_id = $1 AND template = $2', [o.organizationId, 'webhook_disabled'])).toHaveLength(2);

    // Enabling again (a fresh sign-in: the clock moved days) clears the reason and the failing streak.
    const enabled = await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: await login(o), payload: { is_active: true } });
    expect(enabled.statusCode, enabled.body).toBe(200);
    expect(json<{ data: WebhookView }>(enabled).data).toMatchObject({ is_active: true, disabled_reason: null });
    expect(await hookRow(hook.id)).toMatchObject({ is_active: true, disabled_reason: null, failing_since: null });
  });

  it('a success ends the failing streak: failures five days apart with a success between do not disable', async () => {
    const o = await owner();
    const hook = await createHook(o);
    const t0 = h.clock.now().getTime();
    rx.script({ status: 500 });
    await emit(o.organizationId, { n: 1 });
    await drain();
    expect((await hookRow(hook.id)).failing_since).not.toBeNull();
    h.clock.advance(60_000);
    rx.script({ status: 200 });
    // The retry of n:1 is due too; both succeed.
    await emit(o.organizationId, { n: 2 });
    await drain();
    expect((await hookRow(hook.id)).failing_since).toBeNull();
    h.clock.set(t0 + DISABLE_AFTER_MS + 60_000);
    rx.script({ status: 500 });
    await emit(o.organizationId, { n: 3 });
    await drain();
    const row = await hookRow(hook.id);
    expect(row.is_active).toBe(true);
    expect(row.failing_since!.getTime()).toBe(h.clock.now().getTime());
  });
});
