import type { ChildProcess } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { expect } from 'vitest';
import type { WebhookView as OrgWebhookView } from '../src/modules/webhooks/organization.js';
import { appendEvent } from '../src/modules/events/outbox.js';
import { deliverDue } from '../src/modules/webhooks/organization.js';
import { WORKERS } from '../src/workers/catalog.js';
import { bearer, createPassesHarness, type Harness, json, type SignedInUser, signUpWithOrganization } from './harness.js';
import type { Received, Receiver } from './receiver.js';

/**
 * Fixtures of the organization webhook suites (src/modules/webhooks/organization-*.test.ts, docs/webhooks.md):
 * the harness they start, the helpers they share, and the per-test reset and cleanup. `harness` and
 * `receiver` are read at call time, so each file starts its own in `beforeAll`; each call of
 * `webhookFixtures` keeps its own organizations and child processes, so files sharing a worker share no state.
 */

export type Headers = Record<string, string>;
export type Owner = SignedInUser & { organizationId: string };

export type WebhookView = OrgWebhookView & { secret?: string };

export interface DeliveryRow {
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

export interface ErrorBody {
  success: false;
  error: { code: string; message: string };
  details: { timestamp: string; fields?: Array<{ field: string }> };
}

/**
 * Real time as the start: Standard Webhooks receivers check the timestamp against their own clock. The
 * delivery worker (deliverDue) claims the due deliveries of every organization and these files move their
 * clocks by hours and days, so on PostgreSQL each has a database of its own (createPassesHarness).
 */
export function startWebhookHarness(): Promise<Harness> {
  return createPassesHarness({ webhookAllowPrivateNetworks: true, webhookAttemptTimeoutMs: 1000 }, new Date().toISOString());
}

export const hooksUrl = (orgId: string) => `/organizations/${orgId}/webhooks`;

export function expectError(res: { statusCode: number; body: string }, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body).toBe(status);
  const body = JSON.parse(res.body) as ErrorBody;
  expect(body.success).toBe(false);
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe('string');
  expect(typeof body.details.timestamp).toBe('string');
  if (field) expect(body.details.fields?.map((f) => f.field)).toContain(field);
}

/** Poll until `probe` holds; bounded so a lost row fails the test instead of hanging it. */
export async function eventually(probe: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('condition not met in time');
}

export function headerSet(r: Received): Record<string, string> {
  return {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  };
}

/** x-service-signature (docs/webhooks.md, Verifying a delivery): the rule written naively, keyed with the secret string exactly as shown. */
export const naiveSignature = (secret: string, body: Buffer) => createHmac('sha256', secret).update(body).digest('hex');
/** The Standard Webhooks key (docs/webhooks.md, Verifying a delivery): the decoded remainder of a whsec_ secret, else the secret's UTF-8 bytes. */
export const standardKeyOf = (secret: string) =>
  secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8');

export const worker = (name: string) => WORKERS.find((w) => w.name === name)!;

export function webhookFixtures(harness: () => Harness, receiver: () => Receiver) {
  /** Organizations made here: their pending deliveries are failed after each test so no test sees another's. */
  const orgs = new Set<string>();
  const children = new Set<ChildProcess>();

  const create = (headers: Headers, orgId: string, payload: Record<string, unknown>) =>
    harness().request({ method: 'POST', url: hooksUrl(orgId), headers, payload });

  return {
    children,
    /** Before each test: the clock at real time, the receiver answering 200. */
    resetEach(): void {
      harness().clock.set(Date.now());
      receiver().script({ status: 200, body: 'ok' });
    },
    /** After each test: no child process left, no pending delivery of this file's organizations. */
    async cleanUpEach(): Promise<void> {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      children.clear();
      await harness().deps.db.query(
        `UPDATE webhook_deliveries SET status = 'failed', error = 'test cleanup', next_retry_at = NULL
         WHERE status = 'pending' AND organization_id = ANY($1::uuid[])`,
        [[...orgs]],
      );
    },
    async owner(): Promise<Owner> {
      const o = await signUpWithOrganization(harness(), 'wh');
      orgs.add(o.organizationId);
      return o;
    },
    create,
    async createHook(o: Owner, payload: Record<string, unknown> = {}): Promise<WebhookView & { secret: string }> {
      const res = await create(bearer(o.accessToken), o.organizationId, { url: `${receiver().url}/hooks`, events: ['api_key.created'], ...payload });
      expect(res.statusCode, res.body).toBe(201);
      return json<{ data: WebhookView & { secret: string } }>(res).data;
    },
    /** Append an event the way services do: appendEvent inside the transaction of the change. */
    async emit(orgId: string, data: Record<string, unknown> = { api_key_id: 'k1' }, type = 'api_key.created'): Promise<string> {
      const h = harness();
      const id = await h.deps.db.transaction((tx) =>
        appendEvent(tx, { organizationId: orgId, deploymentId: null, type, data, dedupeKey: null, at: h.clock.now() }),
      );
      expect(id).not.toBeNull();
      return id!;
    },
    deliveriesOf: (webhookId: string) =>
      harness().deps.db.query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY created_at, id', [webhookId]),
    async delivery(id: string): Promise<DeliveryRow> {
      const rows = await harness().deps.db.query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE id = $1', [id]);
      return rows[0]!;
    },
    async hookRow(id: string) {
      const rows = await harness().deps.db.query<{
        is_active: boolean;
        disabled_reason: string | null;
        failing_since: Date | null;
        secret_encrypted: string;
      }>('SELECT * FROM webhooks WHERE id = $1', [id]);
      return rows[0]!;
    },
    byDelivery: (id: string): Received[] => receiver().received.filter((r) => r.headers['x-service-delivery'] === id),
    /** Run worker passes over this file's organizations until nothing of theirs is due at the current clock (bounded). */
    async drain(deps = harness().deps): Promise<void> {
      for (let pass = 0; pass < 50; pass++) if ((await deliverDue(deps, 20, [...orgs])) === 0) return;
      throw new Error('deliverDue kept finding due rows');
    },
    async login(u: SignedInUser): Promise<Headers> {
      const res = await harness().request({ method: 'POST', url: '/auth/login', payload: { email: u.email, password: u.password } });
      expect(res.statusCode, res.body).toBe(200);
      return bearer(json<{ data: { access_token: string } }>(res).data.access_token);
    },
  };
}
