import { type Ctx, actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { type AppError, NotFoundError, UnauthorizedError } from '../../errors.js';
import { DEPLOYMENT_SECRET_PREFIX, generateDeploymentSecret, hasTokenLength, isWellFormedToken, safeEqual, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import { type DeploymentTerms, openBalance, syncBalance } from '../credits/index.js';
import type { Tier } from '../../lib/tiers.js';
import { invalidateResolveCache } from '../metering/resolve.js';
import { isUuid } from '../../lib/ids.js';
import { loadDeployment } from '../metering/state.js';

export interface DeploymentRow extends DeploymentTerms {
  id: string;
  organization_id: string;
  name: string;
  status: 'active' | 'suspended';
  is_primary: boolean;
  secret_hash: string;
  secret_prefix: string;
  flag_overrides: Record<string, boolean>;
  created_at: Date;
  updated_at: Date;
}

// What a `deployment` route's principal is (authenticateDeployment), for http/auth.ts and lib/caches.ts, which import no module.
declare module '../../lib/principals.js' {
  interface Principals {
    deployment: DeploymentRow;
  }
}

/** Create a deployment with its secret and balance row; the secret is returned once and kept only as a hash. */
export async function createDeployment(
  tx: Queryable,
  ctx: Ctx,
  input: { organizationId: string; name: string; tier: Tier; isPrimary: boolean },
): Promise<{ deployment: DeploymentRow; secret: string }> {
  const now = ctx.clock.now();
  const secret = generateDeploymentSecret();
  const rows = await tx.query<DeploymentRow>(
    `INSERT INTO deployments (organization_id, name, tier, status, is_primary, secret_hash, secret_prefix, billing_anchor, created_at, updated_at)
     VALUES ($1, $2, $3, 'active', $4, $5, $6, $7, $7, $7) RETURNING *`,
    [input.organizationId, input.name, input.tier, input.isPrimary, sha256Hex(secret), secret.slice(0, 10), now],
  );
  const deployment = rows[0]!;
  await openBalance(tx, {
    deploymentId: deployment.id,
    organizationId: input.organizationId,
    terms: deployment,
    actor: actorLabel(ctx.actor),
    now,
  });
  await writeAudit(tx, ctx, {
    organizationId: input.organizationId,
    action: 'create',
    resourceType: 'deployment',
    resourceId: deployment.id,
    metadata: { tier: input.tier, is_primary: input.isPrimary },
  });
  return { deployment, secret };
}

/** Fetch-or-throw, scoped by organization when one is given (another tenant's row is "not found"). */
export async function getDeployment(db: Queryable, id: string, organizationId?: string): Promise<DeploymentRow> {
  if (!isUuid(id)) throw new NotFoundError('Deployment');
  const rows = await db.query<DeploymentRow>(
    'SELECT * FROM deployments WHERE id = $1 AND ($2::uuid IS NULL OR organization_id = $2::uuid)',
    [id, organizationId ?? null],
  );
  if (!rows[0]) throw new NotFoundError('Deployment');
  return rows[0];
}

export async function listDeployments(db: Queryable, organizationId?: string): Promise<DeploymentRow[]> {
  return db.query<DeploymentRow>(
    'SELECT * FROM deployments WHERE ($1::uuid IS NULL OR organization_id = $1::uuid) ORDER BY created_at, id',
    [organizationId ?? null],
  );
}

/**
 * Deployment credentials (X-Deployment-ID / X-Deployment-Secret, or the entitlement check's body).
 * Unknown id, wrong secret, deleted organization: one answer, so ids cannot be probed. The row comes
 * from the instance's cache, which every instance drops when a secret is rotated or the deployment or
 * its organization changes (docs/adr/0005-cached-checks.md); `fresh` reads the database.
 */
export async function authenticateDeployment(
  ctx: Pick<Ctx, 'db' | 'caches'>,
  id: string | undefined,
  secret: string | undefined,
  error: () => AppError = () => new UnauthorizedError('Invalid deployment credentials'),
  fresh = false,
): Promise<DeploymentRow> {
  if (!id || !secret || !isUuid(id) || !hasTokenLength(secret, DEPLOYMENT_SECRET_PREFIX)) throw error();
  // A cached deployment is judged by its secret's hash alone; only a miss, which reads the database,
  // checks the checksum first, so a mistyped secret still costs no read.
  const cached = fresh ? undefined : ctx.caches.deployments.get(id);
  if (cached === undefined && !isWellFormedToken(secret, DEPLOYMENT_SECRET_PREFIX)) throw error();
  const found = cached !== undefined ? cached : await loadDeployment(ctx, id, fresh);
  if (!found || found.orgDeleted || !safeEqual(found.row.secret_hash, sha256Hex(secret))) throw error();
  return found.row;
}

/** After a change to deployments, secrets, keys or organizations has committed: every instance drops its principals. */
export function principalsChanged(ctx: Pick<Ctx, 'bus'>): void {
  ctx.bus.publish('principal-cache');
}

/** Operator: change tier and/or status. A tier change applies the new allocation at once (docs/metering.md, Periods, tier changes and overrides). */
export async function updateDeployment(
  ctx: Ctx,
  id: string,
  input: { tier?: Tier | undefined; status?: 'active' | 'suspended' | undefined },
): Promise<DeploymentRow> {
  const now = ctx.clock.now();
  const result = await ctx.db.transaction(async (tx) => {
    const before = await lockDeployment(tx, id);
    const rows = await tx.query<DeploymentRow>('UPDATE deployments SET status = $2, updated_at = $3 WHERE id = $1 RETURNING *', [
      id,
      input.status ?? before.status,
      now,
    ]);
    const after = input.tier && input.tier !== before.tier ? await changeTier(tx, ctx, before, input.tier) : rows[0]!;
    await writeAudit(tx, ctx, {
      organizationId: after.organization_id,
      action: 'update',
      resourceType: 'deployment',
      resourceId: id,
      metadata: { before: { tier: before.tier, status: before.status }, after: { tier: after.tier, status: after.status } },
    });
    return after;
  });
  tierCachesChanged(ctx);
  return result;
}

/**
 * A tier change inside the caller's transaction, the deployment row locked (docs/metering.md): the new allocation
 * applies at once and `deployment.tier_changed` is written with it. The caller clears the caches after
 * COMMIT (`tierCachesChanged`).
 */
export async function changeTier(tx: Queryable, ctx: Ctx, before: DeploymentRow, tier: Tier): Promise<DeploymentRow> {
  const now = ctx.clock.now();
  const rows = await tx.query<DeploymentRow>('UPDATE deployments SET tier = $2, updated_at = $3 WHERE id = $1 RETURNING *', [before.id, tier, now]);
  const after = rows[0]!;
  if (after.tier !== before.tier) {
    await syncBalance(tx, before.id, now, actorLabel(ctx.actor));
    await emitEvent(tx, {
      organizationId: after.organization_id,
      deploymentId: before.id,
      type: 'deployment.tier_changed',
      data: { deployment_id: before.id, from: before.tier, to: after.tier },
      at: now,
    });
  }
  return after;
}

/** After a tier or status change has committed: resolve answers and cached terms are stale on every instance. */
export function tierCachesChanged(ctx: Ctx): void {
  invalidateResolveCache(ctx);
  ctx.bus.publish('terms-cache');
}

export async function lockDeployment(tx: Queryable, id: string): Promise<DeploymentRow> {
  if (!isUuid(id)) throw new NotFoundError('Deployment');
  const rows = await tx.query<DeploymentRow>('SELECT * FROM deployments WHERE id = $1 FOR UPDATE', [id]);
  if (!rows[0]) throw new NotFoundError('Deployment');
  return rows[0];
}

export interface OverrideInput {
  monthly_credits?: number | null;
  api_rate_limit?: number | null;
  ai_tokens_limit?: number | null;
  expires_at?: string | null;
}

/**
 * Operator overrides (docs/metering.md, docs/operator.md): a PUT merges (a field left out keeps its value, null removes it);
 * one expiry covers the set. The monthly allocation follows at once, in the same transaction.
 */
export async function setOverrides(ctx: Ctx, id: string, input: OverrideInput | 'clear'): Promise<DeploymentRow> {
  const now = ctx.clock.now();
  const result = await ctx.db.transaction(async (tx) => {
    const before = await lockDeployment(tx, id);
    // An override set that has lapsed is gone: a new PUT merges onto nothing, not onto stale values.
    const lapsed = before.override_expires_at !== null && before.override_expires_at.getTime() <= now.getTime();
    const pick = <K extends keyof OverrideInput>(key: K, current: unknown) =>
      input === 'clear' ? null : input[key] === undefined ? (lapsed ? null : current) : input[key];
    const expiresAt = pick('expires_at', before.override_expires_at);
    const rows = await tx.query<DeploymentRow>(
      `UPDATE deployments SET override_monthly_credits = $2, override_api_rate_limit = $3, override_ai_tokens_limit = $4,
         override_expires_at = $5, updated_at = $6 WHERE id = $1 RETURNING *`,
      [
        id,
        pick('monthly_credits', before.override_monthly_credits),
        pick('api_rate_limit', before.override_api_rate_limit),
        pick('ai_tokens_limit', before.override_ai_tokens_limit),
        expiresAt === null ? null : new Date(expiresAt as string | Date),
        now,
      ],
    );
    const after = rows[0]!;
    await syncBalance(tx, id, now, actorLabel(ctx.actor));
    await writeAudit(tx, ctx, {
      organizationId: after.organization_id,
      action: input === 'clear' ? 'delete' : 'override',
      resourceType: 'deployment_override',
      resourceId: id,
      metadata: { before: overridesOf(before), after: overridesOf(after) },
    });
    return after;
  });
  // Rate limits of service calls read cached terms: every instance drops them (docs/limits.md: changes of tier or overrides drop the terms at once).
  ctx.bus.publish('terms-cache');
  return result;
}

/** The overrides in force at `now` (a lapsed set reads as none). */
export function overridesOf(d: DeploymentRow, now?: Date) {
  if (now && d.override_expires_at !== null && d.override_expires_at.getTime() <= now.getTime()) {
    return { monthly_credits: null, api_rate_limit: null, ai_tokens_limit: null, expires_at: null };
  }
  return {
    monthly_credits: d.override_monthly_credits,
    api_rate_limit: d.override_api_rate_limit,
    ai_tokens_limit: d.override_ai_tokens_limit,
    expires_at: d.override_expires_at?.toISOString() ?? null,
  };
}

/** Operator per-flag overrides: true/false pins a flag, null returns it to the tier's value. */
export async function setFlagOverrides(ctx: Ctx, id: string, input: Record<string, boolean | null>): Promise<DeploymentRow> {
  const now = ctx.clock.now();
  const result = await ctx.db.transaction(async (tx) => {
    const before = await lockDeployment(tx, id);
    const next: Record<string, boolean> = { ...before.flag_overrides };
    for (const [flag, value] of Object.entries(input)) {
      if (value === null) delete next[flag];
      else next[flag] = value;
    }
    const rows = await tx.query<DeploymentRow>(
      'UPDATE deployments SET flag_overrides = $2, updated_at = $3 WHERE id = $1 RETURNING *',
      [id, JSON.stringify(next), now],
    );
    await writeAudit(tx, ctx, {
      organizationId: before.organization_id,
      action: 'override',
      resourceType: 'deployment_flags',
      resourceId: id,
      metadata: { before: before.flag_overrides, after: next },
    });
    return rows[0]!;
  });
  invalidateResolveCache(ctx);
  principalsChanged(ctx);
  return result;
}

/** A new deployment secret; the old one stops working with this commit. */
export async function rotateDeploymentSecret(ctx: Ctx, id: string, organizationId?: string): Promise<{ secret: string }> {
  if (!isUuid(id)) throw new NotFoundError('Deployment');
  const secret = generateDeploymentSecret();
  await ctx.db.transaction(async (tx) => {
    const rows = await tx.query<{ organization_id: string }>(
      `UPDATE deployments SET secret_hash = $3, secret_prefix = $4, updated_at = $5
       WHERE id = $1 AND ($2::uuid IS NULL OR organization_id = $2::uuid) RETURNING organization_id`,
      [id, organizationId ?? null, sha256Hex(secret), secret.slice(0, 10), ctx.clock.now()],
    );
    if (!rows[0]) throw new NotFoundError('Deployment');
    await writeAudit(tx, ctx, {
      organizationId: rows[0].organization_id,
      action: 'rotate_secret',
      resourceType: 'deployment',
      resourceId: id,
    });
  });
  principalsChanged(ctx);
  return { secret };
}
