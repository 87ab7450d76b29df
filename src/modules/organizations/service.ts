import type { Ctx } from '../../context.js';
import { lockName } from '../../db/locks.js';
import { AppError, NotFoundError } from '../../errors.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import { createDeployment, type DeploymentRow, principalsChanged } from '../deployments/service.js';
import type { Plan, Tier } from '../../lib/tiers.js';
import { authorize, holdsSql, isAuthorized } from './rbac.js';

export interface OrganizationRow {
  id: string;
  name: string;
  slug: string;
  plan: Plan;
  logo_url: string | null;
  website: string | null;
  subscription_status: string | null;
  deleted_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export const SLUG_RE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export interface CreateOrganizationInput {
  name: string;
  slug: string;
  plan?: Plan | undefined;
  /** The creator becomes its owner. */
  ownerUserId?: string | undefined;
  /** The primary deployment's tier; NEW_ORG_TIER when left out. */
  tier?: Tier | undefined;
}

/**
 * An organization with its primary deployment (docs/accounts.md, Organizations) and the creator as owner, in one transaction:
 * no organization is ever left without its deployment.
 */
/**
 * Organizations one user may own at once when creating them (docs/accounts.md, Organizations): each is
 * a primary deployment, a balance row and a share of the operator's lists, for one sign-up. The
 * operator's API creates past it.
 */
export const MAX_OWNED_ORGANIZATIONS = 100;

export async function createOrganization(
  ctx: Ctx,
  input: CreateOrganizationInput,
  options: { capOwned?: boolean } = {},
): Promise<{ organization: OrganizationRow; deployment: DeploymentRow; deploymentSecret: string }> {
  const now = ctx.clock.now();
  try {
    const created = await ctx.db.transaction(async (tx) => {
      if (options.capOwned && input.ownerUserId) {
        // Two creations of one user at once count one after the other.
        await lockName(tx, `creditgate-owned-organizations:${input.ownerUserId}`);
        const owned = await tx.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
           WHERE m.user_id = $1 AND m.role = 'owner'`,
          [input.ownerUserId],
        );
        if (owned[0]!.n >= MAX_OWNED_ORGANIZATIONS) {
          throw new AppError('CONFLICT', `A user owns at most ${MAX_OWNED_ORGANIZATIONS} organizations; delete one to create another`);
        }
      }
      const rows = await tx.query<OrganizationRow>(
        `INSERT INTO organizations (name, slug, plan, created_at, updated_at) VALUES ($1, $2, $3, $4, $4) RETURNING *`,
        [input.name, input.slug, input.plan ?? 'free', now],
      );
      const organization = rows[0]!;
      if (input.ownerUserId) {
        await tx.query(
          `INSERT INTO organization_members (organization_id, user_id, role, joined_at) VALUES ($1, $2, 'owner', $3)`,
          [organization.id, input.ownerUserId, now],
        );
      }
      await writeAudit(tx, ctx, {
        organizationId: organization.id,
        action: 'create',
        resourceType: 'organization',
        resourceId: organization.id,
        metadata: { name: input.name, slug: input.slug },
      });
      const { deployment, secret } = await createDeployment(tx, ctx, {
        organizationId: organization.id,
        name: input.name,
        tier: input.tier ?? ctx.config.newOrgTier,
        isPrimary: true,
      });
      return { organization, deployment, deploymentSecret: secret };
    });
    // The owner may have been resolved to "no deployment" before; that answer is now wrong.
    if (input.ownerUserId) ctx.bus.publish('resolve-cache');
    return created;
  } catch (err) {
    if ((err as { code?: string }).code === '23505' && String((err as Error).message).includes('organizations_slug_key')) {
      throw new AppError('CONFLICT', `The slug "${input.slug}" is taken`);
    }
    throw err;
  }
}

/**
 * POST /organizations (docs/accounts.md, Organizations): the creating user becomes owner; an admin-scoped API key creates for
 * the user who made it. The plan is `free` unless paid for: billing (docs/billing.md) and the operator set `pro`
 * and `enterprise`, so a caller naming one is refused rather than given it.
 */
export async function createOrganizationForCaller(ctx: Ctx, body: { name: string; slug: string; tier?: Plan | undefined }) {
  if (body.tier !== undefined && body.tier !== 'free') {
    throw new AppError(
      'FORBIDDEN',
      `The ${body.tier} plan is paid for: create the organization on the free plan, then subscribe through /billing/subscription`,
    );
  }
  let ownerUserId: string | undefined;
  if (ctx.actor.type === 'user') ownerUserId = ctx.actor.userId;
  else if (ctx.actor.type === 'api_key') {
    const rows = await ctx.db.query<{ created_by: string | null; scopes: string[] }>('SELECT created_by, scopes FROM api_keys WHERE id = $1', [
      ctx.actor.apiKeyId,
    ]);
    if (!rows[0]?.scopes.includes('admin') || !rows[0].created_by) {
      throw new AppError('FORBIDDEN', 'Only a user, or an admin-scoped API key made by one, can create organizations');
    }
    ownerUserId = rows[0].created_by;
  }
  const { organization, deployment, deploymentSecret } = await createOrganization(ctx, { name: body.name, slug: body.slug, ownerUserId }, { capOwned: true });
  return {
    ...viewOrganization(organization, 'owner'),
    deployment: { id: deployment.id, tier: deployment.tier, secret: deploymentSecret },
  };
}

/** PUT /api/v1/admin/organizations/{id} {plan} (docs/operator.md): the operator sets the plan; audited, and the hourly limit follows at once. */
export async function setOrganizationPlan(ctx: Ctx, id: string, plan: Plan): Promise<OrganizationView> {
  const row = await ctx.db.transaction(async (tx) => {
    const before = await tx.query<OrganizationRow>('SELECT * FROM organizations WHERE id = $1 AND deleted_at IS NULL FOR UPDATE', [id]);
    if (!before[0]) throw new NotFoundError('Organization');
    const rows = await tx.query<OrganizationRow>('UPDATE organizations SET plan = $2, updated_at = $3 WHERE id = $1 RETURNING *', [
      id,
      plan,
      ctx.clock.now(),
    ]);
    await writeAudit(tx, ctx, {
      organizationId: id,
      action: 'update',
      resourceType: 'organization',
      resourceId: id,
      metadata: { plan: { from: before[0].plan, to: plan } },
    });
    return rows[0]!;
  });
  ctx.bus.publish('plan-cache');
  return viewOrganization(row, null);
}

export async function addMember(
  ctx: Ctx,
  input: { organizationId: string; userId: string; role: 'owner' | 'admin' | 'member' | 'viewer' },
): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    await tx.query(
      `INSERT INTO organization_members (organization_id, user_id, role, joined_at) VALUES ($1, $2, $3, $4)`,
      [input.organizationId, input.userId, input.role, ctx.clock.now()],
    );
    await writeAudit(tx, ctx, {
      organizationId: input.organizationId,
      action: 'create',
      resourceType: 'member',
      resourceId: input.userId,
      metadata: { role: input.role },
    });
    await emitEvent(tx, {
      organizationId: input.organizationId,
      type: 'organization.member.added',
      data: { organization_id: input.organizationId, user_id: input.userId, role: input.role },
      at: ctx.clock.now(),
    });
  });
  ctx.bus.publish('resolve-cache');
}

export interface OrganizationView {
  id: string;
  name: string;
  slug: string;
  tier: Plan;
  logo_url: string | null;
  website: string | null;
  subscription_status: string | null;
  role: string | null;
  created_at: string;
  updated_at: string;
}

export function viewOrganization(o: OrganizationRow, role: string | null): OrganizationView {
  return {
    id: o.id,
    name: o.name,
    slug: o.slug,
    tier: o.plan,
    logo_url: o.logo_url,
    website: o.website,
    subscription_status: o.subscription_status,
    role,
    created_at: o.created_at.toISOString(),
    updated_at: o.updated_at.toISOString(),
  };
}

/**
 * The caller's organizations: a user's memberships, or an API key's own organization — each only
 * where GET /organizations/{id} would answer it, so a membership whose `organization.read` an
 * override removed, or a key without `read` (or acting for a member who lost it), lists nothing
 * (docs/accounts.md, Organizations).
 */
export async function listOrganizations(
  ctx: Ctx,
  pageArgs: { limit: number; cursor: { at: Date; id: string } | null },
): Promise<Array<OrganizationRow & { role: string | null }>> {
  if (ctx.actor.type === 'api_key') {
    if (!(await isAuthorized(ctx, ctx.actor.organizationId, 'organization.read'))) return [];
    return ctx.db.query(
      `SELECT o.*, NULL::text AS role FROM organizations o WHERE o.id = $1 AND o.deleted_at IS NULL
         AND ($2::timestamptz IS NULL OR (o.created_at, o.id) > ($2::timestamptz, $3::uuid))`,
      [ctx.actor.organizationId, pageArgs.cursor?.at ?? null, pageArgs.cursor?.id ?? null],
    );
  }
  if (ctx.actor.type !== 'user') return [];
  return ctx.db.query(
    `SELECT o.*, m.role FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
     WHERE m.user_id = $1 AND ($2::timestamptz IS NULL OR (o.created_at, o.id) > ($2::timestamptz, $3::uuid))
       AND ${holdsSql('m.organization_id', '$5')}
     ORDER BY o.created_at, o.id LIMIT $4`,
    [ctx.actor.userId, pageArgs.cursor?.at ?? null, pageArgs.cursor?.id ?? null, pageArgs.limit + 1, 'organization.read'],
  );
}

export async function getOrganization(ctx: Ctx, id: string): Promise<OrganizationView> {
  const { role } = await authorize(ctx, id, 'organization.read');
  const rows = await ctx.db.query<OrganizationRow>('SELECT * FROM organizations WHERE id = $1 AND deleted_at IS NULL', [id]);
  if (!rows[0]) throw new NotFoundError('Organization');
  return viewOrganization(rows[0], role);
}

export interface OrganizationUpdate {
  name?: string | undefined;
  slug?: string | undefined;
  logo_url?: string | null | undefined;
  website?: string | null | undefined;
}

export async function updateOrganization(ctx: Ctx, id: string, input: OrganizationUpdate): Promise<OrganizationView> {
  const { role } = await authorize(ctx, id, 'organization.update');
  try {
    const row = await ctx.db.transaction(async (tx) => {
      const before = await tx.query<OrganizationRow>('SELECT * FROM organizations WHERE id = $1 AND deleted_at IS NULL FOR UPDATE', [id]);
      if (!before[0]) throw new NotFoundError('Organization');
      const b = before[0];
      const rows = await tx.query<OrganizationRow>(
        `UPDATE organizations SET name = $2, slug = $3, logo_url = $4, website = $5, updated_at = $6 WHERE id = $1 RETURNING *`,
        [
          id,
          input.name ?? b.name,
          input.slug ?? b.slug,
          input.logo_url === undefined ? b.logo_url : input.logo_url,
          input.website === undefined ? b.website : input.website,
          ctx.clock.now(),
        ],
      );
      await writeAudit(tx, ctx, { organizationId: id, action: 'update', resourceType: 'organization', resourceId: id, metadata: { ...input } });
      return rows[0]!;
    });
    return viewOrganization(row, role);
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw new AppError('CONFLICT', `The slug "${input.slug}" is taken`);
    throw err;
  }
}

/**
 * Soft delete (owner only). Every credential of the organization stops working with this commit:
 * keys and deployment secrets are looked up through the organization's deleted_at.
 */
export async function deleteOrganization(ctx: Ctx, id: string): Promise<void> {
  const caller = await authorize(ctx, id, 'organization.delete');
  // Owner-only by role, not by a grant (docs/accounts.md, Organizations): an override of
  // organization.delete does not make a non-owner able to end every credential of the organization.
  if (caller.role !== 'owner') throw new AppError('FORBIDDEN', 'Only an owner can delete the organization');
  await ctx.db.transaction(async (tx) => {
    const rows = await tx.query('UPDATE organizations SET deleted_at = $2, updated_at = $2 WHERE id = $1 AND deleted_at IS NULL RETURNING id', [
      id,
      ctx.clock.now(),
    ]);
    if (rows.length === 0) throw new NotFoundError('Organization');
    await tx.query('UPDATE users SET default_organization_id = NULL WHERE default_organization_id = $1', [id]);
    await writeAudit(tx, ctx, { organizationId: id, action: 'delete', resourceType: 'organization', resourceId: id });
  });
  ctx.bus.publish('resolve-cache');
  principalsChanged(ctx);
}
