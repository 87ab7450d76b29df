import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminHeaders,
  bearer,
  createPassesHarness,
  createKeyOverHttp,
  dispatchAllPending,
  type Harness,
  joinByInvitation,
  json,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { EVENT_DATA } from '../../http/openapi-events.js';
import { startReceiver } from '../../../test/receiver.js';
import { EVENT_TYPES, TEST_EVENT_TYPE } from './organization.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;
const ajv = addFormats(new Ajv({ strict: false, allErrors: true }));

/** The schema as documented, with every object closed: a field the emitter writes and the document omits fails too. */
function closed(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(closed);
  if (!schema || typeof schema !== 'object') return schema;
  const copy = Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, closed(v)]));
  return copy.type === 'object' && copy.properties ? { ...copy, additionalProperties: false } : copy;
}

/** A delivered body matches the OpenAPI `webhooks` section (http/openapi-events.ts). */
function expectDocumented(payload: Delivery['payload']): void {
  const documented = EVENT_DATA[payload.type];
  expect(documented, `${payload.type} is not in the webhooks section`).toBeDefined();
  const validate = ajv.compile(closed(documented!.data) as object);
  expect(validate(payload.data), `${payload.type}: ${ajv.errorsText(validate.errors)}`).toBe(true);
}

/**
 * docs/webhooks.md, Organization webhooks: the operations that cause the organization events write them (and their delivery rows)
 * in their own transaction; quota.threshold from the one-statement deduction is fanned out by the
 * dispatcher. Metering calls emit nothing per call.
 */
let h: Harness;

beforeAll(async () => {
  // The dispatcher below fans out every organization's pending events: a database of its own (createPassesHarness).
  h = await createPassesHarness({ webhookAllowPrivateNetworks: true });
});
afterAll(async () => {
  await h.close();
});

interface Delivery {
  event_type: string;
  status: string;
  payload: { id: string; type: string; created_at: string; data: Record<string, unknown> };
}

async function deliveriesOf(webhookId: string): Promise<Delivery[]> {
  return h.deps.db.query<Delivery>(
    'SELECT event_type, status, payload FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY created_at, event_type',
    [webhookId],
  );
}

describe('organization events', () => {
  it('each operation writes its event for every subscribed webhook, with its data', async () => {
    const owner = await signUpWithOrganization(h);
    const ownerHeaders = bearer(owner.accessToken);
    const created = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/webhooks`,
      headers: ownerHeaders,
      payload: { url: 'http://127.0.0.1:9/hooks', events: [...EVENT_TYPES] },
    });
    expect(created.statusCode).toBe(201);
    const webhookId = json<{ data: { id: string } }>(created).data.id;
    const onlyKeys = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/webhooks`,
      headers: ownerHeaders,
      payload: { url: 'http://127.0.0.1:9/keys', events: ['api_key.created'] },
    });
    const keysWebhookId = json<{ data: { id: string } }>(onlyKeys).data.id;

    const key = await createKeyOverHttp(h, ownerHeaders, owner.organizationId, { name: 'ci', scopes: ['read'] });
    await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}/api-keys/${key.id}`, headers: ownerHeaders });
    const member = await signUpAsMember(h, owner.organizationId, 'member');
    await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}/users/${member.userId}`, headers: ownerHeaders });
    const invited = await joinByInvitation(h, ownerHeaders, owner.organizationId, 'viewer');
    await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${owner.deploymentId}`, headers: adminHeaders(h), payload: { tier: 'trial' } });
    await h.request({
      method: 'POST',
      url: `/api/v1/admin/deployments/${owner.deploymentId}/credits`,
      headers: adminHeaders(h),
      payload: { amount: 50, reason: 'top-up' },
    });

    const all = await deliveriesOf(webhookId);
    expect(all.every((d) => d.status === 'pending')).toBe(true);
    const byType = (type: string) => all.filter((d) => d.event_type === type).map((d) => d.payload);
    expect(byType('api_key.created')).toEqual([
      expect.objectContaining({ type: 'api_key.created', data: expect.objectContaining({ api_key_id: key.id, name: 'ci', scopes: ['read'] }) }),
    ]);
    expect(byType('api_key.revoked')).toEqual([expect.objectContaining({ data: expect.objectContaining({ api_key_id: key.id }) })]);
    // Both were added at the same clock time: their order in the outbox is not defined.
    const added = byType('organization.member.added').map((p) => p.data);
    expect(added).toHaveLength(2);
    expect(added).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ user_id: member.userId, role: 'member' }),
        expect.objectContaining({ user_id: invited.userId, role: 'viewer' }),
      ]),
    );
    expect(byType('organization.member.removed').map((p) => p.data)).toEqual([expect.objectContaining({ user_id: member.userId, role: 'member' })]);
    expect(byType('deployment.tier_changed').map((p) => p.data)).toEqual([
      { deployment_id: owner.deploymentId, from: 'sandbox', to: 'trial' },
    ]);
    expect(byType('credits.purchased').map((p) => p.data)).toEqual([
      expect.objectContaining({ deployment_id: owner.deploymentId, amount: 50, purchased_balance: 50, reason: 'top-up' }),
    ]);
    // The wire body: {id, type, created_at, data}, with the event's id and time.
    const first = all[0]!.payload;
    expect(Object.keys(first).sort()).toEqual(['created_at', 'data', 'id', 'type']);
    expect(first.created_at).toBe(h.clock.now().toISOString());
    // Every body is what the OpenAPI document's webhooks section says.
    for (const d of all) expectDocumented(d.payload);
    expect(new Set(all.map((d) => d.event_type)).size).toBe(6);
    // The second webhook subscribed to api_key.created only.
    expect((await deliveriesOf(keysWebhookId)).map((d) => d.event_type)).toEqual(['api_key.created']);
  });

  it('a test send delivers the documented webhook.test event', async () => {
    const rx = await startReceiver();
    try {
      const owner = await signUpWithOrganization(h);
      const created = await h.request({
        method: 'POST',
        url: `/organizations/${owner.organizationId}/webhooks`,
        headers: bearer(owner.accessToken),
        payload: { url: `${rx.url}/hooks`, events: ['api_key.created'] },
      });
      const webhookId = json<{ data: { id: string } }>(created).data.id;
      const sent = await h.request({ method: 'POST', url: `/organizations/${owner.organizationId}/webhooks/${webhookId}/test`, headers: bearer(owner.accessToken) });
      expect(sent.statusCode, sent.body).toBe(200);
      // What the receiver got, not what was stored: the body on the wire is the documented event.
      expect(rx.received).toHaveLength(1);
      const body = JSON.parse(rx.received[0]!.body.toString()) as Delivery['payload'];
      expect(body).toMatchObject({ type: TEST_EVENT_TYPE, created_at: h.clock.now().toISOString() });
      expect(body.data).toEqual({ organization_id: owner.organizationId, webhook_id: webhookId, message: 'This is a test event' });
      expectDocumented(body);
    } finally {
      await rx.close();
    }
  });

  it('quota.threshold from a deduction reaches the webhooks once, with its data', async () => {
    const owner = await signUpWithOrganization(h);
    const headers = bearer(owner.accessToken);
    await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${owner.deploymentId}`, headers: adminHeaders(h), payload: { tier: 'trial' } });
    const created = await h.request({
      method: 'POST',
      url: `/organizations/${owner.organizationId}/webhooks`,
      headers,
      payload: { url: 'http://127.0.0.1:9/hooks', events: ['quota.threshold'] },
    });
    const webhookId = json<{ data: { id: string } }>(created).data.id;
    const key = await createKeyOverHttp(h, headers, owner.organizationId, { scopes: ['read', 'write'] });
    for (let i = 0; i < 80; i++) {
      await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: 'search' } });
    }
    // The batched deduction writes the event in its one write statement; the dispatcher fans it out.
    await dispatchAllPending(h.deps.db, h.clock.now());
    const after = await deliveriesOf(webhookId);
    expect(after.map((d) => d.payload.data)).toEqual([
      expect.objectContaining({ deployment_id: owner.deploymentId, quota: 'monthly_credits', threshold: 80, used: 80, limit: 100 }),
    ]);
    for (const d of after) expectDocumented(d.payload);
    // Dispatched once: another pass finds nothing new for it.
    await dispatchAllPending(h.deps.db, h.clock.now());
    expect(await deliveriesOf(webhookId)).toHaveLength(1);
  });
});
