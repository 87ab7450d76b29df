import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { bearer, createHarness, createKeyOverHttp, databaseBefore, type Harness, signUpAsMember, signUpWithOrganization } from './harness.js';

/**
 * Migration 0033 (docs/accounts.md, Powers): webhooks made through an API key before they belonged to
 * the key's maker get that maker, found by their creation's audit row; then an active webhook whose
 * maker is no longer a member is turned off, as a removal now does. The rows are made as the code
 * before wrote them: created_by null for a key-made webhook, and left on when its maker was removed.
 */
describe('webhooks made before they belonged to their makers', () => {
  let h: Harness;
  let db: Database;
  beforeAll(async () => {
    db = await databaseBefore('0033');
    h = await createHarness({ webhookAllowPrivateNetworks: true }, undefined, db);
  });
  afterAll(async () => {
    await h?.close();
    await db?.close();
  });

  const hook = async (headers: Record<string, string>, orgId: string, path: string) => {
    const res = await h.request({ method: 'POST', url: `/organizations/${orgId}/webhooks`, headers, payload: { url: `https://hooks.example.com/${path}`, events: ['api_key.created'] } });
    expect(res.statusCode, res.body).toBe(201);
    return (res.json() as { data: { id: string } }).data.id;
  };
  const state = async (id: string) =>
    (await db.query<{ created_by: string | null; is_active: boolean }>('SELECT created_by, is_active FROM webhooks WHERE id = $1', [id]))[0];

  it('a key-made webhook gets its maker; one of a maker since removed is turned off; the rest stay as they were', async () => {
    const o = await signUpWithOrganization(h, 'mig');
    const stays = await signUpAsMember(h, o.organizationId, 'admin');
    const leaves = await signUpAsMember(h, o.organizationId, 'admin');
    const stayKey = await createKeyOverHttp(h, bearer(stays.accessToken), o.organizationId, { scopes: ['read', 'write', 'admin'] });
    const leaveKey = await createKeyOverHttp(h, bearer(leaves.accessToken), o.organizationId, { scopes: ['read', 'write', 'admin'] });
    const byStayKey = await hook(bearer(stayKey.key), o.organizationId, 'stay-key');
    const byLeaveKey = await hook(bearer(leaveKey.key), o.organizationId, 'leave-key');
    const byLeaver = await hook(bearer(leaves.accessToken), o.organizationId, 'leaver');
    const byOwner = await hook(bearer(o.accessToken), o.organizationId, 'owner');
    // As the code before wrote them: key-made webhooks had no maker, and a removal left the member's webhooks on.
    await db.query('UPDATE webhooks SET created_by = NULL WHERE id = ANY($1::uuid[])', [[byStayKey, byLeaveKey]]);
    await db.query('DELETE FROM organization_members WHERE organization_id = $1 AND user_id = $2', [o.organizationId, leaves.userId]);

    await runMigrations(db);

    expect(await state(byStayKey)).toEqual({ created_by: stays.userId, is_active: true });
    expect(await state(byLeaveKey)).toEqual({ created_by: leaves.userId, is_active: false });
    expect(await state(byLeaver)).toEqual({ created_by: leaves.userId, is_active: false });
    expect(await state(byOwner)).toEqual({ created_by: o.userId, is_active: true });
  });
});
