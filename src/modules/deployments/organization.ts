import { type Ctx, actorLabel } from '../../context.js';
import { NotFoundError } from '../../errors.js';
import { type KeysetPosition, pageOf } from '../../http/envelope.js';
import { type BalanceSummary, type BalanceView, readBalance, summarizeBalance, viewBalance } from '../credits/index.js';
import { type EntitlementSnapshot, snapshotOf } from '../entitlements/service.js';
import { isUuid } from '../../lib/ids.js';
import { authorize } from '../organizations/rbac.js';
import { type DeploymentRow, getDeployment, rotateDeploymentSecret } from './service.js';

/* Verbs of the application API (docs/decisions-keys-billing.md, Deployments): authorization first; another tenant's row is 404. */

/** A deployment as an organization's members see it: no hash, no operator overrides, with its balance. */
export interface OrganizationDeploymentView {
  id: string;
  organization_id: string;
  name: string;
  tier: string;
  status: string;
  is_primary: boolean;
  secret_prefix: string;
  billing_anchor: string;
  created_at: string;
  updated_at: string;
  balance: BalanceSummary;
}

/** The record both the organization API and the operator API show (the operator's adds flags and overrides). */
export function deploymentView(d: DeploymentRow, b: BalanceView): OrganizationDeploymentView {
  return {
    id: d.id,
    organization_id: d.organization_id,
    name: d.name,
    tier: d.tier,
    status: d.status,
    is_primary: d.is_primary,
    secret_prefix: d.secret_prefix,
    billing_anchor: d.billing_anchor.toISOString(),
    created_at: d.created_at.toISOString(),
    updated_at: d.updated_at.toISOString(),
    balance: summarizeBalance(b),
  };
}

/** An organization's deployments in creation order (the primary one first), each with its current balance. */
export async function listOrganizationDeployments(
  ctx: Ctx,
  input: { organizationId: string; limit: number; cursor: KeysetPosition | null },
): Promise<{ items: OrganizationDeploymentView[]; next: string | null }> {
  await authorize(ctx, input.organizationId, 'deployments.read');
  const rows = await ctx.db.query<DeploymentRow>(
    `SELECT * FROM deployments
     WHERE organization_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2::timestamptz, $3::uuid))
     ORDER BY created_at, id LIMIT $4`,
    [input.organizationId, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  const now = ctx.clock.now();
  const views: OrganizationDeploymentView[] = [];
  for (const d of items) {
    // readBalance brings a stale row up to date (period reset on first touch, docs/metering.md).
    const b = viewBalance(await readBalance(ctx.db, d.id, now, actorLabel(ctx.actor)));
    views.push(deploymentView(d, b));
  }
  return { items: views, next };
}

/** Rotate a deployment's secret (deployments.manage): the new one is in the answer once, the old one is dead. */
export async function rotateOrganizationDeploymentSecret(
  ctx: Ctx,
  input: { organizationId: string; deploymentId: string },
): Promise<{ deployment_id: string; secret: string; secret_prefix: string }> {
  await authorize(ctx, input.organizationId, 'deployments.manage');
  if (!isUuid(input.deploymentId)) throw new NotFoundError('Deployment');
  const { secret } = await rotateDeploymentSecret(ctx, input.deploymentId, input.organizationId);
  return { deployment_id: input.deploymentId, secret, secret_prefix: secret.slice(0, 10) };
}

/**
 * A deployment's entitlement snapshot for its organization's members (deployments.read, key scope
 * read): the answer POST /api/v1/entitlements/check gives the deployment itself, computed by the same
 * function, so the console shows what the deployment sees. Another organization's deployment is 404.
 */
export async function organizationDeploymentEntitlements(
  ctx: Ctx,
  input: { organizationId: string; deploymentId: string },
): Promise<EntitlementSnapshot> {
  await authorize(ctx, input.organizationId, 'deployments.read');
  const deployment = await getDeployment(ctx.db, input.deploymentId, input.organizationId);
  return snapshotOf(ctx, deployment);
}
