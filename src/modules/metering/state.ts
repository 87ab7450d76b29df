import type { Deps } from '../../context.js';
import { AppError, UnauthorizedError } from '../../errors.js';
import { API_KEY_PREFIX, isWellFormedToken, sha256Hex } from '../../lib/secrets.js';
import type { BalanceRow } from '../credits/service.js';
import type { DeploymentTerms } from '../credits/terms.js';

/** A deployment as the metering paths see it: its terms and its balance row, read in one query. */
export interface DeploymentState extends DeploymentTerms {
  deployment_id: string;
  organization_id: string;
  status: string;
  flag_overrides: unknown;
  org_deleted: boolean;
  balance: BalanceRow | null;
}

export interface ApiKeyPrincipal {
  apiKeyId: string;
  organizationId: string;
  scopes: string[];
  /** The organization's primary deployment, or null when it has none. */
  deployment: DeploymentState | null;
}

const DEPLOYMENT_COLUMNS = `d.id AS deployment_id, d.organization_id AS d_organization_id, d.tier, d.status, d.flag_overrides,
  d.billing_anchor, d.override_monthly_credits, d.override_api_rate_limit, d.override_ai_tokens_limit, d.override_expires_at,
  b.deployment_id AS b_deployment_id, b.period_start, b.period_end, b.sync_before, b.monthly_allocation, b.monthly_used,
  b.purchased_balance, b.reserved, b.ai_tokens_used, b.ai_tokens_over_limit, b.ai_tokens_reserved, b.ai_credits_reserved,
  b.purchased_consumed`;

interface JoinedRow extends DeploymentTerms {
  deployment_id: string | null;
  d_organization_id: string;
  status: string;
  flag_overrides: unknown;
  b_deployment_id: string | null;
  period_start: Date;
  period_end: Date;
  sync_before: Date;
  monthly_allocation: number | null;
  monthly_used: number;
  purchased_balance: number;
  reserved: number;
  ai_tokens_used: number;
  ai_tokens_over_limit: number;
  ai_tokens_reserved: number;
  ai_credits_reserved: number;
  purchased_consumed: number;
}

function toState(r: JoinedRow, orgDeleted: boolean): DeploymentState | null {
  if (!r.deployment_id) return null;
  return {
    deployment_id: r.deployment_id,
    organization_id: r.d_organization_id,
    tier: r.tier,
    status: r.status,
    flag_overrides: r.flag_overrides,
    billing_anchor: r.billing_anchor,
    override_monthly_credits: r.override_monthly_credits,
    override_api_rate_limit: r.override_api_rate_limit,
    override_ai_tokens_limit: r.override_ai_tokens_limit,
    override_expires_at: r.override_expires_at,
    org_deleted: orgDeleted,
    balance: r.b_deployment_id
      ? {
          deployment_id: r.deployment_id,
          organization_id: r.d_organization_id,
          period_start: r.period_start,
          period_end: r.period_end,
          sync_before: r.sync_before,
          monthly_allocation: r.monthly_allocation,
          monthly_used: r.monthly_used,
          purchased_balance: r.purchased_balance,
          reserved: r.reserved,
          ai_tokens_used: r.ai_tokens_used,
          ai_tokens_over_limit: r.ai_tokens_over_limit,
          ai_tokens_reserved: r.ai_tokens_reserved,
          ai_credits_reserved: r.ai_credits_reserved,
          purchased_consumed: r.purchased_consumed,
        }
      : null,
  };
}

/**
 * Authenticate an organization API key and load its organization's primary deployment with the
 * balance, in one round trip. Malformed keys are refused before any database read (checksum).
 */
export async function loadApiKeyPrincipal(deps: Deps, key: string | undefined): Promise<ApiKeyPrincipal> {
  if (!key || !isWellFormedToken(key, API_KEY_PREFIX)) throw new UnauthorizedError('Missing or invalid API key');
  const rows = await deps.db.query<
    JoinedRow & {
      api_key_id: string;
      organization_id: string;
      scopes: string[];
      expires_at: Date | null;
      revoked_at: Date | null;
      last_used_at: Date | null;
    }
  >(
    `SELECT k.id AS api_key_id, k.organization_id, k.scopes, k.expires_at, k.revoked_at, k.last_used_at, ${DEPLOYMENT_COLUMNS}
     FROM api_keys k
     JOIN organizations o ON o.id = k.organization_id AND o.deleted_at IS NULL
     LEFT JOIN deployments d ON d.organization_id = k.organization_id AND d.is_primary
     LEFT JOIN credit_balances b ON b.deployment_id = d.id
     WHERE k.key_hash = $1`,
    [sha256Hex(key)],
    'api_key_principal',
  );
  const row = rows[0];
  const now = deps.clock.now();
  if (!row || row.revoked_at || (row.expires_at && row.expires_at.getTime() <= now.getTime())) {
    throw new UnauthorizedError('Missing or invalid API key');
  }
  touchApiKey(deps, row.api_key_id, row.last_used_at, now);
  return {
    apiKeyId: row.api_key_id,
    organizationId: row.organization_id,
    scopes: row.scopes,
    deployment: toState(row, false),
  };
}

/** When this process last wrote last_used_at per key, so a burst of requests writes once, not once each. */
const lastTouched = new Map<string, number>();

/** last_used_at at most once a minute per key (SPEC §8), off the response path. */
function touchApiKey(deps: Deps, apiKeyId: string, lastUsedAt: Date | null, now: Date): void {
  if (lastUsedAt && now.getTime() - lastUsedAt.getTime() < 60_000) return;
  const touched = lastTouched.get(apiKeyId);
  if (touched !== undefined && now.getTime() - touched < 60_000) return;
  if (lastTouched.size > 100_000) lastTouched.clear();
  lastTouched.set(apiKeyId, now.getTime());
  deps.db
    .query(
      `UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)`,
      [apiKeyId, now, new Date(now.getTime() - 60_000)],
      'api_key_touch',
    )
    .catch((err: unknown) => deps.log.warn({ err }, 'could not update api key last_used_at'));
}

export function requireScope(principal: ApiKeyPrincipal, scope: 'read' | 'write' | 'admin'): void {
  if (!principal.scopes.includes(scope)) {
    throw new AppError('INSUFFICIENT_SCOPE', `This API key lacks the "${scope}" scope`);
  }
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (value: string): boolean => UUID_RE.test(value);

/** A deployment by id with its balance, in one round trip; null when unknown (or not a UUID). */
export async function loadDeploymentState(deps: Deps, deploymentId: string): Promise<DeploymentState | null> {
  if (!isUuid(deploymentId)) return null;
  const rows = await deps.db.query<JoinedRow & { org_deleted: boolean }>(
    `SELECT ${DEPLOYMENT_COLUMNS}, o.deleted_at IS NOT NULL AS org_deleted
     FROM deployments d
     JOIN organizations o ON o.id = d.organization_id
     LEFT JOIN credit_balances b ON b.deployment_id = d.id
     WHERE d.id = $1`,
    [deploymentId],
    'deployment_state',
  );
  const row = rows[0];
  return row ? toState(row, row.org_deleted) : null;
}
