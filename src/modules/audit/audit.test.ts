import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  type SignedInUser,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Entry = Record<string, unknown> & { id: string; created_at: string; action: string; resource_type: string };
type Page = { data: Entry[]; meta: { next_cursor: string | null } };
type ErrorBody = { error: { code: string }; details: { fields?: Array<{ field: string }> } };

const logs = (headers: Record<string, string>, orgId: string, query = '') =>
  h.request({ method: 'GET', url: `/organizations/${orgId}/audit-logs${query}`, headers });

async function walk(
  headers: Record<string, string>,
  orgId: string,
  query: string,
  from: string | null = null,
): Promise<{ entries: Entry[]; pages: number }> {
  const entries: Entry[] = [];
  let cursor: string | null = from;
  let pages = 0;
  do {
    const res = await logs(headers, orgId, `${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(res.statusCode, res.body).toBe(200);
    const body = json<Page>(res);
    entries.push(...body.data);
    cursor = body.meta.next_cursor;
    pages += 1;
  } while (cursor && pages < 100);
  return { entries, pages };
}

/** An organization whose log has 2 rows (organization, deployment) + `keys` key rows, some sharing a timestamp. */
async function busyOrganization(keys: number): Promise<SignedInUser & { organizationId: string; deploymentId: string }> {
  const owner = await signUpWithOrganization(h);
  for (let i = 0; i < keys; i++) {
    // Runs of three rows share one timestamp, so the id tie-break is exercised.
    if (i % 3 === 0) h.clock.advance(1000);
    await createKeyOverHttp(h, { ...bearer(owner.accessToken), 'user-agent': 'audit-test/1.0' }, owner.organizationId, { name: `k${i}` });
  }
  return owner;
}

describe('GET /organizations/{id}/audit-logs', () => {
  it('walks more than 25 rows newest first in pages without duplicates or gaps', async () => {
    const owner = await busyOrganization(27);
    const expected = await h.deps.db.query<{ id: string }>(
      'SELECT id FROM audit_logs WHERE organization_id = $1 ORDER BY created_at DESC, id DESC',
      [owner.organizationId],
    );
    expect(expected.length).toBeGreaterThan(25);
    const { entries, pages } = await walk(bearer(owner.accessToken), owner.organizationId, '?limit=7');
    expect(pages).toBe(Math.ceil(expected.length / 7));
    expect(new Set(entries.map((e) => e.id)).size).toBe(entries.length);
    expect(entries.map((e) => e.id)).toEqual(expected.map((r) => r.id));
    const times = entries.map((e) => Date.parse(e.created_at));
    expect(times).toEqual([...times].sort((a, b) => b - a));
    // The default page is 20.
    expect(json<Page>(await logs(bearer(owner.accessToken), owner.organizationId)).data).toHaveLength(20);
  });

  it('rows written while a client pages do not shift the pages it has not read yet', async () => {
    const owner = await busyOrganization(6);
    const first = json<Page>(await logs(bearer(owner.accessToken), owner.organizationId, '?limit=3'));
    h.clock.advance(1000);
    await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { name: 'late' });
    const rest = await walk(bearer(owner.accessToken), owner.organizationId, '?limit=3', first.meta.next_cursor);
    const all = [...first.data, ...rest.entries];
    expect(new Set(all.map((e) => e.id)).size).toBe(all.length);
    expect(all.some((e) => (e.metadata as { name?: string }).name === 'late')).toBe(false);
    expect(all).toHaveLength(6 + 2);
  });

  it('carries the documented fields plus actor, and filters by action and resource_type', async () => {
    const owner = await busyOrganization(2);
    const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { name: 'to revoke' });
    await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}/api-keys/${key.id}`, headers: bearer(owner.accessToken) });

    const revokes = json<Page>(await logs(bearer(owner.accessToken), owner.organizationId, '?action=revoke')).data;
    expect(revokes).toHaveLength(1);
    expect(revokes[0]).toMatchObject({ action: 'revoke', resource_type: 'api_key', resource_id: key.id, user_id: owner.userId, actor: `user:${owner.userId}` });

    const created = json<Page>(await logs(bearer(owner.accessToken), owner.organizationId, '?resource_type=api_key&action=create')).data;
    expect(created).toHaveLength(3);
    const k0 = created.find((e) => (e.metadata as { name?: string }).name === 'k0')!;
    expect(Object.keys(k0).sort()).toEqual(
      ['id', 'organization_id', 'user_id', 'actor', 'action', 'resource_type', 'resource_id', 'metadata', 'ip_address', 'user_agent', 'created_at'].sort(),
    );
    expect(k0).toMatchObject({ organization_id: owner.organizationId, ip_address: '127.0.0.1', user_agent: 'audit-test/1.0' });
    expect(k0.metadata).toMatchObject({ name: 'k0', scopes: ['read'] });
    expect(json<Page>(await logs(bearer(owner.accessToken), owner.organizationId, '?resource_type=nothing')).data).toEqual([]);
  });

  it('owners and admins read it; members and viewers get 403; another organization 404; keys need the admin scope', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const admin = await signUpAsMember(h, org, 'admin');
    expect((await logs(bearer(admin.accessToken), org)).statusCode).toBe(200);
    for (const role of ['member', 'viewer'] as const) {
      const u = await signUpAsMember(h, org, role);
      const res = await logs(bearer(u.accessToken), org);
      expect(res.statusCode, role).toBe(403);
      expect(json<ErrorBody>(res).error.code).toBe('FORBIDDEN');
    }
    const stranger = await signUpWithOrganization(h);
    expect(json<ErrorBody>(await logs(bearer(stranger.accessToken), org)).error.code).toBe('NOT_FOUND');
    const readWrite = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read', 'write'] });
    const adminKey = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['admin'] });
    expect((await logs({ 'x-api-key': readWrite.key }, org)).statusCode).toBe(403);
    expect((await logs({ 'x-api-key': adminKey.key }, org)).statusCode).toBe(200);
    expect((await logs({ 'x-api-key': adminKey.key }, stranger.organizationId)).statusCode).toBe(404);
  });

  it('refuses an invalid cursor, limit or filter with 400 VALIDATION_ERROR naming the field', async () => {
    const owner = await signUpWithOrganization(h);
    const forged = (v: object) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const cases: Array<[string, string]> = [
      ['?cursor=not-a-cursor', 'cursor'],
      [`?cursor=${forged({ at: '2026-01-01T00:00:00.000Z', id: 'x' })}`, 'cursor'],
      [`?cursor=${forged({ at: 'January 1, 2026', id: '6f1c3d2e-0000-4000-8000-000000000000' })}`, 'cursor'],
      [`?cursor=${forged({ at: '+275000-01-01T00:00:00.000Z', id: '6f1c3d2e-0000-4000-8000-000000000000' })}`, 'cursor'],
      // docs/input.md, Dates: canonical ISO, but no time the API hands out (PostgreSQL reads year 0000, PGlite refuses it).
      [`?cursor=${forged({ at: '0000-01-01T00:00:00.000Z', id: '6f1c3d2e-0000-4000-8000-000000000000' })}`, 'cursor'],
      [`?cursor=${forged({ at: '1969-12-31T23:59:59.999Z', id: '6f1c3d2e-0000-4000-8000-000000000000' })}`, 'cursor'],
      [`?cursor=${forged({ at: '9999-12-31T23:59:59.999Z', id: '6f1c3d2e-0000-4000-8000-000000000000' })}`, 'cursor'],
      ['?limit=0', 'limit'],
      ['?limit=101', 'limit'],
      ['?limit=ten', 'limit'],
      [`?action=${'a'.repeat(101)}`, 'action'],
      ['?actor=me', 'actor'],
    ];
    for (const [query, field] of cases) {
      const res = await logs(bearer(owner.accessToken), owner.organizationId, query);
      expect(res.statusCode, query).toBe(400);
      const body = json<ErrorBody>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields?.map((f) => f.field), query).toContain(field);
    }
  });
});
