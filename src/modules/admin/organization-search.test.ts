import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, signUpWithOrganization, unique } from '../../../test/harness.js';
import { createOrganization } from '../organizations/service.js';
import type { OrganizationHit } from './lists.js';

/** GET /api/v1/admin/organizations: the operator's search (docs/console.md "Operator"). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

interface SearchReply {
  organizations: OrganizationHit[];
  next_cursor: string | null;
}

const search = (query: string, headers = adminHeaders(h)) => h.request({ method: 'GET', url: `/api/v1/admin/organizations${query}`, headers });

async function found(q: string, extra = ''): Promise<SearchReply> {
  const res = await search(`?q=${encodeURIComponent(q)}${extra}`);
  expect(res.statusCode, res.body).toBe(200);
  return json<SearchReply>(res);
}

const slugOf = (prefix: string) => unique(prefix).toLowerCase().replace(/[^a-z0-9-]/g, '-');

/** An organization named exactly `name` (service layer), one second after the previous one on the clock. */
async function organizationNamed(name: string) {
  h.clock.advance(1000);
  const { organization, deployment } = await createOrganization(h.ctx, { name, slug: slugOf('named'), tier: 'trial' });
  return { id: organization.id, deploymentId: deployment.id, slug: organization.slug };
}

function expectInvalid(res: { statusCode: number; body: string }, field: string): void {
  expect(res.statusCode, res.body).toBe(400);
  const body = JSON.parse(res.body) as { error: string; code: string; fields?: Array<{ field: string }> };
  expect(body).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
  expect((body.fields ?? []).map((f) => f.field)).toContain(field);
}

describe('GET /api/v1/admin/organizations: authentication and input', () => {
  it('answers 401 with the flat body without the key or with a wrong one, and writes no audit row', async () => {
    const q = unique('unauthorized-search');
    for (const headers of [{}, { 'x-admin-key': 'wrong-admin-key-0123456789' }, bearer(h.config.adminApiKey)]) {
      const res = await search(`?q=${q}`, headers);
      expect(res.statusCode, res.body).toBe(401);
      expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
    }
    const audited = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE resource_type = 'organization' AND metadata->>'q' = $1", [q]);
    expect(audited).toEqual([]);
  });

  it('answers 400 naming the field for a bad limit, a cursor it did not give out, a q too long and an unknown parameter', async () => {
    expectInvalid(await search('?limit=0'), 'limit');
    expectInvalid(await search('?limit=101'), 'limit');
    expectInvalid(await search('?limit=ten'), 'limit');
    expectInvalid(await search('?cursor=garbage'), 'cursor');
    expectInvalid(await search(`?q=${'a'.repeat(321)}`), 'q');
    expectInvalid(await search('?organization_id=x'), 'organization_id');
    // A string PostgreSQL cannot store never reaches the query (docs/input.md).
    expectInvalid(await search('?q=a%00b'), 'query.q');
    expect((await search(`?q=${'a'.repeat(320)}`)).statusCode).toBe(200);
  });
});

describe('GET /api/v1/admin/organizations: what it finds', () => {
  it('finds by part of the name or slug (any case), by organization id, by deployment id and by member email', async () => {
    const owner = await signUpWithOrganization(h, 'findme');
    const org = json<{ data: { name: string; slug: string } }>(
      await h.request({ method: 'GET', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken) }),
    ).data;
    const other = await createTenant(h);
    const only = (reply: SearchReply) => reply.organizations.map((o) => o.id);

    const bySlug = await found(org.slug.slice(2).toUpperCase());
    expect(only(bySlug)).toEqual([owner.organizationId]);
    expect(bySlug.organizations[0]).toEqual({
      id: owner.organizationId,
      name: org.name,
      slug: org.slug,
      plan: 'free',
      deleted_at: null,
      created_at: expect.stringMatching(/Z$/),
      primary_deployment_id: owner.deploymentId,
      primary_deployment_tier: 'sandbox',
    });
    expect(only(await found(org.name.toLowerCase()))).toEqual([owner.organizationId]);
    expect(only(await found(owner.organizationId))).toEqual([owner.organizationId]);
    expect(only(await found(owner.organizationId.toUpperCase()))).toEqual([owner.organizationId]);
    expect(only(await found(owner.deploymentId))).toEqual([owner.organizationId]);
    expect(only(await found(owner.email.toUpperCase()))).toEqual([owner.organizationId]);
    // An address matches whole: a part of it is no member's address (nor a name).
    expect(only(await found(owner.email.slice(0, -4)))).toEqual([]);
    expect(only(await found(` ${other.deploymentId} `))).toEqual([other.organizationId]);
    expect(only(await found('6f1c3d2e-0000-4000-8000-000000000000'))).toEqual([]);
  });

  it('takes % and _ literally, not as LIKE wildcards', async () => {
    const tag = unique('lit');
    const underscore = await organizationNamed(`${tag} a_b`);
    await organizationNamed(`${tag} axb`);
    const percent = await organizationNamed(`${tag} 50%off`);
    await organizationNamed(`${tag} 50 and more off`);
    const backslash = await organizationNamed(`${tag} c\\d`);
    await organizationNamed(`${tag} cd`);

    expect((await found(`${tag} a_b`)).organizations.map((o) => o.id)).toEqual([underscore.id]);
    expect((await found(`${tag} 50%`)).organizations.map((o) => o.id)).toEqual([percent.id]);
    expect((await found(`${tag} c\\d`)).organizations.map((o) => o.id)).toEqual([backslash.id]);
    // As a wildcard `%` would match all six; literally, no name has a space before a `%`.
    expect((await found(`${tag} %`)).organizations).toEqual([]);
    expect((await found(tag)).organizations).toHaveLength(6);
  });

  it('pages newest first with a cursor, and shows a deleted organization with deleted_at', async () => {
    const tag = unique('page');
    const a = await organizationNamed(`${tag} one`);
    const b = await organizationNamed(`${tag} two`);
    const c = await organizationNamed(`${tag} three`);
    const first = await found(tag, '&limit=2');
    expect(first.organizations.map((o) => o.id)).toEqual([c.id, b.id]);
    expect(first.next_cursor).toEqual(expect.any(String));
    const second = await found(tag, `&limit=2&cursor=${first.next_cursor}`);
    expect(second.organizations.map((o) => o.id)).toEqual([a.id]);
    expect(second.next_cursor).toBeNull();

    // Without q: every organization (other files share the database), newest first.
    const all = json<SearchReply>(await search('?limit=50')).organizations;
    expect(all.length).toBeGreaterThanOrEqual(3);
    const order = all.map((o) => `${o.created_at} ${o.id}`);
    expect(order).toEqual([...order].sort().reverse());

    const owner = await signUpWithOrganization(h, 'gone');
    const deleted = await h.request({ method: 'DELETE', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken) });
    expect(deleted.statusCode, deleted.body).toBe(200);
    const hit = (await found(owner.organizationId)).organizations[0]!;
    expect(hit).toMatchObject({ id: owner.organizationId, primary_deployment_id: owner.deploymentId });
    expect(hit.deleted_at).toBe(h.clock.now().toISOString());
  });

  it('is audited: a read by the operator naming what was searched', async () => {
    const q = unique('audited-search');
    await found(q);
    const rows = await h.deps.db.query<{ organization_id: string | null; metadata: { q: string } }>(
      `SELECT organization_id, metadata FROM audit_logs
       WHERE actor = 'operator' AND action = 'read' AND resource_type = 'organization' AND metadata->>'q' = $1`,
      [q],
    );
    expect(rows).toEqual([{ organization_id: null, metadata: { q } }]);
  });
});
