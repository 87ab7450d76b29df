import { changePurchased, forgetBalance, readBalance, resetUsage, viewBalance } from '../credits/index.js';
import { type Ctx, actorLabel } from '../../context.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { createApiKey } from '../api-keys/service.js';
import { writeAudit } from '../audit/service.js';
import {
  type DeploymentRow,
  getDeployment,
  listDeployments,
  lockDeployment,
  type OverrideInput,
  overridesOf,
  setFlagOverrides,
  setOverrides,
  updateDeployment,
} from '../deployments/service.js';
import { effectiveFlags } from '../entitlements/flags.js';
import { FLAGS, type Flags, type Tier } from '../../lib/tiers.js';
import { isUuid } from '../../lib/ids.js';
import { instantBoundFault } from '../../lib/instants.js';
import { createOrganization } from '../organizations/service.js';
import { deploymentView, type OrganizationDeploymentView } from '../deployments/organization.js';
import { createUser } from '../users/service.js';

export interface DeploymentView extends OrganizationDeploymentView {
  features: Flags;
  flag_overrides: Record<string, boolean>;
  overrides: ReturnType<typeof overridesOf>;
  /** docs/ai-proxy.md, "What a provider's over-report costs". */
  credits_owed: number;
}

async function viewOf(ctx: Ctx, d: DeploymentRow): Promise<DeploymentView> {
  const b = viewBalance(await readBalance(ctx.db, d.id, ctx.clock.now(), actorLabel(ctx.actor)));
  return {
    ...deploymentView(d, b),
    features: effectiveFlags(d.tier, d.flag_overrides),
    flag_overrides: d.flag_overrides,
    overrides: overridesOf(d, ctx.clock.now()),
    credits_owed: b.creditsOwed,
  };
}

/**
 * An operator's `expires_at` as an instant: one `Date` reads, from 1970 and before 9999-01-01
 * (docs/input.md, Dates); whether it must also be in the future is the caller's rule.
 */
function expiryOf(value: string): Date {
  const at = new Date(value);
  if (Number.isNaN(at.getTime())) throw ValidationError.forField('expires_at', 'must be an RFC 3339 date-time such as 2027-01-01T00:00:00Z');
  const fault = instantBoundFault(at);
  if (fault) throw ValidationError.forField('expires_at', fault);
  return at;
}

/** Reads are audited too (docs/operator.md: every operator call). */
async function auditRead(ctx: Ctx, resourceType: string, resourceId: string | null, organizationId: string | null) {
  await writeAudit(ctx.db, ctx, { organizationId, action: 'read', resourceType, resourceId });
}

export async function adminListDeployments(ctx: Ctx, organizationId?: string): Promise<DeploymentView[]> {
  if (organizationId !== undefined && !isUuid(organizationId)) return [];
  const rows = await listDeployments(ctx.db, organizationId);
  await auditRead(ctx, 'deployment', null, organizationId ?? null);
  return Promise.all(rows.map((d) => viewOf(ctx, d)));
}

export async function adminGetDeployment(ctx: Ctx, id: string): Promise<DeploymentView> {
  const d = await getDeployment(ctx.db, id);
  await auditRead(ctx, 'deployment', id, d.organization_id);
  return viewOf(ctx, d);
}

export async function adminUpdateDeployment(
  ctx: Ctx,
  id: string,
  input: { tier?: Tier | undefined; status?: 'active' | 'suspended' | undefined },
): Promise<DeploymentView> {
  return viewOf(ctx, await updateDeployment(ctx, id, input));
}

export async function adminSetOverrides(ctx: Ctx, id: string, input: OverrideInput): Promise<DeploymentView> {
  if (input.expires_at !== undefined && input.expires_at !== null) {
    const at = new Date(input.expires_at);
    if (Number.isNaN(at.getTime()) || at.getTime() <= ctx.clock.now().getTime()) {
      throw new ValidationError('expires_at must be a future timestamp', [{ field: 'expires_at', message: 'must be in the future' }]);
    }
    expiryOf(input.expires_at);
  }
  return viewOf(ctx, await setOverrides(ctx, id, input));
}

export async function adminClearOverrides(ctx: Ctx, id: string): Promise<DeploymentView> {
  return viewOf(ctx, await setOverrides(ctx, id, 'clear'));
}

export async function adminSetFlags(ctx: Ctx, id: string, input: Record<string, boolean | null>): Promise<DeploymentView> {
  for (const flag of Object.keys(input)) {
    if (!(FLAGS as readonly string[]).includes(flag)) {
      throw new ValidationError(`Unknown flag ${flag}`, [{ field: flag, message: 'is not a known flag' }]);
    }
  }
  return viewOf(ctx, await setFlagOverrides(ctx, id, input));
}

export async function adminResetUsage(
  ctx: Ctx,
  id: string,
  input: { ai_tokens?: boolean | undefined; monthly_credits?: boolean | undefined },
): Promise<DeploymentView> {
  if (!input.ai_tokens && !input.monthly_credits) {
    throw new ValidationError('Name what to reset: ai_tokens and/or monthly_credits', [
      { field: 'ai_tokens', message: 'or monthly_credits must be true' },
    ]);
  }
  const now = ctx.clock.now();
  const d = await ctx.db.transaction(async (tx) => {
    const deployment = await lockDeployment(tx, id);
    await resetUsage(tx, {
      deploymentId: id,
      monthlyCredits: input.monthly_credits === true,
      aiTokens: input.ai_tokens === true,
      actor: actorLabel(ctx.actor),
      now,
    });
    await writeAudit(tx, ctx, {
      organizationId: deployment.organization_id,
      action: 'reset_usage',
      resourceType: 'deployment',
      resourceId: id,
      metadata: input,
    });
    return deployment;
  });
  forgetBalance(ctx, id, true);
  return viewOf(ctx, d);
}

/** A grant (positive) or adjustment (negative) of purchased credits, with its ledger and audit rows in one transaction. */
export async function adminChangeCredits(
  ctx: Ctx,
  id: string,
  input: { amount: number; reason: string; expires_at?: string | undefined },
): Promise<DeploymentView> {
  if (input.amount === 0) throw new ValidationError('amount must not be 0', [{ field: 'amount', message: 'must not be 0' }]);
  const now = ctx.clock.now();
  const expiresAt = input.expires_at === undefined ? null : expiryOf(input.expires_at);
  const d = await ctx.db.transaction(async (tx) => {
    const deployment = await lockDeployment(tx, id);
    await changePurchased(tx, {
      deploymentId: id,
      amount: input.amount,
      reason: input.reason,
      actor: actorLabel(ctx.actor),
      now,
      expiresAt,
    });
    await writeAudit(tx, ctx, {
      organizationId: deployment.organization_id,
      action: input.amount > 0 ? 'grant_credits' : 'adjust_credits',
      resourceType: 'deployment',
      resourceId: id,
      metadata: input,
    });
    return deployment;
  });
  forgetBalance(ctx, id, true);
  return viewOf(ctx, d);
}

export async function adminPutCreditCost(
  ctx: Ctx,
  action: string,
  input: { credits: number; description?: string | null | undefined },
): Promise<{ action: string; credits: number; description: string | null }> {
  const row = await ctx.db.transaction(async (tx) => {
    const rows = await tx.query<{ action: string; credits: number; description: string | null }>(
      `INSERT INTO credit_costs (action, credits, description, updated_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (action) DO UPDATE SET credits = EXCLUDED.credits,
         description = CASE WHEN $5 THEN EXCLUDED.description ELSE credit_costs.description END,
         updated_at = EXCLUDED.updated_at
       RETURNING action, credits, description`,
      [action, input.credits, input.description ?? null, ctx.clock.now(), input.description !== undefined],
    );
    await writeAudit(tx, ctx, { organizationId: null, action: 'update', resourceType: 'credit_cost', resourceId: action, metadata: input });
    return rows[0]!;
  });
  ctx.bus.publish('cost-cache');
  return row;
}

export async function adminPutToolAction(ctx: Ctx, toolName: string, action: string): Promise<{ tool_name: string; action: string }> {
  const row = await ctx.db.transaction(async (tx) => {
    const known = await tx.query('SELECT 1 FROM credit_costs WHERE action = $1', [action]);
    if (known.length === 0) {
      throw new ValidationError(`Unknown action ${action}; create it with PUT /api/v1/admin/credit-costs/${action} first`, [
        { field: 'action', message: 'is not a known action' },
      ]);
    }
    const rows = await tx.query<{ tool_name: string; action: string }>(
      `INSERT INTO tool_actions (tool_name, action, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (tool_name) DO UPDATE SET action = EXCLUDED.action, updated_at = EXCLUDED.updated_at
       RETURNING tool_name, action`,
      [toolName, action, ctx.clock.now()],
    );
    await writeAudit(tx, ctx, { organizationId: null, action: 'update', resourceType: 'tool_action', resourceId: toolName, metadata: { action } });
    return rows[0]!;
  });
  ctx.bus.publish('cost-cache');
  return row;
}

export async function adminDeleteToolAction(ctx: Ctx, toolName: string): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    const rows = await tx.query('DELETE FROM tool_actions WHERE tool_name = $1 RETURNING tool_name', [toolName]);
    if (rows.length === 0) throw new NotFoundError('Tool mapping');
    await writeAudit(tx, ctx, { organizationId: null, action: 'delete', resourceType: 'tool_action', resourceId: toolName });
  });
  ctx.bus.publish('cost-cache');
}

/**
 * Operator: an organization with its primary deployment (and an owner found or created by email).
 * Beyond the operator API's fixed list (docs/operator.md), so the CLI's `demo` and operators can provision while the accounts
 * API does not exist yet; the deployment secret is in the answer once.
 */
export async function adminCreateOrganization(
  ctx: Ctx,
  input: { name: string; slug: string; tier?: Tier | undefined; plan?: 'free' | 'pro' | 'enterprise' | undefined; owner_email?: string | undefined },
) {
  let ownerUserId: string | undefined;
  if (input.owner_email) {
    const existing = await ctx.db.query<{ id: string; email_verified_at: Date | null }>(
      'SELECT id, email_verified_at FROM users WHERE lower(email) = lower($1)',
      [input.owner_email],
    );
    // An account that never proved the address may be anyone's who typed it at sign-up: it is not made
    // owner of what the operator provisions for that address, as it accepts no invitation to it
    // (docs/accounts.md, Email verification).
    if (existing[0] && !existing[0].email_verified_at && ctx.config.emailVerification === 'on') {
      throw new AppError(
        'CONFLICT',
        'The account of owner_email has not verified its address: it becomes an owner once verified (POST /auth/verify-email), or leave owner_email out',
      );
    }
    ownerUserId = existing[0]?.id ?? (await createUser(ctx, { email: input.owner_email })).id;
  }
  const { organization, deployment, deploymentSecret } = await createOrganization(ctx, {
    name: input.name,
    slug: input.slug,
    plan: input.plan,
    tier: input.tier,
    ownerUserId,
  });
  return {
    organization: {
      id: organization.id,
      name: organization.name,
      slug: organization.slug,
      tier: organization.plan,
      created_at: organization.created_at.toISOString(),
    },
    owner_user_id: ownerUserId ?? null,
    deployment: { id: deployment.id, tier: deployment.tier, secret: deploymentSecret },
  };
}

export async function adminCreateApiKey(
  ctx: Ctx,
  organizationId: string,
  input: { name: string; scopes?: Array<'read' | 'write' | 'admin'> | undefined; expires_at?: string | undefined },
) {
  const org = await ctx.db.query('SELECT 1 FROM organizations WHERE id = $1 AND deleted_at IS NULL', [organizationId]);
  if (org.length === 0) throw new NotFoundError('Organization');
  const expiresAt = input.expires_at ? new Date(input.expires_at) : null;
  if (expiresAt && expiresAt.getTime() <= ctx.clock.now().getTime()) {
    throw new ValidationError('expires_at must be in the future', [{ field: 'expires_at', message: 'must be in the future' }]);
  }
  if (input.expires_at) expiryOf(input.expires_at);
  const { apiKey, key } = await createApiKey(ctx, { organizationId, name: input.name, scopes: input.scopes, expiresAt });
  return {
    id: apiKey.id,
    key,
    key_prefix: apiKey.key_prefix,
    scopes: apiKey.scopes,
    expires_at: apiKey.expires_at?.toISOString() ?? null,
  };
}
