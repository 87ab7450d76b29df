import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { pageOf } from '../../http/envelope.js';
import { writeAudit } from '../audit/service.js';
import { effectiveFlags } from '../entitlements/flags.js';
import { isUuid } from '../../lib/ids.js';
import { authorize } from '../organizations/rbac.js';
import { featureDisabled } from '../quotas/ai-tokens.js';
import { findTemplate } from './catalog.js';
import { checkConfig, checkSubdomain, normalizeCustomDomain } from './checks.js';
import type { DomainChallenge } from './dns-challenge.js';
import { assertDomainClaimable, challengeView, claimOf, type DomainStatus, domainTaken, writeClaim } from './domain-claims.js';

/**
 * Template deployments of an organization (docs/templates.md): owners and admins manage them
 * (`templates.manage`), every role reads them (`templates.read`); API keys by scope (read to read,
 * write to change). The status machine and what may change in each status: docs/templates.md.
 */
export const STATUSES = ['pending', 'deploying', 'active', 'failed'] as const;
export type Status = (typeof STATUSES)[number];
/** The statuses in which config and custom_domain may change: before provisioning, or before a retry. */
const RECONFIGURABLE: Status[] = ['pending', 'failed'];

export interface TemplateDeploymentRow {
  id: string;
  organization_id: string;
  template_id: string;
  name: string;
  subdomain: string;
  custom_domain: string | null;
  custom_domain_status: DomainStatus | null;
  custom_domain_challenge: string | null;
  custom_domain_claimed_at: Date | null;
  custom_domain_verified_at: Date | null;
  config: Record<string, unknown>;
  status: Status;
  deployment_url: string | null;
  last_error: string | null;
  attempts: number;
  next_attempt_at: Date | null;
  leased_until: Date | null;
  created_by: string | null;
  created_at: Date;
  updated_at: Date;
}

export interface TemplateDeploymentView {
  id: string;
  organization_id: string;
  template_id: string;
  name: string;
  subdomain: string;
  custom_domain: string | null;
  custom_domain_status: DomainStatus | null;
  custom_domain_challenge: DomainChallenge | null;
  custom_domain_verified_at: string | null;
  config: Record<string, unknown>;
  status: Status;
  deployment_url: string | null;
  last_error: string | null;
  attempts: number;
  next_attempt_at: string | null;
  created_at: string;
  updated_at: string;
}

export const deploymentView = (d: TemplateDeploymentRow): TemplateDeploymentView => ({
  id: d.id,
  organization_id: d.organization_id,
  template_id: d.template_id,
  name: d.name,
  subdomain: d.subdomain,
  custom_domain: d.custom_domain,
  custom_domain_status: d.custom_domain_status,
  custom_domain_challenge: challengeView(d),
  custom_domain_verified_at: d.custom_domain_verified_at?.toISOString() ?? null,
  config: d.config,
  status: d.status,
  deployment_url: d.deployment_url,
  last_error: d.last_error,
  attempts: d.attempts,
  next_attempt_at: d.next_attempt_at?.toISOString() ?? null,
  created_at: d.created_at.toISOString(),
  updated_at: d.updated_at.toISOString(),
});

/** One audit row per status change (docs/templates.md, Status machine), in the transaction of the change. */
export async function auditTransition(
  tx: Queryable,
  ctx: Ctx,
  row: TemplateDeploymentRow,
  from: Status,
  metadata: Record<string, unknown> = {},
): Promise<void> {
  await writeAudit(tx, ctx, {
    organizationId: row.organization_id,
    action: 'status_change',
    resourceType: 'template_deployment',
    resourceId: row.id,
    metadata: { from, to: row.status, attempts: row.attempts, ...metadata },
  });
}

export async function getScoped(db: Queryable, organizationId: string, id: string): Promise<TemplateDeploymentRow> {
  if (!isUuid(id)) throw new NotFoundError('Template deployment');
  const rows = await db.query<TemplateDeploymentRow>('SELECT * FROM template_deployments WHERE id = $1 AND organization_id = $2', [id, organizationId]);
  if (!rows[0]) throw new NotFoundError('Template deployment');
  return rows[0];
}

/**
 * docs/templates.md, Custom domains: a custom domain needs the `custom_domain` flag of the organization's
 * primary deployment, as its entitlement snapshot shows it: a suspended deployment has every flag off.
 */
export async function assertCustomDomainAllowed(ctx: Ctx, organizationId: string): Promise<void> {
  const rows = await ctx.db.query<{ tier: string; flag_overrides: unknown; status: string }>(
    'SELECT tier, flag_overrides, status FROM deployments WHERE organization_id = $1 AND is_primary',
    [organizationId],
  );
  const primary = rows[0];
  if (primary?.status !== 'active' || !effectiveFlags(primary.tier, primary.flag_overrides).custom_domain) {
    throw featureDisabled(ctx, 'custom_domain');
  }
}

/** Unique violations and a template deleted meanwhile, as the caller's errors. */
function mapWriteError(err: unknown, input: { subdomain?: string | undefined; customDomain?: string | null | undefined }): unknown {
  const e = err as { code?: string; message?: string };
  const message = String(e.message ?? '');
  if (e.code === '23505' && message.includes('template_deployments_subdomain_key')) {
    return new AppError('CONFLICT', `The subdomain "${input.subdomain}" is taken`);
  }
  // Only verified domains are unique: a claim never collides, a verification racing another one does.
  if (e.code === '23505' && message.includes('template_deployments_custom_domain_key')) return domainTaken(input.customDomain);
  if (e.code === '23503' && message.includes('template_id')) return ValidationError.forField('template_id', 'is not an active template');
  return err;
}

export async function createTemplateDeployment(
  ctx: Ctx,
  input: { organizationId: string; templateId: string; name: string; subdomain: string; customDomain?: string | null | undefined; config?: unknown },
): Promise<TemplateDeploymentView> {
  const auth = await authorize(ctx, input.organizationId, 'templates.manage');
  const config = checkConfig(input.config ?? {});
  const template = await findTemplate(ctx.db, input.templateId);
  if (!template?.is_active) throw ValidationError.forField('template_id', 'is not an active template (GET /templates lists them)');
  checkSubdomain(input.subdomain, ctx.config);
  const customDomain = input.customDomain ? normalizeCustomDomain(input.customDomain, ctx.config) : null;
  if (customDomain) await assertCustomDomainAllowed(ctx, input.organizationId);
  const now = ctx.clock.now();
  const claim = claimOf(customDomain, now);
  try {
    return await ctx.db.transaction(async (tx) => {
      if (customDomain) await assertDomainClaimable(tx, customDomain, null);
      const rows = await tx.query<TemplateDeploymentRow>(
        `INSERT INTO template_deployments (organization_id, template_id, name, subdomain, custom_domain, custom_domain_status, custom_domain_challenge,
           custom_domain_claimed_at, config, status, next_attempt_at, created_by, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $10, $10) RETURNING *`,
        [
          input.organizationId,
          template.id,
          input.name,
          input.subdomain,
          claim.custom_domain,
          claim.custom_domain_status,
          claim.custom_domain_challenge,
          claim.custom_domain_claimed_at,
          JSON.stringify(config),
          now,
          auth.userId,
        ],
      );
      const created = rows[0]!;
      await writeAudit(tx, ctx, {
        organizationId: input.organizationId,
        action: 'create',
        resourceType: 'template_deployment',
        resourceId: created.id,
        metadata: { status: created.status, template_id: template.id, subdomain: created.subdomain, custom_domain: customDomain },
      });
      return deploymentView(created);
    });
  } catch (err) {
    throw mapWriteError(err, { subdomain: input.subdomain, customDomain });
  }
}

export async function listTemplateDeployments(
  ctx: Ctx,
  input: { organizationId: string; limit: number; cursor: KeysetPosition | null },
): Promise<{ items: TemplateDeploymentView[]; next: string | null }> {
  await authorize(ctx, input.organizationId, 'templates.read');
  const rows = await ctx.db.query<TemplateDeploymentRow>(
    `SELECT * FROM template_deployments WHERE organization_id = $1
       AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
     ORDER BY created_at DESC, id DESC LIMIT $4`,
    [input.organizationId, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return { items: items.map(deploymentView), next };
}

export async function readTemplateDeployment(ctx: Ctx, organizationId: string, id: string): Promise<TemplateDeploymentView> {
  await authorize(ctx, organizationId, 'templates.read');
  return deploymentView(await getScoped(ctx.db, organizationId, id));
}

/**
 * `name` may change in any status; `config` and `custom_domain` (what the provisioner is given) only
 * while `pending` or `failed`, else 409. A guarded write: the worker may claim the row meanwhile.
 */
export async function updateTemplateDeployment(
  ctx: Ctx,
  input: { organizationId: string; id: string; name?: string | undefined; customDomain?: string | null | undefined; config?: unknown },
): Promise<TemplateDeploymentView> {
  await authorize(ctx, input.organizationId, 'templates.manage');
  const config = input.config === undefined ? undefined : checkConfig(input.config);
  const customDomain =
    input.customDomain === undefined || input.customDomain === null ? input.customDomain : normalizeCustomDomain(input.customDomain, ctx.config);
  const before = await getScoped(ctx.db, input.organizationId, input.id);
  const reconfigures = config !== undefined || customDomain !== undefined;
  if (reconfigures && !RECONFIGURABLE.includes(before.status)) throw notReconfigurable(before.status);
  if (customDomain) await assertCustomDomainAllowed(ctx, input.organizationId);
  // The same domain again keeps its claim (and challenge, and verification); another one is a new claim.
  const reclaims = customDomain !== undefined && customDomain !== before.custom_domain;
  const now = ctx.clock.now();
  try {
    return await ctx.db.transaction(async (tx) => {
      if (reclaims && customDomain) await assertDomainClaimable(tx, customDomain, input.id);
      const rows = await tx.query<TemplateDeploymentRow>(
        `UPDATE template_deployments SET name = $3, config = $4, updated_at = $5
         WHERE id = $1 AND organization_id = $2 AND (NOT $6 OR status = ANY($7::text[])) RETURNING *`,
        [input.id, input.organizationId, input.name ?? before.name, JSON.stringify(config ?? before.config), now, reconfigures, RECONFIGURABLE],
      );
      let after = rows[0];
      if (!after) {
        const current = await getScoped(tx, input.organizationId, input.id);
        throw notReconfigurable(current.status);
      }
      if (reclaims) after = await writeClaim(tx, input.organizationId, input.id, claimOf(customDomain ?? null, now), now);
      await writeAudit(tx, ctx, {
        organizationId: input.organizationId,
        action: 'update',
        resourceType: 'template_deployment',
        resourceId: after.id,
        metadata: { before: deploymentView(before), after: deploymentView(after) },
      });
      return deploymentView(after);
    });
  } catch (err) {
    throw mapWriteError(err, { customDomain });
  }
}

const notReconfigurable = (status: Status) =>
  new AppError('CONFLICT', `config and custom_domain can change only while the deployment is pending or failed; it is ${status}`);

/** Any status but `deploying` (the provisioner may be creating it right now): 409 then. */
export async function deleteTemplateDeployment(ctx: Ctx, organizationId: string, id: string): Promise<TemplateDeploymentView> {
  await authorize(ctx, organizationId, 'templates.manage');
  await getScoped(ctx.db, organizationId, id);
  return ctx.db.transaction(async (tx) => {
    const rows = await tx.query<TemplateDeploymentRow>(
      `DELETE FROM template_deployments WHERE id = $1 AND organization_id = $2 AND status <> 'deploying' RETURNING *`,
      [id, organizationId],
    );
    const gone = rows[0];
    if (!gone) {
      await getScoped(tx, organizationId, id);
      throw new AppError('CONFLICT', 'A deploying deployment cannot be deleted; wait until it is active or failed');
    }
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'delete',
      resourceType: 'template_deployment',
      resourceId: id,
      metadata: { status: gone.status, subdomain: gone.subdomain, custom_domain: gone.custom_domain },
    });
    return deploymentView(gone);
  });
}

/** docs/templates.md, Status machine: `failed` → `deploying`, due at once with a fresh round of attempts; any other status is 409. */
export async function retryTemplateDeployment(ctx: Ctx, organizationId: string, id: string): Promise<TemplateDeploymentView> {
  await authorize(ctx, organizationId, 'templates.manage');
  await getScoped(ctx.db, organizationId, id);
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    const rows = await tx.query<TemplateDeploymentRow>(
      `UPDATE template_deployments SET status = 'deploying', attempts = 0, next_attempt_at = $3, leased_until = NULL, updated_at = $3
       WHERE id = $1 AND organization_id = $2 AND status = 'failed' RETURNING *`,
      [id, organizationId, now],
    );
    const after = rows[0];
    if (!after) {
      const current = await getScoped(tx, organizationId, id);
      throw new AppError('CONFLICT', `Only a failed deployment can be retried; this one is ${current.status}`);
    }
    await auditTransition(tx, ctx, after, 'failed', { reason: 'retry' });
    return deploymentView(after);
  });
}
