import { randomUUID } from 'node:crypto';
import { actorLabel, type Ctx } from '../../context.js';
import { AppError, NotFoundError, refusalUntil, ValidationError } from '../../errors.js';
import { type KeysetPosition, pageOf } from '../../http/envelope.js';
import { requestHash } from '../../lib/canonical-json.js';
import { IDEMPOTENCY_WINDOW_MS, readBalance, recordUsage, refundUsage, remainingAfter, viewBalance } from '../credits/index.js';
import type { DeploymentRow } from '../deployments/service.js';
import { isUuid } from '../../lib/ids.js';
import { forwardableHeaders, sendWithRetries } from './deliver.js';
import { type DeliveryRow, type DeliveryView, deliveryViewOf } from './organization.js';
import { signatureHeaders } from './signing.js';
import { checkTargetUrl, urlNotAllowed } from './ssrf.js';

/**
 * The webhook proxy (docs/webhooks.md): POST /api/v1/proxy/webhooks/send. One credit per send, charged once before the
 * first attempt and refunded when no attempt could be made; up to 3 attempts inside the request; a
 * delivery record per send; idempotent per deployment for 24 h with the answer kept for replays.
 */
export const CREDITS_PER_WEBHOOK = 1;
export const PROXY_MAX_ATTEMPTS = 3;
export const PAYLOAD_LIMIT_BYTES = 256 * 1024;
/** A send still "in progress" after this long was abandoned by a dead process: its key may be taken over. */
const ABANDONED_AFTER_MS = 2 * 60 * 1000;

export interface SendInput {
  url: string;
  payload: Record<string, unknown>;
  method?: 'POST' | 'PUT' | 'PATCH' | undefined;
  headers?: Record<string, string> | undefined;
  secret?: string | undefined;
  event_type?: string | undefined;
  idempotency_key?: string | undefined;
}

export interface SendReply {
  success: boolean;
  webhookId: string;
  statusCode: number | null;
  responseBody: string | null;
  error: string | null;
  creditsUsed: number;
  creditsRemaining: number | null;
  attempts: number;
  deliveredAt: string | null;
}

interface ClaimRow {
  id: string;
  request_hash: string | null;
  status: string;
  response: SendReply | null;
  updated_at: Date;
}

export async function sendWebhook(
  ctx: Ctx,
  deployment: DeploymentRow,
  input: SendInput,
  headerKey: string | undefined,
  /** The end user the send is for (X-End-User-Id), counted by end-user budgets. */
  endUserId: string | null = null,
): Promise<{ reply: SendReply; replayed: boolean }> {
  if (input.idempotency_key !== undefined && headerKey !== undefined && input.idempotency_key !== headerKey) {
    throw new ValidationError('idempotency_key and the Idempotency-Key header differ', [
      { field: 'idempotency_key', message: 'must equal the Idempotency-Key header when both are sent' },
    ]);
  }
  const key = input.idempotency_key ?? headerKey ?? null;
  const url = checkTargetUrl(input.url, ctx.config.webhookAllowPrivateNetworks);
  const body = Buffer.from(JSON.stringify(input.payload));
  if (body.length > PAYLOAD_LIMIT_BYTES) {
    throw new ValidationError(`payload is ${body.length} bytes; at most ${PAYLOAD_LIMIT_BYTES} are sent`, [
      { field: 'payload', message: `must be at most ${PAYLOAD_LIMIT_BYTES} bytes as JSON` },
    ]);
  }
  const method = input.method ?? 'POST';
  const hash = requestHash({ ...input, idempotency_key: undefined });

  const claimed = await claim(ctx, deployment, { key, hash, url: url.toString(), method, input });
  if ('replay' in claimed) return { reply: claimed.replay, replayed: true };
  const webhookId = claimed.id;

  // Charge once, before the first attempt.
  const now = ctx.clock.now();
  const actor = actorLabel(ctx.actor);
  const charged = await recordUsage(ctx, {
    deploymentId: deployment.id,
    organizationId: deployment.organization_id,
    cost: CREDITS_PER_WEBHOOK,
    now,
    action: 'webhook_send',
    toolName: 'webhook_send',
    mcpUserId: endUserId,
    metadata: { webhook_id: webhookId, host: url.host },
    actor,
  });
  if (charged.replayed) throw new Error('a charge without an invocation id is never a replay');
  const charge = charged.result;
  if (!charge.deducted && charge.budget) {
    ctx.metrics.deductionRefusals.inc({ source: 'webhook', reason: 'budget_exceeded' });
    await abandon(ctx, webhookId, 'budget exceeded');
    throw refusalUntil(
      'PROXY_BUDGET_EXCEEDED',
      'A budget of this organization would be exceeded by this send',
      { budgetId: charge.budget.id },
      charge.budget.resetsAt,
      now,
      'resetsAt',
    );
  }
  if (!charge.deducted) {
    ctx.metrics.deductionRefusals.inc({ source: 'webhook', reason: 'insufficient_credits' });
    await abandon(ctx, webhookId, 'insufficient credits');
    throw new AppError('INSUFFICIENT_CREDITS', `Sending a webhook costs ${CREDITS_PER_WEBHOOK} credit; the deployment has ${remainingAfter(charge) ?? 0}`, {
      creditsRequired: CREDITS_PER_WEBHOOK,
      creditsAvailable: remainingAfter(charge) ?? 0,
    });
  }

  ctx.metrics.deductions.inc({ source: 'webhook' });
  ctx.metrics.creditsDeducted.inc({ source: 'webhook' }, CREDITS_PER_WEBHOOK);

  const timestamp = Math.floor(ctx.clock.now().getTime() / 1000);
  const headers: Record<string, string> = {
    ...forwardableHeaders(input.headers),
    'content-type': 'application/json',
    'user-agent': 'creditgate-webhooks/1',
    ...(input.event_type ? { 'x-service-event': input.event_type } : {}),
    ...(input.secret ? signatureHeaders({ secret: input.secret, webhookId, timestamp, body }) : { 'x-service-webhook-id': webhookId }),
  };
  const outcome = await sendWithRetries(ctx.outbound, { url, method, headers, body }, { maxAttempts: PROXY_MAX_ATTEMPTS, now: () => ctx.clock.now() });

  let creditsUsed = CREDITS_PER_WEBHOOK;
  let creditsRemaining = remainingAfter(charge);
  if (!outcome.connected) {
    // The platform gives back its own charge; the deployment could not refund itself.
    const refund = await refundUsage({ ...ctx, actor: { type: 'system' } }, {
      usageId: charge.usageId!,
      reason: 'webhook could not be attempted',
      idempotencyKey: `webhook:${webhookId}`,
    });
    creditsUsed = 0;
    creditsRemaining = refund.credits_remaining;
  }
  ctx.metrics.webhookDeliveries.inc({ kind: 'proxy', outcome: outcome.last.ok ? 'delivered' : 'failed' });
  // docs/webhooks.md, The proxy (Unreachable hosts): a host no attempt could reach is the 403 refusal,
  // refunded above; once an attempt connected, a later refusal is only that send's last error, and the
  // send is charged and answered like any other. The answer, the record and the ledger say the same.
  if (!outcome.connected && outcome.last.unreachable) {
    const error = outcome.last.error ?? 'The host could not be reached';
    await abandon(ctx, webhookId, error, charge.usageId);
    throw urlNotAllowed(error);
  }
  const reply: SendReply = {
    success: outcome.last.ok,
    webhookId,
    statusCode: outcome.last.statusCode,
    responseBody: outcome.last.responseBody,
    error: outcome.last.ok ? null : outcome.last.error,
    creditsUsed,
    creditsRemaining,
    attempts: outcome.attempts,
    deliveredAt: outcome.deliveredAt?.toISOString() ?? null,
  };
  await ctx.db.query(
    `UPDATE webhook_deliveries SET status = $2, status_code = $3, response_body = $4, error = $5, attempt_count = $6,
       delivered_at = $7, response = $8, credits_charged = $9, usage_id = $10, updated_at = $11
     WHERE id = $1`,
    [
      webhookId,
      reply.success ? 'delivered' : 'failed',
      reply.statusCode,
      reply.responseBody,
      reply.error,
      reply.attempts,
      outcome.deliveredAt,
      JSON.stringify(reply),
      creditsUsed,
      charge.usageId,
      ctx.clock.now(),
    ],
    'webhook_send_done',
  );
  return { reply, replayed: false };
}

/**
 * Create the delivery record, or find the one this idempotency key already has: the same body
 * replays its answer, a different body is 422, one still running is 409 (unless abandoned).
 */
async function claim(
  ctx: Ctx,
  deployment: DeploymentRow,
  s: { key: string | null; hash: string; url: string; method: string; input: SendInput },
): Promise<{ id: string } | { replay: SendReply }> {
  const now = ctx.clock.now();
  const id = randomUUID();
  if (s.key !== null) {
    // A key older than the window is free again: the old record keeps its history without the key.
    await ctx.db.query(
      `UPDATE webhook_deliveries SET idempotency_key = NULL
       WHERE deployment_id = $1 AND idempotency_key = $2 AND created_at <= $3`,
      [deployment.id, s.key, new Date(now.getTime() - IDEMPOTENCY_WINDOW_MS)],
    );
  }
  const inserted = await ctx.db.query<{ id: string }>(
    `INSERT INTO webhook_deliveries (id, organization_id, deployment_id, event_type, url, method, payload, status,
       idempotency_key, request_hash, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'in_progress', $8, $9, $10, $10)
     ON CONFLICT (deployment_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
     RETURNING id`,
    [id, deployment.organization_id, deployment.id, s.input.event_type ?? null, s.url, s.method, JSON.stringify(s.input.payload), s.key, s.hash, now],
    'webhook_send_claim',
  );
  if (inserted[0]) return { id };
  const rows = await ctx.db.query<ClaimRow>(
    'SELECT id, request_hash, status, response, updated_at FROM webhook_deliveries WHERE deployment_id = $1 AND idempotency_key = $2',
    [deployment.id, s.key],
  );
  const existing = rows[0];
  if (!existing) return claim(ctx, deployment, s); // freed meanwhile
  if (existing.request_hash !== s.hash) {
    throw new AppError('IDEMPOTENCY_KEY_REUSED', 'This idempotency key was used with a different request in the last 24 hours');
  }
  if (existing.status !== 'in_progress' && existing.response) return { replay: existing.response };
  if (existing.updated_at.getTime() > now.getTime() - ABANDONED_AFTER_MS) {
    throw new AppError('IDEMPOTENCY_IN_PROGRESS', 'A send with this idempotency key is still in progress', {}, { 'retry-after': '1' });
  }
  // Abandoned by a process that died mid-send: take it over (one taker wins the compare-and-set).
  const taken = await ctx.db.query<{ id: string }>(
    `UPDATE webhook_deliveries SET updated_at = $3 WHERE id = $1 AND updated_at = $2 AND status = 'in_progress' RETURNING id`,
    [existing.id, existing.updated_at, now],
  );
  if (!taken[0]) throw new AppError('IDEMPOTENCY_IN_PROGRESS', 'A send with this idempotency key is still in progress', {}, { 'retry-after': '1' });
  return { id: existing.id };
}

/**
 * A send that ends before any delivery (no credits, host unreachable): recorded as failed with nothing
 * charged and no attempt, its key freed; `usageId` is the charge it made and refunded, if any.
 */
async function abandon(ctx: Ctx, id: string, error: string, usageId: string | null = null): Promise<void> {
  await ctx.db.query(
    `UPDATE webhook_deliveries SET status = 'failed', error = $2, idempotency_key = NULL, attempt_count = 0, credits_charged = 0,
       usage_id = $4, updated_at = $3 WHERE id = $1`,
    [id, error, ctx.clock.now(), usageId],
  );
}

/** The deployment's proxy sends, newest first (the delivery records of docs/webhooks.md, The proxy). */
export async function listProxyDeliveries(
  ctx: Ctx,
  deployment: DeploymentRow,
  input: { limit: number; cursor: KeysetPosition | null },
): Promise<{ items: DeliveryView[]; next: string | null }> {
  const rows = await ctx.db.query<DeliveryRow>(
    `SELECT * FROM webhook_deliveries WHERE deployment_id = $1 AND webhook_id IS NULL
       AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
     ORDER BY created_at DESC, id DESC LIMIT $4`,
    [deployment.id, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return { items: items.map(deliveryViewOf), next };
}

export async function getProxyDelivery(ctx: Ctx, deployment: DeploymentRow, id: string): Promise<DeliveryView> {
  if (!isUuid(id)) throw new NotFoundError('Delivery');
  const rows = await ctx.db.query<DeliveryRow>(
    'SELECT * FROM webhook_deliveries WHERE id = $1 AND deployment_id = $2 AND webhook_id IS NULL',
    [id, deployment.id],
  );
  if (!rows[0]) throw new NotFoundError('Delivery');
  return deliveryViewOf(rows[0]);
}

export interface WebhookQuota {
  creditsAvailable: number | null;
  creditsPerWebhook: number;
  webhooksAvailable: number | null;
  periodEnds: string;
}

/** GET /api/v1/proxy/webhooks/quota (docs/webhooks.md, The proxy). */
export async function webhookQuota(ctx: Ctx, deployment: DeploymentRow): Promise<WebhookQuota> {
  const now = ctx.clock.now();
  const balance = viewBalance(await readBalance(ctx.db, deployment.id, now, 'system'));
  return {
    creditsAvailable: balance.available,
    creditsPerWebhook: CREDITS_PER_WEBHOOK,
    webhooksAvailable: balance.available === null ? null : Math.floor(balance.available / CREDITS_PER_WEBHOOK),
    periodEnds: balance.periodEnd.toISOString(),
  };
}
