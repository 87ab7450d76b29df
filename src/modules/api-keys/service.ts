import type { Ctx } from '../../context.js';
import { NotFoundError } from '../../errors.js';
import { generateApiKey, keyPrefix, sha256Hex } from '../../lib/secrets.js';
import { writeAudit } from '../audit/service.js';
import { isUuid } from '../metering/state.js';

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
  input: { organizationId: string; name: string; scopes?: Scope[] | undefined; expiresAt?: Date | null | undefined; createdBy?: string | null },
): Promise<{ apiKey: ApiKeyRow; key: string }> {
  const key = generateApiKey();
  const apiKey = await ctx.db.transaction(async (tx) => {
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
    return row;
  });
  return { apiKey, key };
}

/** Revoke: the key stops working with this commit (every request reads the key row). */
export async function revokeApiKey(ctx: Ctx, organizationId: string, id: string): Promise<ApiKeyRow> {
  if (!isUuid(id)) throw new NotFoundError('API key');
  return ctx.db.transaction(async (tx) => {
    const rows = await tx.query<ApiKeyRow>(
      `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $1 AND organization_id = $2 RETURNING ${COLUMNS}`,
      [id, organizationId, ctx.clock.now()],
    );
    if (!rows[0]) throw new NotFoundError('API key');
    await writeAudit(tx, ctx, { organizationId, action: 'revoke', resourceType: 'api_key', resourceId: id });
    return rows[0];
  });
}
