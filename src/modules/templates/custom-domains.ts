import { type Ctx, type Deps, systemCtx } from '../../context.js';
import { pgArray } from '../../db/arrays.js';
import type { Queryable } from '../../db/client.js';
import { AppError } from '../../errors.js';
import { limitAttempt } from '../../lib/rate-limiter.js';
import { TIER_TABLE, TIERS } from '../../lib/tiers.js';
import { writeAudit } from '../audit/service.js';
import { authorize } from '../organizations/rbac.js';
import { assertCustomDomainAllowed, auditTransition, getScoped, type TemplateDeploymentRow } from './deployments.js';
import { challengeOf, type LookupResult, lookupChallenge } from './dns-challenge.js';
import { CLAIM_TTL_MS, domainTaken } from './domain-claims.js';

/**
 * Verification and lapse of custom-domain claims (docs/templates.md, Custom domains). The winner of a
 * domain is the first deployment whose claimant proves control of its DNS, not the first to claim it.
 */

/** Verification lookups per template deployment per sliding hour. */
export const VERIFY_LIMIT = 10;
const HOUR = 60 * 60_000;

/**
 * POST …/{tdId}/verify-domain: look the claim's TXT record up; on a match the domain becomes verified
 * here and every other claim of it is released. A lookup that fails is an answer (`verified: false`
 * with a reason), not an error: DNS trouble never becomes a 5xx.
 */
export async function verifyCustomDomain(ctx: Ctx, organizationId: string, id: string): Promise<LookupResult> {
  await authorize(ctx, organizationId, 'templates.manage');
  const row = await getScoped(ctx.db, organizationId, id);
  // Each call may send a DNS query through our resolvers on the caller's behalf: bounded per deployment.
  await limitAttempt(
    ctx.limiter,
    [{ subject: `verify-domain:${row.id}`, name: 'verification', limit: VERIFY_LIMIT, windowMs: HOUR, exact: true }],
    'domain verifications for this template deployment',
  );
  if (!row.custom_domain || !row.custom_domain_challenge) {
    throw new AppError('CONFLICT', 'This template deployment has no custom domain to verify: set custom_domain first');
  }
  if (row.custom_domain_status === 'verified') return { verified: true };
  // A claim made while the tier had custom domains is not verified after the tier lost them.
  await assertCustomDomainAllowed(ctx, organizationId);
  const result = await lookupChallenge(ctx.config, challengeOf(row.custom_domain, row.custom_domain_challenge));
  if (!result.verified) return result;
  await markVerified(ctx, row);
  return result;
}

/** The claim becomes verified (guarded: the claim looked up is still the one stored), the others are released. */
async function markVerified(ctx: Ctx, claim: TemplateDeploymentRow): Promise<void> {
  const now = ctx.clock.now();
  try {
    await ctx.db.transaction(async (tx) => {
      const rows = await tx.query<TemplateDeploymentRow>(
        `UPDATE template_deployments SET custom_domain_status = 'verified', custom_domain_verified_at = $5, updated_at = $5
         WHERE id = $1 AND organization_id = $2 AND custom_domain = $3 AND custom_domain_challenge = $4 AND custom_domain_status = 'pending_verification'
         RETURNING *`,
        [claim.id, claim.organization_id, claim.custom_domain, claim.custom_domain_challenge, now],
      );
      if (!rows[0]) throw new AppError('CONFLICT', 'The custom domain of this template deployment changed during verification; verify again');
      await writeAudit(tx, ctx, {
        organizationId: claim.organization_id,
        action: 'custom_domain_verified',
        resourceType: 'template_deployment',
        resourceId: claim.id,
        metadata: { custom_domain: claim.custom_domain },
      });
      await reprovisionIfActive(tx, ctx, claim.id, 'custom_domain_verified');
      await releaseOtherClaims(tx, ctx, claim, now);
    });
  } catch (err) {
    const e = err as { code?: string; message?: string };
    if (e.code === '23505' && String(e.message ?? '').includes('template_deployments_custom_domain_key')) throw domainTaken(claim.custom_domain);
    throw err;
  }
}

/**
 * Every other claim of the domain ends: domain null, status lapsed, an audit row in its own
 * organization written by `system` (the verifier is of another tenant and stays unnamed there), and
 * the provisioner told by a new provisioning round if the deployment is active.
 */
async function releaseOtherClaims(tx: Queryable, ctx: Ctx, winner: TemplateDeploymentRow, now: Date): Promise<void> {
  const system = systemCtx(ctx);
  const released = await tx.query<TemplateDeploymentRow>(
    `UPDATE template_deployments SET custom_domain = NULL, custom_domain_status = 'lapsed', custom_domain_challenge = NULL,
       custom_domain_claimed_at = NULL, custom_domain_verified_at = NULL, updated_at = $3
     WHERE custom_domain = $1 AND id <> $2 AND custom_domain_status = 'pending_verification' RETURNING *`,
    [winner.custom_domain, winner.id, now],
  );
  await afterRelease(tx, system, released, () => winner.custom_domain, 'verified_by_another_deployment');
}

/**
 * Each released claim: an audit row `custom_domain_released` in its own organization (actor `system`,
 * with the domain and why), and a new provisioning round if the deployment is active.
 */
async function afterRelease<R extends TemplateDeploymentRow>(
  tx: Queryable,
  system: Ctx,
  released: R[],
  domainOf: (row: R) => string | null,
  reason: string,
): Promise<void> {
  for (const row of released) {
    await writeAudit(tx, system, {
      organizationId: row.organization_id,
      action: 'custom_domain_released',
      resourceType: 'template_deployment',
      resourceId: row.id,
      metadata: { custom_domain: domainOf(row), reason },
    });
    await reprovisionIfActive(tx, system, row.id, 'custom_domain_released');
  }
}

/**
 * An active deployment whose custom domain changed is provisioned again (active → deploying, due at
 * once): the provisioner learns of changes only through provisioning calls, which it treats as
 * "create or update". One that is pending, deploying or failed gets the change at its next attempt.
 */
async function reprovisionIfActive(tx: Queryable, ctx: Ctx, id: string, reason: string): Promise<void> {
  const now = ctx.clock.now();
  const rows = await tx.query<TemplateDeploymentRow>(
    `UPDATE template_deployments SET status = 'deploying', attempts = 0, next_attempt_at = $2, leased_until = NULL, updated_at = $2
     WHERE id = $1 AND status = 'active' RETURNING *`,
    [id, now],
  );
  if (rows[0]) await auditTransition(tx, ctx, rows[0], 'active', { reason });
}

/**
 * The custom-domain-lapse worker (src/workers/catalog.ts): claims unverified seven days after they
 * were made become `lapsed` with their domain null, one audit row each. The provisioner is not
 * called: it was never given an unverified domain.
 */
export async function lapseDomainClaims(deps: Deps, batch: number): Promise<number> {
  const ctx = systemCtx(deps);
  const now = deps.clock.now();
  return deps.db.transaction(async (tx) => {
    const rows = await tx.query<TemplateDeploymentRow & { released: string }>(
      `WITH due AS (
         SELECT id, custom_domain AS released FROM template_deployments
         WHERE custom_domain_status = 'pending_verification' AND custom_domain_claimed_at <= $1
         ORDER BY custom_domain_claimed_at LIMIT $2 FOR UPDATE SKIP LOCKED
       )
       UPDATE template_deployments d SET custom_domain = NULL, custom_domain_status = 'lapsed', custom_domain_challenge = NULL,
         custom_domain_claimed_at = NULL, custom_domain_verified_at = NULL, updated_at = $3
       FROM due WHERE d.id = due.id RETURNING d.*, due.released`,
      [new Date(now.getTime() - CLAIM_TTL_MS), batch, now],
    );
    for (const row of rows) {
      await writeAudit(tx, ctx, {
        organizationId: row.organization_id,
        action: 'custom_domain_lapsed',
        resourceType: 'template_deployment',
        resourceId: row.id,
        metadata: { custom_domain: row.released, reason: 'not_verified_within_7_days' },
      });
    }
    return rows.length;
  });
}

/** The tiers whose flags include custom domains (the tier table, docs/entitlements.md). */
const DOMAIN_TIERS = TIERS.filter((t) => TIER_TABLE[t].flags.custom_domain);

/**
 * The custom-domain-entitlement worker (src/workers/catalog.ts): a verified domain of an organization
 * deleted, or whose primary deployment no longer has the `custom_domain` flag (a lower tier, the
 * operator's override, a suspension), is released, as a claim another deployment verified is, and an active
 * deployment is provisioned again without it (docs/templates.md, Custom domains). The flag is read as
 * `effectiveFlags` reads it: an override that is a boolean, else the tier's.
 */
export async function releaseUnentitledDomains(deps: Deps, batch: number): Promise<number> {
  const ctx = systemCtx(deps);
  const now = deps.clock.now();
  return deps.db.transaction(async (tx) => {
    const rows = await tx.query<TemplateDeploymentRow & { released: string }>(
      `WITH due AS (
         SELECT td.id, td.custom_domain AS released FROM template_deployments td
         WHERE td.custom_domain_status = 'verified'
           AND NOT EXISTS (
             SELECT 1 FROM deployments p JOIN organizations o ON o.id = p.organization_id AND o.deleted_at IS NULL
             WHERE p.organization_id = td.organization_id AND p.is_primary AND p.status = 'active'
               AND CASE WHEN jsonb_typeof(p.flag_overrides -> 'custom_domain') = 'boolean'
                        THEN (p.flag_overrides ->> 'custom_domain')::boolean
                        ELSE p.tier = ANY($1::text[]) END)
         ORDER BY td.id LIMIT $2 FOR UPDATE OF td SKIP LOCKED
       )
       UPDATE template_deployments d SET custom_domain = NULL, custom_domain_status = 'lapsed', custom_domain_challenge = NULL,
         custom_domain_claimed_at = NULL, custom_domain_verified_at = NULL, updated_at = $3
       FROM due WHERE d.id = due.id RETURNING d.*, due.released`,
      [pgArray(DOMAIN_TIERS), batch, now],
      'templates_release_unentitled_domains',
    );
    await afterRelease(tx, ctx, rows, (row) => row.released, 'feature_not_available');
    return rows.length;
  });
}
