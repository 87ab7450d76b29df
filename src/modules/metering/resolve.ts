import type { Deps } from '../../context.js';
import type { ResolvedDeployment } from '../../lib/caches.js';
import { effectiveFlags } from '../entitlements/flags.js';
import { isUuid } from '../../lib/ids.js';

const NONE: ResolvedDeployment = {
  deployment_id: null,
  organization_id: null,
  tier: null,
  mcp_enabled: false,
  error: 'no_deployment_found',
};

/**
 * resolve-deployment (service mode): the deployment a user's MCP session meters against. `user_id` is a user's id or its
 * external_id. The user's default organization wins when it has an active primary deployment, else the
 * earliest membership that has one. Answers are cached 5 minutes per user_id and dropped on every
 * instance when membership, tier, suspension or primary deployment change.
 */
export function resolveDeployment(deps: Deps, userId: string): Promise<ResolvedDeployment> {
  // Through TtlCache.load: an answer read while a membership, tier or suspension change committed is
  // given once but not kept, so the next call reads the change (docs/metering.md, Caches).
  return deps.caches.resolve.load(userId, () => readResolution(deps, userId));
}

async function readResolution(deps: Deps, userId: string): Promise<ResolvedDeployment> {
  const rows = await deps.db.query<{ deployment_id: string; organization_id: string; tier: string; flag_overrides: unknown }>(
    `SELECT d.id AS deployment_id, d.organization_id, d.tier, d.flag_overrides
     FROM users u
     JOIN organization_members m ON m.user_id = u.id
     JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
     JOIN deployments d ON d.organization_id = o.id AND d.is_primary AND d.status = 'active'
     WHERE (u.id = $1::uuid OR u.external_id = $2)
     ORDER BY (m.organization_id = u.default_organization_id) DESC NULLS LAST, m.joined_at, m.id
     LIMIT 1`,
    [isUuid(userId) ? userId : null, userId],
    'resolve_deployment',
  );
  const row = rows[0];
  const answer: ResolvedDeployment = row
    ? {
        deployment_id: row.deployment_id,
        organization_id: row.organization_id,
        tier: row.tier,
        mcp_enabled: effectiveFlags(row.tier, row.flag_overrides).mcp_enabled,
        error: null,
      }
    : NONE;
  return answer;
}

/** Drop every cached resolution, on every instance. */
export function invalidateResolveCache(deps: Deps): void {
  deps.bus.publish('resolve-cache');
}
