import { principalsChanged } from '../deployments/service.js';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { pageOf } from '../../http/envelope.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { generateApiKey, keyPrefix, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { emitEvent } from '../events/outbox.js';
import { isUuid } from '../../lib/ids.js';
import { instantBoundFault } from '../../lib/instants.js';
import { heldBy, keyScopesAllowed, withdrawInvitations } from '../organizations/powers.js';
import { authorize } from '../organizations/rbac.js';

export type Scope = 'read' | 'write' | 'admin';

export interface ApiKeyRow {
  id: string;
  organization_id: string;
  name: string;
  key_prefix: string;
  scopes: Scope[];
  last_used_at: Date | null;
  expires_at: Date | null;
  created_by: string | null;
  created_at: Date;
  revoked_at: Date | null;
}

const COLUMNS = 'id, organization_id, name, key_prefix, scopes, last_used_at, expires_at, created_by, created_at, revoked_at';

/** A new organization API key: the full key is in the answer once and stored only as its SHA-256. */
export async function createApiKey(
  ctx: Ctx,
  input: {
    organizationId: string;
    name: string;
    scopes?: Scope[] | undefined;
    expiresAt?: Date | null | undefined;
    createdBy?: string | null;
    /** Runs first in the key's transaction: the creator's powers, checked under their membership lock. */
    guard?: (tx: Queryable) => Promise<void>;
  },
): Promise<{ apiKey: ApiKeyRow; key: string }> {
  const key = generateApiKey();
  const apiKey = await ctx.db.transaction(async (tx) => {
    await input.guard?.(tx);
    const rows = await tx.query<ApiKeyRow>(
      `INSERT INTO api_keys (organization_id, name, key_hash, key_prefix, scopes, expires_at, created_by, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ${COLUMNS}`,
      [
        input.organizationId,
        input.name,
        sha256Hex(key),
        keyPrefix(key),
        input.scopes ?? ['read'],
        input.expiresAt ?? null,
        input.createdBy ?? null,
        ctx.clock.now(),
      ],
    );
    const row = rows[0]!;
    await writeAudit(tx, ctx, {
      organizationId: input.organizationId,
      action: 'create',
      resourceType: 'api_key',
      resourceId: row.id,
      metadata: { name: input.name, scopes: row.scopes, key_prefix: row.key_prefix },
    });
    await emitEvent(tx, {
      organizationId: input.organizationId,
      type: 'api_key.created',
      data: { api_key_id: row.id, name: row.name, scopes: row.scopes, key_prefix: row.key_prefix, expires_at: row.expires_at?.toISOString() ?? null },
      at: row.created_at,
    });
    return row;
  });
  return { apiKey, key };
}

/**
 * Revoke: the key stops working with this commit, and the pending invitations sent with it are
 * withdrawn in the same transaction; every instance drops its cached principals when the commit is
 * done (docs/adr/0005-cached-checks.md).
 */
export async function revokeApiKey(ctx: Ctx, organizationId: string, id: string): Promise<ApiKeyRow> {
  if (!isUuid(id)) throw new NotFoundError('API key');
  const row = await ctx.db.transaction(async (tx) => {
    const revoked = await tx.query<ApiKeyRow>(
      `UPDATE api_keys SET revoked_at = $3 WHERE id = $1 AND organization_id = $2 AND revoked_at IS NULL RETURNING ${COLUMNS}`,
      [id, organizationId, ctx.clock.now()],
    );
    if (revoked[0]) {
      await writeAudit(tx, ctx, { organizationId, action: 'revoke', resourceType: 'api_key', resourceId: id });
      await emitEvent(tx, {
        organizationId,
        type: 'api_key.revoked',
        data: { api_key_id: id, name: revoked[0].name, key_prefix: revoked[0].key_prefix },
        at: revoked[0].revoked_at!,
      });
      // An invitation sent with this key acts for it: it stops being acceptable with it (docs/accounts.md).
      await withdrawInvitations(tx, ctx, organizationId, { apiKeyIds: [id] });
      return revoked[0];
    }
    // Revoking twice answers the same and is audited once.
    const existing = await tx.query<ApiKeyRow>(`SELECT ${COLUMNS} FROM api_keys WHERE id = $1 AND organization_id = $2`, [id, organizationId]);
    if (!existing[0]) throw new NotFoundError('API key');
    return existing[0];
  });
  principalsChanged(ctx);
  return row;
}

// ---- Verbs of the application API (docs/decisions-keys-billing.md, API keys): authorization first, then the transaction above. ----

/** An API key as the application API shows it: never the hash, never the key after creation. */
export interface ApiKeyView {
  id: string;
  organization_id: string;
  name: string;
  key_prefix: string;
  scopes: Scope[];
  last_used_at: string | null;
  expires_at: string | null;
  created_by: string | null;
  created_at: string;
  revoked_at: string | null;
}

export function viewApiKey(k: ApiKeyRow): ApiKeyView {
  return {
    id: k.id,
    organization_id: k.organization_id,
    name: k.name,
    key_prefix: k.key_prefix,
    scopes: k.scopes,
    last_used_at: k.last_used_at?.toISOString() ?? null,
    expires_at: k.expires_at?.toISOString() ?? null,
    created_by: k.created_by,
    created_at: k.created_at.toISOString(),
    revoked_at: k.revoked_at?.toISOString() ?? null,
  };
}

/** An organization's keys, newest first, revoked and expired ones included (their timestamps say so). */
export async function listApiKeys(
  ctx: Ctx,
  input: { organizationId: string; limit: number; cursor: KeysetPosition | null },
): Promise<{ items: ApiKeyView[]; next: string | null }> {
  await authorize(ctx, input.organizationId, 'api_keys.read');
  const rows = await ctx.db.query<ApiKeyRow>(
    `SELECT ${COLUMNS} FROM api_keys
     WHERE organization_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
     ORDER BY created_at DESC, id DESC LIMIT $4`,
    [input.organizationId, input.cursor?.at ?? null, input.cursor?.id ?? null, input.limit + 1],
  );
  const { items, next } = pageOf(rows, input.limit, (r) => r.created_at);
  return { items: items.map(viewApiKey), next };
}

/**
 * Create a key for an organization (api_keys.manage). A key never holds more than its creator
 * (docs/accounts.md, Powers): a user's scopes must be within what their powers allow (organizations/powers.ts), checked
 * again under their membership lock so a demotion meanwhile cannot be outrun. A key made by a key
 * belongs to the user who made the calling key (so it is taken back with theirs), may not hold scopes
 * the calling key lacks, and may not outlive it (docs/decisions-keys-billing.md).
 */
export async function createOrganizationApiKey(
  ctx: Ctx,
  input: { organizationId: string; name: string; scopes?: Scope[] | undefined; expiresAt?: string | null | undefined },
): Promise<ApiKeyView & { key: string }> {
  let { userId: createdBy } = await authorize(ctx, input.organizationId, 'api_keys.manage');
  const scopes: Scope[] = input.scopes ?? ['read'];
  let expiresAt = input.expiresAt ? new Date(input.expiresAt) : null;
  if (expiresAt && expiresAt.getTime() <= ctx.clock.now().getTime()) {
    throw new ValidationError('expires_at must be in the future', [{ field: 'expires_at', message: 'must be in the future' }]);
  }
  const bound = expiresAt && instantBoundFault(expiresAt);
  if (bound) throw ValidationError.forField('expires_at', bound);
  if (ctx.actor.type === 'api_key') {
    const rows = await ctx.db.query<{ scopes: Scope[]; expires_at: Date | null; created_by: string | null }>(
      'SELECT scopes, expires_at, created_by FROM api_keys WHERE id = $1 AND organization_id = $2',
      [ctx.actor.apiKeyId, input.organizationId],
    );
    const caller = rows[0];
    if (!caller) throw new NotFoundError('Organization');
    const extra = scopes.filter((s) => !caller.scopes.includes(s));
    if (extra.length > 0) {
      throw new AppError('FORBIDDEN', `An API key cannot create a key with scopes it does not have itself (${extra.join(', ')})`);
    }
    if (caller.expires_at) {
      // Left out: the new key inherits the caller's expiry. Null (never) or later: it would outlive the caller.
      if (input.expiresAt === null || (expiresAt && expiresAt.getTime() > caller.expires_at.getTime())) {
        throw new AppError('FORBIDDEN', 'An API key cannot create a key that outlives its own expiry');
      }
      expiresAt ??= caller.expires_at;
    }
    createdBy = caller.created_by;
  }
  const creator = createdBy;
  const { apiKey, key } = await createApiKey(ctx, {
    organizationId: input.organizationId,
    name: input.name,
    scopes,
    expiresAt,
    createdBy: creator,
    guard: creator
      ? async (tx) => {
          const allowed = keyScopesAllowed(await heldBy(tx, input.organizationId, creator, true));
          const extra = scopes.filter((s) => !allowed.includes(s));
          if (extra.length > 0) {
            throw new AppError(
              'FORBIDDEN',
              allowed.length === 0
                ? 'You cannot make API keys in this organization'
                : `Your role allows keys with ${allowed.join(', ')} only; an ${extra.join(', ')} key needs an owner or admin`,
            );
          }
        }
      : undefined,
  });
  return { ...viewApiKey(apiKey), key };
}

/** Revoke (api_keys.manage): the key is refused from this commit on; revoking twice is a no-op answer. */
export async function revokeOrganizationApiKey(ctx: Ctx, input: { organizationId: string; apiKeyId: string }): Promise<ApiKeyView> {
  await authorize(ctx, input.organizationId, 'api_keys.manage');
  return viewApiKey(await revokeApiKey(ctx, input.organizationId, input.apiKeyId));
}
