import type { Deps } from '../../context.js';
import { pgArray } from '../../db/arrays.js';
import { UnauthorizedError } from '../../errors.js';
import type { CachedDeployment } from '../../lib/caches.js';
import { isUuid } from '../../lib/ids.js';
import { API_KEY_PREFIX, hasTokenLength, isWellFormedToken, sha256Hex } from '../../lib/secrets.js';
import { type BalanceRow, cachedBalance, type DeploymentTerms } from '../credits/index.js';
import type { DeploymentRow } from '../deployments/service.js';

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

// What an `apiKey` route's principal is, for http/auth.ts and the rate limits, which import no module.
declare module '../../lib/principals.js' {
  interface Principals {
    apiKey: ApiKeyPrincipal;
  }
}

/**
 * A deployment with its organization's deletion, from the instance's cache or one query (`fresh`
 * skips the cache, for callers that ask to bypass it). Null for an unknown id.
 */
export async function loadDeployment(deps: Pick<Deps, 'db' | 'caches'>, deploymentId: string, fresh = false): Promise<CachedDeployment | null> {
  if (!isUuid(deploymentId)) return null;
  const read = async (): Promise<CachedDeployment | null> => {
    const rows = await deps.db.query<DeploymentRow & { org_deleted: boolean }>(
      `SELECT d.*, o.deleted_at IS NOT NULL AS org_deleted
       FROM deployments d JOIN organizations o ON o.id = d.organization_id
       WHERE d.id = $1`,
      [deploymentId],
      'deployment_state',
    );
    const r = rows[0];
    if (!r) return null;
    const { org_deleted, ...row } = r;
    return { row, orgDeleted: org_deleted };
  };
  if (fresh) return read();
  return deps.caches.deployments.load(deploymentId, read);
}

function stateOf(deps: Deps, d: CachedDeployment): DeploymentState {
  const r = d.row;
  return {
    deployment_id: r.id,
    organization_id: r.organization_id,
    tier: r.tier,
    status: r.status,
    flag_overrides: r.flag_overrides,
    billing_anchor: r.billing_anchor,
    override_monthly_credits: r.override_monthly_credits,
    override_api_rate_limit: r.override_api_rate_limit,
    override_ai_tokens_limit: r.override_ai_tokens_limit,
    override_expires_at: r.override_expires_at,
    org_deleted: d.orgDeleted,
    // Null when this instance holds no recent copy: the paths that need it read it (metering/decide.ts).
    balance: cachedBalance(deps, r.id),
  };
}

/**
 * Authenticate an organization API key and attach its organization's primary deployment. Malformed
 * keys are refused before any database read (checksum); known keys are served from the instance's cache,
 * which every instance drops when a key is revoked (docs/adr/0005-cached-checks.md). Expiry is judged
 * on every request.
 */
export async function loadApiKeyPrincipal(deps: Deps, key: string | undefined): Promise<ApiKeyPrincipal> {
  if (!key || !hasTokenLength(key, API_KEY_PREFIX)) throw new UnauthorizedError('Missing or invalid API key');
  const hash = sha256Hex(key);
  // Unknown and revoked keys are not cached: they are refused from the database every time. A cached
  // hash is a key that was well formed when it was loaded, so the checksum is checked on a miss only.
  const cached = await deps.caches.apiKeys.load(hash, async () => {
      if (!isWellFormedToken(key, API_KEY_PREFIX)) throw new UnauthorizedError('Missing or invalid API key');
      const rows = await deps.db.query<{
        api_key_id: string;
        organization_id: string;
        scopes: string[];
        expires_at: Date | null;
        last_used_at: Date | null;
        deployment_id: string | null;
      }>(
        `SELECT k.id AS api_key_id, k.organization_id, k.scopes, k.expires_at, k.last_used_at,
           (SELECT d.id FROM deployments d WHERE d.organization_id = k.organization_id AND d.is_primary LIMIT 1) AS deployment_id
         FROM api_keys k
         JOIN organizations o ON o.id = k.organization_id AND o.deleted_at IS NULL
         WHERE k.key_hash = $1 AND k.revoked_at IS NULL`,
        [hash],
        'api_key_principal',
      );
      const row = rows[0];
      if (!row) throw new UnauthorizedError('Missing or invalid API key');
      return {
        apiKeyId: row.api_key_id,
        organizationId: row.organization_id,
        scopes: row.scopes,
        expiresAt: row.expires_at,
        lastUsedAt: row.last_used_at,
        deploymentId: row.deployment_id,
      };
  });
  const now = deps.clock.now();
  if (cached.expiresAt && cached.expiresAt.getTime() <= now.getTime()) throw new UnauthorizedError('Missing or invalid API key');
  touchApiKey(deps, cached.apiKeyId, cached.lastUsedAt, now);
  const deployment = cached.deploymentId ? await loadDeployment(deps, cached.deploymentId) : null;
  return {
    apiKeyId: cached.apiKeyId,
    organizationId: cached.organizationId,
    scopes: cached.scopes,
    deployment: deployment ? stateOf(deps, deployment) : null,
  };
}

/** When this process last wrote last_used_at per key, so a burst of requests writes once, not once each. */
const lastTouched = new Map<string, number>();

/**
 * Keys waiting for their last_used_at, per database: written together by one statement, the next one
 * only after the one in flight has answered. After a minute of use, every key a busy instance serves
 * is due at about the same time; one statement (and commit) per key made a burst of commits.
 */
interface Touches {
  due: Map<string, Date>;
  writing: boolean;
}
const touches = new WeakMap<Deps['db'], Touches>();

/** last_used_at at most once a minute per key (docs/metering.md, Caches), off the response path. */
function touchApiKey(deps: Deps, apiKeyId: string, lastUsedAt: Date | null, now: Date): void {
  if (lastUsedAt && now.getTime() - lastUsedAt.getTime() < 60_000) return;
  const touched = lastTouched.get(apiKeyId);
  if (touched !== undefined && now.getTime() - touched < 60_000) return;
  if (lastTouched.size > 100_000) lastTouched.clear();
  lastTouched.set(apiKeyId, now.getTime());
  let pending = touches.get(deps.db);
  if (!pending) {
    pending = { due: new Map(), writing: false };
    touches.set(deps.db, pending);
  }
  pending.due.set(apiKeyId, now);
  if (!pending.writing) {
    pending.writing = true;
    // The keys of the requests in this turn of the event loop go together.
    setImmediate(() => writeTouches(deps, pending));
  }
}

/** At most this many keys per statement. */
const TOUCH_BATCH = 1_000;

function writeTouches(deps: Deps, pending: Touches): void {
  if (pending.due.size === 0) {
    pending.writing = false;
    return;
  }
  const ids: string[] = [];
  const at: Date[] = [];
  for (const [id, now] of pending.due) {
    ids.push(id);
    at.push(now);
    pending.due.delete(id);
    if (ids.length === TOUCH_BATCH) break;
  }
  deps.db
    .query(
      `UPDATE api_keys k SET last_used_at = x.at
       FROM unnest($1::uuid[], $2::timestamptz[]) AS x(id, at)
       WHERE k.id = x.id AND (k.last_used_at IS NULL OR k.last_used_at < x.at - interval '60 seconds')`,
      [pgArray(ids), pgArray(at)],
      'api_key_touch',
    )
    .catch((err: unknown) => deps.log.warn({ err }, 'could not update api key last_used_at'))
    .finally(() => writeTouches(deps, pending));
}

/** A deployment by id (cached per instance), with its balance when this instance holds a recent copy; null when unknown. */
export async function loadDeploymentState(deps: Deps, deploymentId: string): Promise<DeploymentState | null> {
  const deployment = await loadDeployment(deps, deploymentId);
  return deployment ? stateOf(deps, deployment) : null;
}
