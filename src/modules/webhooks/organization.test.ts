import { type ChildProcess, spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  dbKind,
  type Harness,
  json,
  type SignedInUser,
  signUpAsMember,
  signUpWithOrganization,
  testDatabase,
} from '../../../test/harness.js';
import { type Received, type Receiver, startReceiver } from '../../../test/receiver.js';
import { CLAIM_SQL, LEASE_MS } from '../../../test/webhook-worker-child.js';
import type { WebhookView as OrgWebhookView } from './organization.js';
import { buildApp } from '../../app.js';
import type { Database, Queryable } from '../../db/client.js';
import { WORKERS } from '../../workers/catalog.js';
import { appendEvent, dispatchPending } from '../events/outbox.js';
import { DISABLE_AFTER_MS, deliverDue, MAX_ATTEMPTS } from './organization.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: CRUD and RBAC over HTTP, the
 * outbox fan-out, signed delivery (independent HMAC and the standardwebhooks package), the retry
 * schedule driven by a moved clock, 410 and 5-day disabling with owner mails, manual retry and test
 * send, and exactly-once delivery with concurrent workers and workers that die mid-pass.
 */
let h: Harness;
let rx: Receiver;
/** Organizations made here: their pending deliveries are failed after each test so no test sees another's. */
const orgs = new Set<string>();
const children = new Set<ChildProcess>();

beforeAll(async () => {
  // Real time as the start: Standard Webhooks receivers check the timestamp against their own clock.
  h = await createHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 1000 }, new Date().toISOString());
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
  await h.close();
});
beforeEach(() => {
  h.clock.set(Date.now());
  rx.script({ status: 200, body: 'ok' });
});
afterEach(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  children.clear();
  await h.deps.db.query(
    `UPDATE webhook_deliveries SET status = 'failed', error = 'test cleanup', next_retry_at = NULL
     WHERE status = 'pending' AND organization_id = ANY($1::uuid[])`,
    [[...orgs]],
  );
});

// ---- helpers ----

type Headers = Record<string, string>;
type Owner = SignedInUser & { organizationId: string };

type WebhookView = OrgWebhookView & { secret?: string };

interface DeliveryRow {
  id: string;
  webhook_id: string | null;
  event_id: string | null;
  event_type: string | null;
  status: string;
  status_code: number | null;
  response_body: string | null;
  error: string | null;
  attempt_count: number;
  next_retry_at: Date | null;
  delivered_at: Date | null;
}

interface ErrorBody {
  success: false;
  error: { code: string; message: string };
  details: { timestamp: string; fields?: Array<{ field: string }> };
}

const hooksUrl = (orgId: string) => `/organizations/${orgId}/webhooks`;

async function owner(): Promise<Owner> {
  const o = await signUpWithOrganization(h, 'wh');
  orgs.add(o.organizationId);
  return o;
}

const create = (headers: Headers, orgId: string, payload: Record<string, unknown>) =>
  h.request({ method: 'POST', url: hooksUrl(orgId), headers, payload });

async function createHook(o: Owner, payload: Record<string, unknown> = {}): Promise<WebhookView & { secret: string }> {
  const res = await create(bearer(o.accessToken), o.organizationId, { url: `${rx.url}/hooks`, events: ['api_key.created'], ...payload });
  expect(res.statusCode, res.body).toBe(201);
  return json<{ data: WebhookView & { secret: string } }>(res).data;
}

function expectError(res: { statusCode: number; body: string }, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body).toBe(status);
  const body = JSON.parse(res.body) as ErrorBody;
  expect(body.success).toBe(false);
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe('string');
  expect(typeof body.details.timestamp).toBe('string');
  if (field) expect(body.details.fields?.map((f) => f.field)).toContain(field);
}

/** Append an event the way services do: appendEvent inside the transaction of the change. */
async function emit(orgId: string, data: Record<string, unknown> = { api_key_id: 'k1' }, type = 'api_key.created'): Promise<string> {
  const id = await h.deps.db.transaction((tx) =>
    appendEvent(tx, { organizationId: orgId, deploymentId: null, type, data, dedupeKey: null, at: h.clock.now() }),
  );
  expect(id).not.toBeNull();
  return id!;
}

const deliveriesOf = (webhookId: string) =>
  h.deps.db.query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY created_at, id', [webhookId]);

async function delivery(id: string): Promise<DeliveryRow> {
  const rows = await h.deps.db.query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE id = $1', [id]);
  return rows[0]!;
}

async function hookRow(id: string) {
  const rows = await h.deps.db.query<{ is_active: boolean; disabled_reason: string | null; failing_since: Date | null; secret_encrypted: string }>(
    'SELECT * FROM webhooks WHERE id = $1',
    [id],
  );
  return rows[0]!;
}

const byDelivery = (id: string): Received[] => rx.received.filter((r) => r.headers['x-service-delivery'] === id);

/** Run worker passes until nothing is due at the current clock (bounded). */
async function drain(deps = h.deps): Promise<void> {
  for (let pass = 0; pass < 50; pass++) if ((await deliverDue(deps, 20)) === 0) return;
  throw new Error('deliverDue kept finding due rows');
}

/** Poll until `probe` holds; bounded so a lost row fails the test instead of hanging it. */
async function eventually(probe: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('condition not met in time');
}

async function login(u: SignedInUser): Promise<Headers> {
  const res = await h.request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password } });
  expect(res.statusCode, res.body).toBe(200);
  return bearer(json<{ data: { access_token: string } }>(res).data.access_token);
}

function headerSet(r: Received): Record<string, string> {
  return {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  };
}

/** x-service-signature (docs/webhooks.md, Verifying a delivery): the rule written naively, keyed with the secret string exactly as shown. */
const naiveSignature = (secret: string, body: Buffer) => createHmac('sha256', secret).update(body).digest('hex');
/** The Standard Webhooks key (docs/webhooks.md, Verifying a delivery): the decoded remainder of a whsec_ secret, else the secret's UTF-8 bytes. */
const standardKeyOf = (secret: string) => (secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8'));

const worker = (name: string) => WORKERS.find((w) => w.name === name)!;

// ---- 1. CRUD, validation, RBAC, audit ----

describe('webhook configuration over HTTP', () => {
  it('an owner creates, lists, reads, changes and deletes webhooks; the secret is shown once and stored encrypted', async () => {
    const o = await owner();
    const auth = bearer(o.accessToken);
    const res = await create(auth, o.organizationId, { url: `${rx.url}/a`, events: ['api_key.created', 'api_key.revoked'] });
    expect(res.statusCode, res.body).toBe(201);
    const body = json<{ success: boolean; message: string; data: WebhookView & { secret: string } }>(res);
    expect(body.success).toBe(true);
    expect(body.data).toMatchObject({
      organization_id: o.organizationId,
      url: `${rx.url}/a`,
      events: ['api_key.created', 'api_key.revoked'],
      is_active: true,
      disabled_reason: null,
    });
    // Generated: whsec_ + base64 of 32 random bytes.
    const generated = body.data.secret;
    expect(generated).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(generated.slice(6), 'base64')).toHaveLength(32);
    const other = await createHook(o, { url: `${rx.url}/b` });
    expect(other.secret).not.toBe(generated);

    // A sent secret of 24..256 characters is kept as sent.
    const custom = 'my-own-signing-secret-0123456789';
    const sent = await createHook(o, { url: `${rx.url}/c`, secret: custom, is_active: false });
    expect(sent).toMatchObject({ secret: custom, is_active: false });
    expect((await createHook(o, { secret: 'x'.repeat(24) })).secret).toBe('x'.repeat(24));
    expect((await createHook(o, { secret: 'y'.repeat(256) })).secret).toBe('y'.repeat(256));

    // List and read never carry the secret.
    const list = await h.request({ method: 'GET', url: hooksUrl(o.organizationId), headers: auth });
    expect(list.statusCode).toBe(200);
    const listed = json<{ success: boolean; data: WebhookView[] }>(list);
    expect(listed.success).toBe(true);
    expect(listed.data.map((w) => w.id)).toEqual(expect.arrayContaining([body.data.id, other.id, sent.id]));
    expect(listed.data).toHaveLength(5);
    for (const w of listed.data) expect(Object.keys(w)).not.toContain('secret');
    expect(list.body).not.toContain(generated.slice(6));
    expect(list.body).not.toContain(custom);
    const read = await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${body.data.id}`, headers: auth });
    expect(read.statusCode).toBe(200);
    const { secret: _shownOnce, ...view } = body.data;
    expect(json<{ data: WebhookView }>(read).data).toEqual(view);
    expect(read.body).not.toContain(generated.slice(6));

    // At rest: encrypted, the plain secret (or its key material) appears nowhere in the row.
    for (const [id, secret] of [
      [body.data.id, generated],
      [sent.id, custom],
    ] as const) {
      const rows = await h.deps.db.query<Record<string, unknown>>('SELECT * FROM webhooks WHERE id = $1', [id]);
      const stored = rows[0]!.secret_encrypted as string;
      expect(stored.startsWith('v1:')).toBe(true);
      expect(stored).not.toContain(secret);
      expect(JSON.stringify(rows[0])).not.toContain(secret.replace(/^whsec_/, ''));
    }

    // PATCH url, events, is_active.
    const patched = await h.request({
      method: 'PATCH',
      url: `${hooksUrl(o.organizationId)}/${body.data.id}`,
      headers: auth,
      payload: { url: `${rx.url}/moved`, events: ['subscription.updated'], is_active: false },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(json<{ data: WebhookView }>(patched).data).toMatchObject({
      id: body.data.id,
      url: `${rx.url}/moved`,
      events: ['subscription.updated'],
      is_active: false,
    });
    expect(Object.keys(json<{ data: WebhookView }>(patched).data)).not.toContain('secret');
    const again = await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${body.data.id}`, headers: auth });
    expect(json<{ data: WebhookView }>(again).data).toMatchObject({ url: `${rx.url}/moved`, events: ['subscription.updated'], is_active: false });
    // A partial PATCH leaves the rest alone.
    const partial = await h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${body.data.id}`, headers: auth, payload: { is_active: true } });
    expect(json<{ data: WebhookView }>(partial).data).toMatchObject({ url: `${rx.url}/moved`, events: ['subscription.updated'], is_active: true });

    // DELETE.
    const deleted = await h.request({ method: 'DELETE', url: `${hooksUrl(o.organizationId)}/${body.data.id}`, headers: auth });
    expect(deleted.statusCode).toBe(200);
    expect(json<{ data: WebhookView }>(deleted).data.id).toBe(body.data.id);
    expectError(await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${body.data.id}`, headers: auth }), 404, 'NOT_FOUND');
    expectError(await h.request({ method: 'DELETE', url: `${hooksUrl(o.organizationId)}/${body.data.id}`, headers: auth }), 404, 'NOT_FOUND');
    const after = json<{ data: WebhookView[] }>(await h.request({ method: 'GET', url: hooksUrl(o.organizationId), headers: auth }));
    expect(after.data.map((w) => w.id)).not.toContain(body.data.id);

    // Audit: create, update (twice), delete, by the owner; no secret in the metadata.
    const audit = await h.deps.db.query<{ action: string; user_id: string | null; organization_id: string; metadata: unknown }>(
      `SELECT action, user_id, organization_id, metadata FROM audit_logs WHERE resource_type = 'webhook' AND resource_id = $1`,
      [body.data.id],
    );
    expect(audit.map((a) => a.action).sort()).toEqual(['create', 'delete', 'update', 'update']);
    for (const a of audit) expect(a).toMatchObject({ user_id: o.userId, organization_id: o.organizationId });
    expect(JSON.stringify(audit)).not.toContain(generated.slice(6));
    const createdAudit = await h.deps.db.query<{ action: string }>(
      `SELECT action FROM audit_logs WHERE resource_type = 'webhook' AND resource_id = $1`,
      [sent.id],
    );
    expect(createdAudit.map((a) => a.action)).toEqual(['create']);
  });

  it('rejects bad input with the 400 VALIDATION_ERROR envelope and creates nothing', async () => {
    const o = await owner();
    const auth = bearer(o.accessToken);
    const url = `${rx.url}/hooks`;
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ url, events: ['nope.happened'] }, 'events'],
      [{ url, events: [] }, 'events'],
      [{ url, events: ['api_key.created', 'api_key.created'] }, 'events'],
      [{ url }, 'events'],
      [{ events: ['api_key.created'] }, 'url'],
      [{ url, events: ['api_key.created'], secret: 'x'.repeat(23) }, 'secret'],
      [{ url, events: ['api_key.created'], secret: 'x'.repeat(257) }, 'secret'],
      [{ url, events: ['api_key.created'], colour: 'red' }, 'colour'],
      [{ url: 'not a url', events: ['api_key.created'] }, 'url'],
    ];
    for (const [payload, field] of cases) {
      const res = await create(auth, o.organizationId, payload);
      expectError(res, 400, 'VALIDATION_ERROR');
      const fields = (JSON.parse(res.body) as ErrorBody).details.fields?.map((f) => f.field) ?? [];
      expect(fields.some((f) => f === field || f.startsWith(`${field}.`)), `${JSON.stringify(payload)} → ${res.body}`).toBe(true);
    }
    expectError(await create(auth, 'not-a-uuid', { url, events: ['api_key.created'] }), 404, 'NOT_FOUND'); // docs/input.md: a path id that is not a UUID
    expect(await h.deps.db.query('SELECT 1 FROM webhooks WHERE organization_id = $1', [o.organizationId])).toHaveLength(0);

    const hook = await createHook(o);
    const patch = (payload: Record<string, unknown>) =>
      h.request({ method: 'PATCH', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: auth, payload });
    expectError(await patch({ events: ['nope.happened'] }), 400, 'VALIDATION_ERROR');
    expectError(await patch({ events: [] }), 400, 'VALIDATION_ERROR', 'events');
    expectError(await patch({ secret: 'a-new-secret-that-is-long-enough' }), 400, 'VALIDATION_ERROR', 'secret');
    expectError(await patch({ is_active: 'yes' }), 400, 'VALIDATION_ERROR', 'is_active');
    expect(json<{ data: WebhookView }>(await h.request({ method: 'GET', url: `${hooksUrl(o.organizationId)}/${hook.id}`, headers: auth })).data).toMatchObject({
      events: ['api_key.created'],
      is_active: true,
    });
  });

  it('only owners, admins and admin-scoped keys manage; members read; viewers and others do not', async () => {
    const o = await owner();
    const hook = await createHook(o);
    const one = `${hooksUrl(o.organizationId)}/${hook.id}`;
    const payload = { url: `${rx.url}/x`, events: ['api_key.created'] };
    const [admin, member, viewer] = await Promise.all([
      signUpAsMember(h, o.organizationId, 'admin'),
      signUpAsMember(h, o.organizationId, 'member'),
      signUpAsMember(h, o.organizationId, 'viewer'),
    ]);
    const stranger = await owner();

    // admin: full management.
    expect((await create(bearer(admin.accessToken), o.organizationId, payload)).statusCode).toBe(201);
    // member: reads (webhooks.read), cannot manage.
    expectError(await create(bearer(member.accessToken), o.organizationId, payload), 403, 'FORBIDDEN');
    expect((await h.request({ method: 'GET', url: hooksUrl(o.organizationId), headers: bearer(member.accessToken) })).statusCode).toBe(200);
    expectError(await h.request({ method: 'PATCH', url: one, headers: bearer(member.accessToken), payload: { is_active: false } }), 403, 'FORBIDDEN');
    expectError(await h.request({ method: 'DELETE', url: one, headers: bearer(member.accessToken) }), 403, 'FORBIDDEN');
    expectError(await h.request({ method: 'POST', url: `${one}/test`, headers: bearer(member.accessToken) }), 403, 'FORBIDDEN');
    // viewer: neither.
    expectError(await create(bearer(viewer.accessToken), o.organizationId, payload), 403, 'FORBIDDEN');
    expectError(await h.request({ method: 'GET', url: hooksUrl(o.organizationId), headers: bearer(viewer.accessToken) }), 403, 'FORBIDDEN');
    // A user of another organization: not found, whatever the route.
    expectError(await create(bearer(stranger.accessToken), o.organizationId, payload), 404, 'NOT_FOUND');
    expectError(await h.request({ method: 'GET', url: hooksUrl(o.organizationId), headers: bearer(stranger.accessToken) }), 404, 'NOT_FOUND');
    expectError(await h.request({ method: 'GET', url: one, headers: bearer(stranger.accessToken) }), 404, 'NOT_FOUND');
    expectError(await h.request({ method: 'DELETE', url: one, headers: bearer(stranger.accessToken) }), 404, 'NOT_FOUND');
    // …and another organization's webhook id under the stranger's own organization is not found either.
    expectError(
      await h.request({ method: 'GET', url: `${hooksUrl(stranger.organizationId)}/${hook.id}`, headers: bearer(stranger.accessToken) }),
      404,
      'NOT_FOUND',
    );
    // No credentials.
    expectError(await h.request({ method: 'GET', url: hooksUrl(o.organizationId) }), 401, 'UNAUTHORIZED');

    // API keys: scope admin manages; read+write reads only.
    const adminKey = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write', 'admin'] });
    const rwKey = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write'] });
    const byKey = await create({ 'x-api-key': adminKey.key }, o.organizationId, payload);
    expect(byKey.statusCode, byKey.body).toBe(201);
    expect((await create(bearer(adminKey.key), o.organizationId, payload)).statusCode).toBe(201);
    expect((await h.request({ method: 'DELETE', url: `${hooksUrl(o.organizationId)}/${json<{ data: WebhookView }>(byKey).data.id}`, headers: { 'x-api-key': adminKey.key } })).statusCode).toBe(200);
    expectError(await create({ 'x-api-key': rwKey.key }, o.organizationId, payload), 403, 'FORBIDDEN');
    expectError(await h.request({ method: 'PATCH', url: one, headers: { 'x-api-key': rwKey.key }, payload: { is_active: false } }), 403, 'FORBIDDEN');
    expect((await h.request({ method: 'GET', url: hooksUrl(o.organizationId), headers: { 'x-api-key': rwKey.key } })).statusCode).toBe(200);
    // A key of another organization: not found.
    const strangerKey = await createKeyOverHttp(h, bearer(stranger.accessToken), stranger.organizationId, { scopes: ['read', 'write', 'admin'] });
    expectError(await create({ 'x-api-key': strangerKey.key }, o.organizationId, payload), 404, 'NOT_FOUND');

    expect(json<{ data: WebhookView }>(await h.request({ method: 'GET', url: one, headers: bearer(o.accessToken) })).data.is_active).toBe(true);
  });
});

// ---- 2. Outbox fan-out and a signed delivery ----

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
      expect(r.path).toBe(new URL(hook.url).pathname);
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
    // As the one-statement deduction writes quota.threshold: the event row only.
    const [ev] = await h.deps.db.query<{ id: string }>(
      `INSERT INTO outbox_events (organization_id, type, data, created_at) VALUES ($1, 'quota.threshold', $2, $3) RETURNING id`,
      [o.organizationId, JSON.stringify({ threshold: 80 }), h.clock.now()],
    );
    expect(await deliveriesOf(hook.id)).toHaveLength(0);
    expect(await dispatchPending(h.deps.db, h.clock.now(), 100)).toBeGreaterThanOrEqual(1);
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

// ---- 3. Retry schedule ----

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

// ---- 4. Disabling ----

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

// ---- 5. Manual retry and test send ----

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
    const first = deliverDue(h.deps, 20);
    await eventually(() => rx.received.length >= 1, 5_000);
    const retried = await h.request({ method: 'POST', url: `${hooksUrl(o.organizationId)}/${hook.id}/deliveries/${id}/retry`, headers: bearer(o.accessToken) });
    expect(retried.statusCode, retried.body).toBe(409);
    const second = deliverDue(h.deps, 20);
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
    const base = await testDatabase();
    let workerPass: Promise<number> | null = null;
    const racing = new Proxy(base, {
      get(target, prop) {
        if (prop === 'transaction') {
          // The test row and its audit row commit in one transaction; the worker's pass starts right after.
          return async (fn: (tx: Queryable) => Promise<unknown>) => {
            const result = await target.transaction(fn);
            if (workerPass === null && (result as { event_type?: unknown } | null)?.event_type === 'webhook.test') {
              workerPass = deliverDue(h.deps, 20);
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

// ---- 6. Concurrency and durability ----

describe('exactly once with concurrent and dying workers', () => {
  async function twentyEvents(): Promise<{ o: Owner; hook: WebhookView; ids: string[] }> {
    const o = await owner();
    const hook = await createHook(o);
    for (let i = 0; i < 20; i++) await emit(o.organizationId, { i });
    const ids = (await deliveriesOf(hook.id)).map((d) => d.id);
    expect(ids).toHaveLength(20);
    return { o, hook, ids };
  }

  function expectEachOnce(ids: string[]): void {
    const counts = new Map<string, number>();
    for (const r of rx.received) {
      const id = String(r.headers['x-service-delivery']);
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const id of ids) expect(counts.get(id) ?? 0, id).toBe(1);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
  }

  async function allDelivered(ids: string[]): Promise<void> {
    const rows = await h.deps.db.query<{ status: string; attempt_count: number }>(
      'SELECT status, attempt_count FROM webhook_deliveries WHERE id = ANY($1::uuid[])',
      [ids],
    );
    expect(rows).toHaveLength(ids.length);
    for (const r of rows) expect(r).toEqual({ status: 'delivered', attempt_count: 1 });
  }

  describe('two instances on one database', () => {
    let b: FastifyInstance;
    beforeAll(async () => {
      b = await buildApp({ config: h.config, db: await testDatabase(), clock: h.clock });
      await b.ready();
    });
    afterAll(async () => {
      await b.close();
    });

    it('concurrent passes on two instances deliver each of 20 events exactly once', async () => {
      const { ids } = await twentyEvents();
      // Slow answers keep several requests in flight while the other worker claims.
      rx.script({ status: 200, delayMs: 20 });
      for (let round = 0; ; round++) {
        expect(round).toBeLessThan(30);
        const handled = await Promise.all([deliverDue(h.deps, 3), deliverDue(b.deps, 3), deliverDue(h.deps, 3), deliverDue(b.deps, 3)]);
        if (handled.every((n) => n === 0)) break;
      }
      expect(rx.received).toHaveLength(20);
      expectEachOnce(ids);
      await allDelivered(ids);
    });
  });

  it('rows claimed by a worker that died are leased for 60 s, then delivered once by another', async () => {
    const { ids } = await twentyEvents();
    const now = h.clock.now();
    // The dead worker's pass: the claim statement of deliverDue, and then nothing.
    const claimed = await h.deps.db.query<{ id: string }>(CLAIM_SQL, [now, 20, new Date(now.getTime() + LEASE_MS)]);
    expect(claimed.map((r) => r.id)).toEqual(expect.arrayContaining(ids));
    await drain();
    expect(rx.received).toHaveLength(0);
    h.clock.advance(LEASE_MS - 1_000);
    await drain();
    expect(rx.received).toHaveLength(0);
    h.clock.advance(2_000);
    await drain();
    expect(rx.received).toHaveLength(20);
    expectEachOnce(ids);
    await allDelivered(ids);
    h.clock.advance(LEASE_MS * 10);
    await drain();
    expect(rx.received).toHaveLength(20);
  });

  it('a worker whose attempt times out records the failure and retries later; the receiver sees the same delivery id', async () => {
    const o = await owner();
    const hook = await createHook(o);
    rx.script({ status: 200, delayMs: 3_000 }, { status: 200 });
    await emit(o.organizationId);
    const id = (await deliveriesOf(hook.id))[0]!.id;
    await drain();
    expect(await delivery(id)).toMatchObject({ status: 'pending', attempt_count: 1, status_code: null });
    expect((await delivery(id)).error).toMatch(/timed out/i);
    h.clock.advance(40_000);
    await drain();
    expect(await delivery(id)).toMatchObject({ status: 'delivered', attempt_count: 2 });
    expect(byDelivery(id)).toHaveLength(2);
  });

  describe.runIf(dbKind === 'postgres')('a worker process killed mid-pass (PostgreSQL)', () => {
    const child = fileURLToPath(new URL('../../../test/webhook-worker-child.ts', import.meta.url));
    const root = fileURLToPath(new URL('../../../', import.meta.url));

    async function spawnWorker(mode: 'lease' | 'lock'): Promise<{ proc: ChildProcess; claimed: string[] }> {
      const proc = spawn(process.execPath, ['--import', 'tsx', child, inject('postgresUrl'), h.clock.now().toISOString(), '100', mode], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.add(proc);
      const claimed = await new Promise<string[]>((resolve, reject) => {
        let out = '';
        let err = '';
        const timer = setTimeout(() => reject(new Error(`the worker process did not claim in time: ${err}`)), 20_000);
        proc.stdout!.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const nl = out.indexOf('\n');
          if (nl >= 0) {
            clearTimeout(timer);
            resolve((JSON.parse(out.slice(0, nl)) as { claimed: string[] }).claimed);
          }
        });
        proc.stderr!.on('data', (chunk: Buffer) => {
          err += chunk.toString();
        });
        proc.once('exit', (code, signal) => {
          clearTimeout(timer);
          reject(new Error(`the worker process exited (${code ?? signal}) before claiming: ${err}`));
        });
      });
      return { proc, claimed };
    }

    async function killHard(proc: ChildProcess): Promise<void> {
      const exited = new Promise<NodeJS.Signals | null>((resolve) => proc.once('exit', (_code, signal) => resolve(signal)));
      expect(proc.kill('SIGKILL')).toBe(true);
      const signal = await Promise.race([exited, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
      expect(signal).toBe('SIGKILL');
    }

    it('claimed and committed (leased): after SIGKILL and the lease, the test process delivers each once', async () => {
      const { ids } = await twentyEvents();
      const { proc, claimed } = await spawnWorker('lease');
      expect(claimed).toEqual(expect.arrayContaining(ids));
      await killHard(proc);
      await drain();
      expect(rx.received).toHaveLength(0);
      h.clock.advance(LEASE_MS + 1_000);
      await drain();
      expect(rx.received).toHaveLength(20);
      expectEachOnce(ids);
      await allDelivered(ids);
    });

    it('claimed inside an open transaction: other workers skip the locked rows; SIGKILL releases them at once', async () => {
      const { ids } = await twentyEvents();
      const { proc, claimed } = await spawnWorker('lock');
      expect(claimed).toEqual(expect.arrayContaining(ids));
      // SKIP LOCKED: while the process lives, our worker passes over its rows.
      await drain();
      expect(rx.received).toHaveLength(0);
      await killHard(proc);
      // The server rolls the dead connection's transaction back: due again without moving the clock.
      await eventually(async () => {
        await deliverDue(h.deps, 20);
        return rx.received.length >= 20;
      });
      await drain();
      expect(rx.received).toHaveLength(20);
      expectEachOnce(ids);
      await allDelivered(ids);
    });
  });
});
