import { randomBytes } from 'node:crypto';
import type { Ctx, Deps } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { lockName } from '../../db/locks.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { type KeysetPosition, pageOf } from '../../http/envelope.js';
import { decryptSecret, encryptSecret } from '../../lib/crypto-box.js';
import { enqueueMail, renderMail } from '../../lib/mailer.js';
import { limitAttempt } from '../../lib/rate-limiter.js';
import { writeAudit } from '../audit/service.js';
import { isUuid } from '../../lib/ids.js';
import { heldBy } from '../organizations/powers.js';
import { type Authorization, authorize } from '../organizations/rbac.js';
import { type AttemptOutcome, forwardableHeaders } from './deliver.js';
import { signatureHeaders } from './signing.js';
import { checkTargetUrl } from './ssrf.js';
import type { Backoff } from '../../workers/backoff.js';
import { type ClaimAt, type ClaimSpec, claimJobs } from '../../workers/claim.js';
import { exhausted, type JobOutcome, type JobPolicy, type JobQueue, retryAt, runJobs } from '../../workers/jobs.js';

/**
 * Organization webhooks (docs/webhooks.md): configurations (admins and owners), their delivery records, manual
 * retry and a test send; the delivery worker that sends due records (any number of instances).
 */
export const EVENT_TYPES = [
  'organization.member.added',
  'organization.member.removed',
  'subscription.updated',
  'api_key.created',
  'api_key.revoked',
  'credits.purchased',
  'quota.threshold',
  'deployment.tier_changed',
  'budget.threshold',
  'budget.exceeded',
  'auto_top_up.succeeded',
  'auto_top_up.failed',
  'auto_top_up.disabled',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Records with no delivery time and fewer than 5 attempts are eligible for retry (docs/webhooks.md). */
export const MAX_ATTEMPTS = 5;
/** docs/webhooks.md, Organization webhooks: 30 s, 2 min, 10 min, 1 h between attempts, ±20 % jitter. */
export const RETRY_SCHEDULE_MS = [30_000, 120_000, 600_000, 3_600_000];
/** A webhook failing this long without a success is disabled and the owners are told. */
export const DISABLE_AFTER_MS = 5 * 24 * 3_600_000;
/** A claimed row is leased this long (leased_until): a worker that dies mid-delivery leaves it due again after. */
export const LEASE_MS = 60_000;
/** The schedule ±20 %; a receiver's Retry-After is honoured within that band (also the template provisioning's). */
export const WEBHOOK_BACKOFF: Backoff = { kind: 'schedule', stepsMs: RETRY_SCHEDULE_MS, jitter: 0.2 };
/**
 * The `webhook-delivery` queue's policy (docs/jobs.md): 20 webhooks a pass, each in a lane of its own and
 * all at once; a lane whose delivery succeeded goes on with its webhook's next one, up to 50 more and
 * while the pass is under 2 s old.
 */
export const DELIVERY_POLICY: JobPolicy = {
  batchSize: 20,
  leaseMs: LEASE_MS,
  maxAttempts: MAX_ATTEMPTS,
  backoff: WEBHOOK_BACKOFF,
  concurrency: 20,
  follow: { jobs: 50, withinMs: 2_000 },
};

/**
 * The worker's claim (docs/webhooks.md, Delivery worker): $1 now, $2 batch, $3 now + lease, $4 one
 * webhook or null, $5 only these organizations or null (tests that share a database). A webhook's
 * head is its earliest pending delivery; a webhook with any delivery under a live lease (in flight,
 * whatever its state now: one failed by a delete or a disable mid-attempt keeps its lease until it
 * ends) gives none, so a receiver gets one delivery at a time, whichever instance sends it and in
 * whatever order deliveries committed. Of the due heads, every organization's oldest comes before
 * anyone's second, then by due time: one organization's backlog, however long, takes one lane a pass
 * per webhook. The heads are read without locks, then locked by id with SKIP LOCKED and checked again
 * on their latest version, so a head another instance claimed or finished meanwhile is left out.
 */
export const CLAIM_DUE_SQL = `WITH heads AS (
  SELECT h.id, h.next_retry_at, row_number() OVER (PARTITION BY w.organization_id ORDER BY h.next_retry_at, h.id) AS turn
  FROM webhooks w
  CROSS JOIN LATERAL (
    SELECT q.id, q.next_retry_at, q.leased_until, q.status FROM webhook_deliveries q
    WHERE q.webhook_id = w.id AND q.next_retry_at IS NOT NULL
    ORDER BY q.next_retry_at, q.id LIMIT 1
  ) h
  WHERE ($4::uuid IS NULL OR w.id = $4::uuid) AND ($5::uuid[] IS NULL OR w.organization_id = ANY($5::uuid[]))
    AND h.status = 'pending' AND h.next_retry_at <= $1
    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries x WHERE x.webhook_id = w.id AND x.leased_until IS NOT NULL AND x.leased_until > $1)
), chosen AS (
  SELECT id FROM heads ORDER BY turn, next_retry_at, id LIMIT $2
)
UPDATE webhook_deliveries j SET leased_until = $3, updated_at = $1
FROM (SELECT q.id FROM webhook_deliveries q
      WHERE q.id = ANY(ARRAY(SELECT id FROM chosen)) AND q.status = 'pending' AND q.next_retry_at <= $1
        AND (q.leased_until IS NULL OR q.leased_until <= $1)
      FOR UPDATE OF q SKIP LOCKED) due
WHERE j.id = due.id RETURNING j.*`;

function claimHeads(db: Queryable, at: ClaimAt, webhookId: string | null): Promise<DeliveryRow[]> {
  const organizations = (at.params?.organizations as string[] | undefined) ?? null;
  return db.query<DeliveryRow>(CLAIM_DUE_SQL, [at.now, at.limit, at.leaseUntil, webhookId, organizations], 'webhook_delivery_claim');
}

/** One delivery (`:id`), claimed as the worker would: a test send claims its own row. */
const ONE_DELIVERY_CLAIM: ClaimSpec = {
  name: 'webhook-delivery-one',
  table: 'webhook_deliveries',
  key: 'id',
  pending: "q.status = 'pending'",
  dueAt: 'q.next_retry_at',
  lease: { kind: 'column', column: 'leased_until' },
  set: ['updated_at = :now'],
  where: ['q.id = :id'],
  orderBy: 'q.next_retry_at',
  returning: 'j.*',
};

export interface WebhookRow {
  id: string;
  organization_id: string;
  url: string;
  secret_encrypted: string;
  events: string[];
  is_active: boolean;
  disabled_reason: string | null;
  failing_since: Date | null;
  created_by: string | null;
  created_at: Date;
  updated_at: Date;
}

export interface WebhookView {
  id: string;
  organization_id: string;
  url: string;
  events: string[];
  is_active: boolean;
  disabled_reason: string | null;
  created_at: string;
  updated_at: string;
}

export interface DeliveryView {
  id: string;
  webhook_id: string | null;
  url: string;
  method: string;
  event_type: string | null;
  payload: unknown;
  status: string;
  status_code: number | null;
  response_body: string | null;
  error: string | null;
  attempt_count: number;
  next_retry_at: string | null;
  delivered_at: string | null;
  created_at: string;
}

export interface DeliveryRow {
  id: string;
  organization_id: string;
  webhook_id: string | null;
  event_type: string | null;
  url: string;
  method: string;
  payload: { id?: string; type?: string; created_at?: string; data?: unknown };
  status: string;
  leased_until: Date | null;
  status_code: number | null;
  response_body: string | null;
  error: string | null;
  attempt_count: number;
  next_retry_at: Date | null;
  delivered_at: Date | null;
  created_at: Date;
}

const viewOf = (w: WebhookRow): WebhookView => ({
  id: w.id,
  organization_id: w.organization_id,
  url: w.url,
  events: w.events,
  is_active: w.is_active,
  disabled_reason: w.disabled_reason,
  created_at: w.created_at.toISOString(),
  updated_at: w.updated_at.toISOString(),
});

export const deliveryViewOf = (d: DeliveryRow): DeliveryView => ({
  id: d.id,
  webhook_id: d.webhook_id,
  url: d.url,
  method: d.method,
  event_type: d.event_type,
  payload: d.payload,
  status: d.status,
  status_code: d.status_code,
  response_body: d.response_body,
  error: d.error,
  attempt_count: d.attempt_count,
  next_retry_at: d.next_retry_at?.toISOString() ?? null,
  delivered_at: d.delivered_at?.toISOString() ?? null,
  created_at: d.created_at.toISOString(),
});

function checkEvents(events: string[]): void {
  const unknown = events.filter((e) => !(EVENT_TYPES as readonly string[]).includes(e));
  if (unknown.length > 0) {
    throw new ValidationError(`Unknown event types: ${unknown.join(', ')}`, [{ field: 'events', message: `must be among ${EVENT_TYPES.join(', ')}` }]);
  }
}

async function getWebhook(ctx: Ctx, organizationId: string, webhookId: string): Promise<WebhookRow> {
  if (!isUuid(webhookId)) throw new NotFoundError('Webhook');
  const rows = await ctx.db.query<WebhookRow>('SELECT * FROM webhooks WHERE id = $1 AND organization_id = $2', [webhookId, organizationId]);
  if (!rows[0]) throw new NotFoundError('Webhook');
  return rows[0];
}

/** The member a call acts for: the signed-in user, or the maker of the API key used (null: the operator's key). */
function actingMember(auth: Authorization): string | null {
  return auth.userId ?? auth.keyCreator?.userId ?? null;
}

/**
 * Inside the change's transaction, the member's membership locked FOR SHARE (as key creation locks it):
 * a removal or demotion that committed after `authorize` is seen here, or waits for this commit and then
 * takes the webhook back (takeBackExcess), so no webhook is left with a member who lost the power.
 */
async function stillManages(tx: Queryable, organizationId: string, member: string | null): Promise<void> {
  if (member === null) return;
  const held = await heldBy(tx, organizationId, member, true);
  if (!held.permissions.has('webhooks.manage')) throw new AppError('FORBIDDEN', 'You no longer manage webhooks in this organization');
}

/**
 * Webhooks an organization may have at once (docs/webhooks.md, Organization webhooks): every event
 * fans out to each of them in the writing transaction, and each is an outbound POST with retries, so
 * the count is what one free action can amplify (Stripe allows 16 endpoints an account).
 */
export const MAX_WEBHOOKS = 20;

export async function createWebhook(
  ctx: Ctx,
  input: { organizationId: string; url: string; events: string[]; secret?: string | undefined; isActive?: boolean | undefined },
): Promise<WebhookView & { secret: string }> {
  const auth = await authorize(ctx, input.organizationId, 'webhooks.manage');
  checkTargetUrl(input.url, ctx.config.webhookAllowPrivateNetworks);
  checkEvents(input.events);
  const secret = input.secret ?? `whsec_${randomBytes(32).toString('base64')}`;
  const now = ctx.clock.now();
  // The member it acts for: the signed-in user, or the maker of the API key used. A webhook is theirs,
  // so it goes when their power to manage webhooks does (docs/accounts.md, Powers).
  const member = actingMember(auth);
  const row = await ctx.db.transaction(async (tx) => {
    await stillManages(tx, input.organizationId, member);
    // Two creations at once count one after the other.
    await lockName(tx, `creditgate-webhooks:${input.organizationId}`);
    const count = await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM webhooks WHERE organization_id = $1', [input.organizationId]);
    if (count[0]!.n >= MAX_WEBHOOKS) throw new AppError('CONFLICT', `An organization has at most ${MAX_WEBHOOKS} webhooks; delete one to create another`);
    const rows = await tx.query<WebhookRow>(
      `INSERT INTO webhooks (organization_id, url, secret_encrypted, events, is_active, created_by, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING *`,
      [input.organizationId, input.url, encryptSecret(ctx.config.encryptionKey, secret), [...new Set(input.events)], input.isActive ?? true, member, now],
    );
    const created = rows[0]!;
    await writeAudit(tx, ctx, {
      organizationId: input.organizationId,
      action: 'create',
      resourceType: 'webhook',
      resourceId: created.id,
      metadata: { url: created.url, events: created.events },
    });
    return created;
  });
  return { ...viewOf(row), secret };
}

export async function listWebhooks(ctx: Ctx, organizationId: string): Promise<WebhookView[]> {
  await authorize(ctx, organizationId, 'webhooks.read');
  const rows = await ctx.db.query<WebhookRow>('SELECT * FROM webhooks WHERE organization_id = $1 ORDER BY created_at, id', [organizationId]);
  return rows.map(viewOf);
}

export async function readWebhook(ctx: Ctx, organizationId: string, webhookId: string): Promise<WebhookView> {
  await authorize(ctx, organizationId, 'webhooks.read');
  return viewOf(await getWebhook(ctx, organizationId, webhookId));
}

export async function updateWebhook(
  ctx: Ctx,
  input: { organizationId: string; webhookId: string; url?: string | undefined; events?: string[] | undefined; isActive?: boolean | undefined },
): Promise<WebhookView> {
  const auth = await authorize(ctx, input.organizationId, 'webhooks.manage');
  if (input.url !== undefined) checkTargetUrl(input.url, ctx.config.webhookAllowPrivateNetworks);
  if (input.events !== undefined) checkEvents(input.events);
  const before = await getWebhook(ctx, input.organizationId, input.webhookId);
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    await stillManages(tx, input.organizationId, actingMember(auth));
    const enable = input.isActive === true && !before.is_active;
    const rows = await tx.query<WebhookRow>(
      `UPDATE webhooks SET url = $3, events = $4, is_active = $5, updated_at = $6,
         disabled_reason = CASE WHEN $5 THEN NULL ELSE disabled_reason END,
         failing_since = CASE WHEN $7 THEN NULL ELSE failing_since END
       WHERE id = $1 AND organization_id = $2 RETURNING *`,
      [
        input.webhookId,
        input.organizationId,
        input.url ?? before.url,
        input.events ? [...new Set(input.events)] : before.events,
        input.isActive ?? before.is_active,
        now,
        enable,
      ],
    );
    const after = rows[0]!;
    await writeAudit(tx, ctx, {
      organizationId: input.organizationId,
      action: 'update',
      resourceType: 'webhook',
      resourceId: after.id,
      metadata: { before: viewOf(before), after: viewOf(after) },
    });
    return viewOf(after);
  });
}

export async function deleteWebhook(ctx: Ctx, organizationId: string, webhookId: string): Promise<WebhookView> {
  await authorize(ctx, organizationId, 'webhooks.manage');
  const before = await getWebhook(ctx, organizationId, webhookId);
  await ctx.db.transaction(async (tx) => {
    // Pending deliveries of a deleted webhook will not be sent; their records stay for the organization.
    await tx.query(
      `UPDATE webhook_deliveries SET status = 'failed', error = 'webhook deleted', next_retry_at = NULL, updated_at = $2
       WHERE webhook_id = $1 AND status = 'pending'`,
      [webhookId, ctx.clock.now()],
    );
    await tx.query('DELETE FROM webhooks WHERE id = $1', [webhookId]);
    await writeAudit(tx, ctx, { organizationId, action: 'delete', resourceType: 'webhook', resourceId: webhookId, metadata: { url: before.url } });
  });
  return viewOf(before);
}

export async function listDeliveries(
  ctx: Ctx,
  input: { organizationId: string; webhookId: string; limit: number; cursor: KeysetPosition | null },
): Promise<{ items: DeliveryView[]; next: string | null }> {
  await authorize(ctx, input.organizationId, 'webhooks.read');
  await getWebhook(ctx, input.organizationId, input.webhookId);
  const rows = await ctx.db.query<DeliveryRow>(
    `SELECT * FROM webhook_deliveries WHERE webhook_id = $1 AND organization_id = $2
       AND ($3::timestamptz IS NULL OR (created_at, id) < ($3::timestamptz, $4::uuid))
     ORDER BY created_at DESC, id DESC LIMIT $5`,
    [input.webhookId, input.organizationId, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return { items: items.map(deliveryViewOf), next };
}

/** Manual retry (eligible when not delivered, fewer than 5 attempts): due now. */
/**
 * A send asked for by the organization (a test send, a manual retry) acts for its primary deployment,
 * as an organization API key's calls do; while that deployment is suspended it may read but not send
 * (docs/webhooks.md, "Suspended deployments"). Deliveries of the organization's own events go on.
 */
async function refuseWhileSuspended(ctx: Ctx, organizationId: string): Promise<void> {
  const rows = await ctx.db.query<{ status: string }>('SELECT status FROM deployments WHERE organization_id = $1 AND is_primary', [organizationId]);
  if (rows[0] && rows[0].status !== 'active') {
    throw new AppError(
      'DEPLOYMENT_SUSPENDED',
      "The organization's primary deployment is suspended: webhooks can be read, but not sent on request until the operator reactivates it",
    );
  }
}

/** Test sends and manual retries per organization per sliding minute (docs/webhooks.md, Sends on request). */
export const SENDS_ON_REQUEST_LIMIT = 5;

/**
 * A test send or a manual retry is an outbound POST the organization asks for, unmetered, whose answer
 * it reads: bounded per organization (429 RATE_LIMITED with Retry-After), shared by every instance.
 */
function limitSendsOnRequest(ctx: Ctx, organizationId: string): Promise<void> {
  return limitAttempt(
    ctx.limiter,
    [{ subject: `webhook-sends-on-request:${organizationId}`, name: 'webhook-sends', limit: SENDS_ON_REQUEST_LIMIT, windowMs: 60_000, exact: true }],
    'webhook test sends and manual retries for this organization',
  );
}

export async function retryDelivery(ctx: Ctx, input: { organizationId: string; webhookId: string; deliveryId: string }): Promise<DeliveryView> {
  await authorize(ctx, input.organizationId, 'webhooks.manage');
  await getWebhook(ctx, input.organizationId, input.webhookId);
  await refuseWhileSuspended(ctx, input.organizationId);
  if (!isUuid(input.deliveryId)) throw new NotFoundError('Delivery');
  await limitSendsOnRequest(ctx, input.organizationId);
  const now = ctx.clock.now();
  const rows = await ctx.db.query<DeliveryRow>(
    `UPDATE webhook_deliveries SET status = 'pending', next_retry_at = $4, updated_at = $4
     WHERE id = $1 AND webhook_id = $2 AND organization_id = $3 AND delivered_at IS NULL AND attempt_count < $5
       AND status IN ('pending', 'failed') AND (leased_until IS NULL OR leased_until <= $4)
     RETURNING *`,
    [input.deliveryId, input.webhookId, input.organizationId, now, MAX_ATTEMPTS],
  );
  if (rows[0]) return deliveryViewOf(rows[0]);
  const exists = await ctx.db.query('SELECT 1 FROM webhook_deliveries WHERE id = $1 AND webhook_id = $2', [input.deliveryId, input.webhookId]);
  if (exists.length === 0) throw new NotFoundError('Delivery');
  throw new AppError(
    'CONFLICT',
    `Only a delivery that was not delivered, has fewer than ${MAX_ATTEMPTS} attempts and is not being sent right now can be retried`,
  );
}

/** The event a test send delivers (docs/webhooks.md): to the one webhook tested, never subscribable. */
export const TEST_EVENT_TYPE = 'webhook.test';

/**
 * A `webhook.test` event to this webhook only, sent at once (one attempt) with the signing of every
 * delivery; its record is kept like any other. A disabled webhook is 409: the worker would not send
 * to it either, so a test would only make a record that says so.
 */
export async function testWebhook(ctx: Ctx, organizationId: string, webhookId: string): Promise<DeliveryView> {
  await authorize(ctx, organizationId, 'webhooks.manage');
  const webhook = await getWebhook(ctx, organizationId, webhookId);
  await refuseWhileSuspended(ctx, organizationId);
  if (!webhook.is_active) {
    const reason = webhook.disabled_reason ? ` (${webhook.disabled_reason})` : '';
    throw new AppError('CONFLICT', `The webhook is disabled${reason}: enable it (PATCH is_active: true) before a test send`);
  }
  await limitSendsOnRequest(ctx, organizationId);
  const now = ctx.clock.now();
  const eventId = crypto.randomUUID();
  const payload = {
    id: eventId,
    type: TEST_EVENT_TYPE,
    created_at: now.toISOString(),
    data: { organization_id: organizationId, webhook_id: webhookId, message: 'This is a test event' },
  };
  const inserted = await ctx.db.transaction(async (tx) => {
    const rows = await tx.query<DeliveryRow>(
      `INSERT INTO webhook_deliveries (organization_id, webhook_id, event_type, url, method, payload, status, next_retry_at, created_at, updated_at)
       VALUES ($1, $2, $3, $4, 'POST', $5, 'pending', $6, $6, $6) RETURNING *`,
      [organizationId, webhookId, TEST_EVENT_TYPE, webhook.url, JSON.stringify(payload), now],
    );
    const row = rows[0]!;
    await writeAudit(tx, ctx, { organizationId, action: 'test', resourceType: 'webhook', resourceId: webhookId, metadata: { delivery_id: row.id, url: webhook.url } });
    return row;
  });
  // Claimed like the worker does, so a worker running at the same moment cannot send it too.
  const claimed = await claim(ctx, inserted.id);
  if (!claimed) throw new AppError('CONFLICT', 'The test delivery is being sent by a worker');
  const sent = await deliverClaimed(ctx, claimed, webhook);
  if (sent.status !== 'pending') return deliveryViewOf(sent);
  // One attempt: a failed test is final (the manual retry endpoint can send it again).
  const final = await ctx.db.query<DeliveryRow>(
    `UPDATE webhook_deliveries SET status = 'failed', next_retry_at = NULL, updated_at = $2 WHERE id = $1 RETURNING *`,
    [sent.id, ctx.clock.now()],
  );
  return deliveryViewOf(final[0]!);
}

async function claim(deps: Pick<Deps, 'db' | 'clock'>, id: string): Promise<DeliveryRow | null> {
  const now = deps.clock.now();
  const rows = await claimJobs<DeliveryRow>(deps.db, ONE_DELIVERY_CLAIM, { now, limit: 1, leaseUntil: new Date(now.getTime() + LEASE_MS), params: { id } });
  return rows[0] ?? null;
}

const outcomeOf = (status: string): JobOutcome => (status === 'delivered' ? 'done' : status === 'pending' ? 'retry' : 'failed');

/**
 * The `webhook-delivery` queue (docs/jobs.md): claimed due rows (FOR UPDATE SKIP LOCKED, then a lease
 * so a row in flight is not due for anyone else) are sent once each and their outcome recorded.
 */
export const DELIVERY_QUEUE: JobQueue<DeliveryRow, Deps> = {
  name: 'webhook-delivery',
  table: 'webhook_deliveries',
  policy: DELIVERY_POLICY,
  claim: (db, at) => claimHeads(db, at, null),
  keyOf: (row) => row.id,
  async handle({ row }, deps) {
    const webhooks = row.webhook_id ? await deps.db.query<WebhookRow>('SELECT * FROM webhooks WHERE id = $1', [row.webhook_id]) : [];
    return outcomeOf((await deliverClaimed(deps, row, webhooks[0] ?? null)).status);
  },
  // The lane's next job: its webhook's next due delivery (one claim for one webhook: an index probe).
  async next(done, deps, at) {
    if (!done.webhook_id) return null;
    return (await claimHeads(deps.db, at, done.webhook_id))[0] ?? null;
  },
};

/**
 * The delivery worker's pass (DELIVERY_QUEUE through the job runner). Returns how many it handled.
 * `organizations` narrows it to theirs (tests that share a database); the worker passes none.
 */
export function deliverDue(deps: Deps, batch: number, organizations?: readonly string[]): Promise<number> {
  return runJobs(deps, DELIVERY_QUEUE, { batch, ...(organizations ? { params: { organizations: [...organizations] } } : {}) });
}

async function deliverClaimed(deps: Pick<Deps, 'db' | 'clock' | 'config' | 'outbound' | 'metrics'>, row: DeliveryRow, webhook: WebhookRow | null): Promise<DeliveryRow> {
  if (!webhook?.is_active) {
    return finish(deps, row, { status: 'failed', error: webhook ? 'webhook disabled' : 'webhook deleted', attempted: false });
  }
  const body = Buffer.from(
    JSON.stringify({ id: row.payload.id, type: row.payload.type, created_at: row.payload.created_at, data: row.payload.data }),
  );
  const timestamp = Math.floor(deps.clock.now().getTime() / 1000);
  const secret = decryptSecret(deps.config.encryptionKey, webhook.secret_encrypted);
  const headers = {
    ...forwardableHeaders({}),
    'content-type': 'application/json',
    'user-agent': 'creditgate-webhooks/1',
    'x-service-event': row.event_type ?? '',
    'x-service-delivery': row.id,
    ...signatureHeaders({ secret, webhookId: row.id, timestamp, body }),
  };
  let url: URL;
  try {
    url = checkTargetUrl(webhook.url, deps.config.webhookAllowPrivateNetworks);
  } catch (err) {
    return finish(deps, row, { status: 'failed', error: (err as Error).message, attempted: false });
  }
  const outcome = await deps.outbound.attempt({ url, method: 'POST', headers, body });
  return record(deps, row, webhook, outcome);
}

async function record(deps: Pick<Deps, 'db' | 'clock' | 'config' | 'metrics'>, row: DeliveryRow, webhook: WebhookRow, outcome: AttemptOutcome): Promise<DeliveryRow> {
  const now = deps.clock.now();
  const attempts = row.attempt_count + 1;
  if (outcome.ok) {
    await deps.db.query('UPDATE webhooks SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL', [webhook.id]);
    return finish(deps, row, { status: 'delivered', outcome, attempts, deliveredAt: now, attempted: true });
  }
  // The attempt's own record first: disabling fails the webhook's pending deliveries, this one too.
  if (outcome.statusCode === 410) {
    const done = await finish(deps, row, { status: 'failed', outcome, attempts, attempted: true });
    await disable(deps, webhook, 'the receiver answered 410 Gone');
    return done;
  }
  const failingSince = webhook.failing_since ?? now;
  if (!webhook.failing_since) await deps.db.query('UPDATE webhooks SET failing_since = $2 WHERE id = $1 AND failing_since IS NULL', [webhook.id, now]);
  if (now.getTime() - failingSince.getTime() >= DISABLE_AFTER_MS) {
    const done = await finish(deps, row, { status: 'failed', outcome, attempts, attempted: true });
    await disable(deps, webhook, 'it failed for 5 days without a successful delivery');
    return done;
  }
  // An unreachable host is retried on the schedule whether its name does not resolve or resolves where
  // the guard refuses: one outcome for both (docs/webhooks.md, Unreachable hosts). A request undici
  // refused to write would be refused again.
  const final = outcome.notAttempted && !outcome.retryable;
  if (exhausted(DELIVERY_POLICY, attempts) || final) return finish(deps, row, { status: 'failed', outcome, attempts, attempted: true });
  return finish(deps, row, { status: 'pending', outcome, attempts, nextRetryAt: retryAt(DELIVERY_POLICY, attempts, now, { retryAfterMs: outcome.retryAfterMs }), attempted: true });
}

async function finish(
  deps: Pick<Deps, 'db' | 'clock' | 'metrics'>,
  row: DeliveryRow,
  r: { status: string; outcome?: AttemptOutcome; attempts?: number; deliveredAt?: Date; nextRetryAt?: Date; error?: string; attempted: boolean },
): Promise<DeliveryRow> {
  const rows = await deps.db.query<DeliveryRow>(
    `UPDATE webhook_deliveries SET status = $2, status_code = $3, response_body = $4, error = $5, attempt_count = $6,
       next_retry_at = $7, delivered_at = $8, updated_at = $9, leased_until = NULL
     WHERE id = $1 AND status = 'pending' AND leased_until IS NOT DISTINCT FROM $10 RETURNING *`,
    [
      row.id,
      r.status,
      r.outcome?.statusCode ?? row.status_code,
      r.outcome?.responseBody ?? row.response_body,
      r.outcome ? (r.outcome.ok ? null : r.outcome.error) : (r.error ?? null),
      r.attempts ?? row.attempt_count,
      r.nextRetryAt ?? null,
      r.deliveredAt ?? null,
      deps.clock.now(),
      row.leased_until,
    ],
    'webhook_delivery_finish',
  );
  if (!rows[0]) {
    // The lease ran out and another claim holds the row (its outcome is that claim's to write), or the
    // webhook was deleted or disabled mid-attempt and the row failed with it: nothing to write.
    const current = await deps.db.query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE id = $1', [row.id]);
    return current[0] ?? row;
  }
  const outcome = r.status === 'delivered' ? 'delivered' : r.status === 'pending' ? 'retry_scheduled' : 'failed';
  deps.metrics.webhookDeliveries.inc({ kind: 'organization', outcome });
  return rows[0]!;
}

/** Turn a webhook off and tell the organization's owners by mail (outbox), in one transaction. */
async function disable(deps: Pick<Deps, 'db' | 'clock' | 'config'>, webhook: WebhookRow, reason: string): Promise<void> {
  await deps.db.transaction((tx) => disableIn(tx, deps, webhook, reason));
}

/** In the caller's transaction: off (if it was on), its pending deliveries failed, a mail to each owner. True when it was on. */
async function disableIn(tx: Queryable, deps: Pick<Deps, 'clock' | 'config'>, webhook: WebhookRow, reason: string): Promise<boolean> {
  const now = deps.clock.now();
  const changed = await tx.query(
    'UPDATE webhooks SET is_active = false, disabled_reason = $2, updated_at = $3 WHERE id = $1 AND is_active RETURNING id',
    [webhook.id, reason, now],
  );
  if (changed.length === 0) return false;
  await tx.query(
    `UPDATE webhook_deliveries SET status = 'failed', error = 'webhook disabled', next_retry_at = NULL, updated_at = $2
     WHERE webhook_id = $1 AND status = 'pending'`,
    [webhook.id, now],
  );
  const owners = await tx.query<{ email: string }>(
    `SELECT u.email FROM organization_members m JOIN users u ON u.id = m.user_id WHERE m.organization_id = $1 AND m.role = 'owner'`,
    [webhook.organization_id],
  );
  const mail = renderMail('webhook_disabled', { publicBaseUrl: deps.config.publicBaseUrl, webhook: { url: webhook.url, reason } });
  for (const owner of owners) {
    await enqueueMail(tx, now, { to: owner.email, template: 'webhook_disabled', organizationId: webhook.organization_id, ...mail });
  }
  return true;
}

/**
 * A member who no longer holds `webhooks.manage` (removed, demoted, denied it): the webhooks they made
 * are turned off in the change's transaction, as their keys are revoked (docs/accounts.md, Powers) —
 * else a removed admin's receiver would go on getting the organization's events. Each gets an audit
 * row (`disable`, reason `creator_lost_power`) and the owners the usual mail; an admin may turn it on again.
 */
export async function disableWebhooksOf(tx: Queryable, ctx: Ctx, organizationId: string, userId: string): Promise<void> {
  const made = await tx.query<WebhookRow>(
    'SELECT * FROM webhooks WHERE organization_id = $1 AND created_by = $2 AND is_active ORDER BY id FOR UPDATE',
    [organizationId, userId],
  );
  for (const webhook of made) {
    if (!(await disableIn(tx, ctx, webhook, 'its creator no longer manages webhooks in this organization'))) continue;
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'disable',
      resourceType: 'webhook',
      resourceId: webhook.id,
      metadata: { reason: 'creator_lost_power', created_by: userId, url: webhook.url },
    });
  }
}
