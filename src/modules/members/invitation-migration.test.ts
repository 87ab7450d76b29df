import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, type Harness, joinByInvitation, signUpWithOrganization } from '../../../test/harness.js';
import { createApiKey } from '../api-keys/service.js';

/**
 * migrations/0019 on old rows (docs/accounts.md, "Invitations act for a member", Old rows): open
 * invitations sent with an API key before `invited_by` was recorded for them get their key and its
 * maker from the invite's audit row; what stays without an inviter, or has a revoked key, is withdrawn.
 * The migration's two data statements are run again here over rows written as the old code wrote them.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

async function dataStatements(): Promise<string[]> {
  const sql = await readFile(new URL('../../../migrations/0019_invitation_inviter.sql', import.meta.url), 'utf8');
  return sql
    .split('--> statement-breakpoint')
    .map((s) => s.trim())
    .filter((s) => /^(--.*\n)*UPDATE/.test(s));
}

/** An open invitation as the old code wrote it for a key: no inviter, and an audit row naming the key. */
async function oldKeyInvitation(organizationId: string, apiKeyId: string | null, email: string): Promise<string> {
  const now = h.clock.now();
  const [row] = await h.deps.db.query<{ id: string }>(
    `INSERT INTO invitations (organization_id, email, role, token_hash, expires_at, created_at)
     VALUES ($1, $2, 'admin', md5($2), $3, $4) RETURNING id`,
    [organizationId, email, new Date(now.getTime() + 86_400_000), now],
  );
  if (apiKeyId) {
    await h.deps.db.query(
      `INSERT INTO audit_logs (organization_id, actor, action, resource_type, resource_id, metadata, created_at)
       VALUES ($1, $2, 'invite', 'invitation', $3, '{}'::jsonb, $4)`,
      [organizationId, `api_key:${apiKeyId}`, row!.id, now],
    );
  }
  return row!.id;
}

describe('migration 0019 on invitations sent with a key before the inviter was recorded', () => {
  it('fills in the key and its maker; withdraws what has no inviter, a revoked key or an inviter who left', async () => {
    const owner = await signUpWithOrganization(h);
    const orgId = owner.organizationId;
    const admin = await joinByInvitation(h, bearer(owner.accessToken), orgId, 'admin');
    const live = await createApiKey(h.ctx, { organizationId: orgId, name: 'live', scopes: ['admin'], createdBy: owner.userId });
    const revoked = await createApiKey(h.ctx, { organizationId: orgId, name: 'revoked', scopes: ['admin'], createdBy: owner.userId });
    const left = await createApiKey(h.ctx, { organizationId: orgId, name: 'left', scopes: ['admin'], createdBy: admin.userId });
    const operator = await createApiKey(h.ctx, { organizationId: orgId, name: 'operator', scopes: ['admin'] });
    const ids = {
      live: await oldKeyInvitation(orgId, live.apiKey.id, `${orgId}-live@example.com`),
      revoked: await oldKeyInvitation(orgId, revoked.apiKey.id, `${orgId}-revoked@example.com`),
      left: await oldKeyInvitation(orgId, left.apiKey.id, `${orgId}-left@example.com`),
      operator: await oldKeyInvitation(orgId, operator.apiKey.id, `${orgId}-operator@example.com`),
      noAudit: await oldKeyInvitation(orgId, null, `${orgId}-lost@example.com`),
    };
    // As before the change: the key revoked and the member removed without touching the invitations.
    await h.deps.db.query('UPDATE api_keys SET revoked_at = $2 WHERE id = $1', [revoked.apiKey.id, h.clock.now()]);
    await h.deps.db.query('DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, admin.userId]);

    const statements = await dataStatements();
    expect(statements).toHaveLength(2);
    for (const statement of statements) await h.deps.db.query(statement);

    const rows = await h.deps.db.query<{ id: string; invited_by: string | null; api_key_id: string | null; withdrawn_reason: string | null; open: boolean }>(
      'SELECT id, invited_by, api_key_id, withdrawn_reason, revoked_at IS NULL AS open FROM invitations WHERE id = ANY($1::uuid[])',
      [Object.values(ids)],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect(byId.get(ids.live)).toMatchObject({ invited_by: owner.userId, api_key_id: live.apiKey.id, withdrawn_reason: null, open: true });
    expect(byId.get(ids.revoked)).toMatchObject({ invited_by: owner.userId, withdrawn_reason: 'api_key_revoked', open: false });
    expect(byId.get(ids.left)).toMatchObject({ invited_by: admin.userId, withdrawn_reason: 'inviter_lost_power', open: false });
    expect(byId.get(ids.operator)).toMatchObject({ invited_by: null, withdrawn_reason: 'inviter_unknown', open: false });
    expect(byId.get(ids.noAudit)).toMatchObject({ invited_by: null, withdrawn_reason: 'inviter_unknown', open: false });
  });
});
