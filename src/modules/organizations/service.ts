import type { Ctx } from '../../context.js';
import { AppError } from '../../errors.js';
import { writeAudit } from '../audit/service.js';
import { createDeployment, type DeploymentRow } from '../deployments/service.js';
import type { Plan, Tier } from '../entitlements/tiers.js';

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
 * An organization with its primary deployment (SPEC §2) and the creator as owner, in one transaction:
 * no organization is ever left without its deployment.
 */
export async function createOrganization(
  ctx: Ctx,
  input: CreateOrganizationInput,
): Promise<{ organization: OrganizationRow; deployment: DeploymentRow; deploymentSecret: string }> {
  const now = ctx.clock.now();
  try {
    const created = await ctx.db.transaction(async (tx) => {
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
  });
  ctx.bus.publish('resolve-cache');
}
