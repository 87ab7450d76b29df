import type { Ctx } from '../../context.js';
import { type KeysetPosition, pageOf } from '../../http/envelope.js';
import { writeAudit } from '../audit/service.js';
import { isUuid } from '../../lib/ids.js';

/** One organization as the operator's search shows it. */
export interface OrganizationHit {
  id: string;
  name: string;
  slug: string;
  plan: string;
  deleted_at: string | null;
  created_at: string;
  primary_deployment_id: string | null;
  primary_deployment_tier: string | null;
}

interface HitRow extends Omit<OrganizationHit, 'deleted_at' | 'created_at'> {
  deleted_at: Date | null;
  created_at: Date;
}

/** `q` taken literally inside LIKE: `%`, `_` and the escape character itself match only themselves. */
export const likeLiteral = (q: string): string => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/**
 * The operator's search (docs/console.md "Operator"): organizations whose name or slug contains `q`
 * (case-insensitive), whose id or one of whose deployments' ids is `q`, or one of whose members has
 * the address `q`. Deleted organizations are included and say so. Newest first, keyset-paginated over
 * (created_at, id); without `q`, every organization. The search is audited (actor operator).
 */
export async function adminSearchOrganizations(
  ctx: Ctx,
  input: { q?: string | undefined; limit: number; cursor: KeysetPosition | null },
): Promise<{ items: OrganizationHit[]; next: string | null }> {
  const q = input.q?.trim() || null;
  const id = q !== null && isUuid(q) ? q.toLowerCase() : null;
  const rows = await ctx.db.query<HitRow>(
    `SELECT o.id, o.name, o.slug, o.plan, o.deleted_at, o.created_at,
            d.id AS primary_deployment_id, d.tier AS primary_deployment_tier
     FROM organizations o
     LEFT JOIN deployments d ON d.organization_id = o.id AND d.is_primary
     WHERE ($1::text IS NULL
            OR o.name ILIKE $2::text ESCAPE '\\' OR o.slug ILIKE $2::text ESCAPE '\\'
            OR o.id = $3::uuid
            OR EXISTS (SELECT 1 FROM deployments x WHERE x.organization_id = o.id AND x.id = $3::uuid)
            OR EXISTS (SELECT 1 FROM organization_members m JOIN users u ON u.id = m.user_id
                       WHERE m.organization_id = o.id AND lower(u.email) = lower($1::text)))
       AND ($4::timestamptz IS NULL OR (o.created_at, o.id) < ($4::timestamptz, $5::uuid))
     ORDER BY o.created_at DESC, o.id DESC
     LIMIT $6`,
    [q, q === null ? null : likeLiteral(q), id, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  await writeAudit(ctx.db, ctx, { organizationId: null, action: 'read', resourceType: 'organization', resourceId: null, metadata: { q } });
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return {
    items: items.map((r) => ({ ...r, deleted_at: r.deleted_at?.toISOString() ?? null, created_at: r.created_at.toISOString() })),
    next,
  };
}

export interface CreditCostRow {
  action: string;
  credits: number;
  description: string | null;
  updated_at: string;
}

/** The credit cost table as stored now (not the instances' cached copy), by action name. */
export async function adminListCreditCosts(ctx: Ctx): Promise<CreditCostRow[]> {
  const rows = await ctx.db.query<Omit<CreditCostRow, 'updated_at'> & { updated_at: Date }>(
    'SELECT action, credits, description, updated_at FROM credit_costs ORDER BY action COLLATE "C"',
  );
  await writeAudit(ctx.db, ctx, { organizationId: null, action: 'read', resourceType: 'credit_cost', resourceId: null });
  return rows.map((r) => ({ ...r, updated_at: r.updated_at.toISOString() }));
}

export interface ToolActionRow {
  tool_name: string;
  action: string;
  credits: number;
  updated_at: string;
}

/** Every tool mapping with the cost of its action, by tool name (a tool without a row is metered as platform_basic). */
export async function adminListToolActions(ctx: Ctx): Promise<ToolActionRow[]> {
  const rows = await ctx.db.query<Omit<ToolActionRow, 'updated_at'> & { updated_at: Date }>(
    `SELECT t.tool_name, t.action, c.credits, t.updated_at
     FROM tool_actions t JOIN credit_costs c ON c.action = t.action
     ORDER BY t.tool_name COLLATE "C"`,
  );
  await writeAudit(ctx.db, ctx, { organizationId: null, action: 'read', resourceType: 'tool_action', resourceId: null });
  return rows.map((r) => ({ ...r, updated_at: r.updated_at.toISOString() }));
}
