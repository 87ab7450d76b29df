import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { bearer, createKeyOverHttp, type Harness, json, signUpAsMember } from '../../../test/harness.js';
import { type ErrorBody, expectError, hooksUrl, startWebhookHarness, type WebhookView, webhookFixtures } from '../../../test/organization-webhook-fixtures.js';
import { type Receiver, startReceiver } from '../../../test/receiver.js';
import { MAX_WEBHOOKS } from './organization.js';

/**
 * Organization webhooks (docs/webhooks.md) against a real receiver on loopback: CRUD, validation, RBAC and audit of
 * webhook configuration over HTTP.
 * Shared helpers: test/organization-webhook-fixtures.ts.
 */
let h: Harness;
let rx: Receiver;
const fx = webhookFixtures(() => h, () => rx);
const { create, owner, createHook } = fx;

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

  it(`at most ${MAX_WEBHOOKS} webhooks an organization, also when created at once: then 409, until one is deleted`, async () => {
    const o = await owner();
    const auth = bearer(o.accessToken);
    const made = await Promise.all(Array.from({ length: MAX_WEBHOOKS + 3 }, (_, i) => create(auth, o.organizationId, { url: `${rx.url}/cap-${i}`, events: ['api_key.created'] })));
    expect(made.filter((r) => r.statusCode === 201)).toHaveLength(MAX_WEBHOOKS);
    for (const refused of made.filter((r) => r.statusCode !== 201)) expectError(refused, 409, 'CONFLICT');
    const [first] = made.filter((r) => r.statusCode === 201).map((r) => json<{ data: WebhookView }>(r).data);
    expect((await h.request({ method: 'DELETE', url: `${hooksUrl(o.organizationId)}/${first!.id}`, headers: auth })).statusCode).toBe(200);
    expect((await create(auth, o.organizationId, { url: `${rx.url}/cap-again`, events: ['api_key.created'] })).statusCode).toBe(201);
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
