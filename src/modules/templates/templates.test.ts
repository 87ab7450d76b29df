import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, signUp, signUpWithOrganization } from '../../../test/harness.js';
import { slugOf, templateFixtures } from '../../../test/template-fixtures.js';
import type { TemplateView } from './catalog.js';

/**
 * The template catalogue (docs/templates.md): the operator's CRUD (flat shapes, audited, slug rule and
 * uniqueness, http(s) icons, config an object, delete refused while deployments use it) and
 * GET /templates (signed-in users, active templates only).
 */
let h: Harness;
const f = templateFixtures(() => h);
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const admin = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: Record<string, unknown>) =>
  h.request({ method, url, headers: adminHeaders(h), ...(payload ? { payload } : {}) });

describe('operator CRUD at /api/v1/admin/templates', () => {
  it('creates with the documented fields and defaults, lists, updates and deletes; every call is audited as the operator', async () => {
    const slug = slugOf('crud');
    const created = await admin('POST', '/api/v1/admin/templates', {
      name: 'Shop',
      slug,
      description: 'A small shop',
      category: 'commerce',
      icon_url: 'https://cdn.example.com/shop.png',
      config: { image: 'shop:2', replicas: 1 },
    });
    expect(created.statusCode, created.body).toBe(201);
    const t = json<TemplateView>(created);
    expect(t).toMatchObject({ name: 'Shop', slug, description: 'A small shop', category: 'commerce', icon_url: 'https://cdn.example.com/shop.png', config: { image: 'shop:2', replicas: 1 }, is_active: true });

    const listed = json<{ templates: TemplateView[] }>(await admin('GET', '/api/v1/admin/templates'));
    expect(listed.templates.find((x) => x.id === t.id)).toEqual(t);
    h.clock.advance(1000);

    const updated = await admin('PUT', `/api/v1/admin/templates/${t.id}`, { is_active: false, description: null, config: { image: 'shop:3' } });
    expect(updated.statusCode, updated.body).toBe(200);
    expect(json<TemplateView>(updated)).toMatchObject({ id: t.id, name: 'Shop', slug, is_active: false, description: null, config: { image: 'shop:3' } });

    h.clock.advance(1000);
    const deleted = await admin('DELETE', `/api/v1/admin/templates/${t.id}`);
    expect(deleted.statusCode, deleted.body).toBe(200);
    expect((await admin('DELETE', `/api/v1/admin/templates/${t.id}`)).statusCode).toBe(404);
    expect((await admin('PUT', `/api/v1/admin/templates/${t.id}`, { name: 'x' })).statusCode).toBe(404);

    const audit = await f.auditRows(t.id);
    expect(audit.map((a) => [a.actor, a.action])).toEqual([
      ['operator', 'create'],
      ['operator', 'update'],
      ['operator', 'delete'],
    ]);
    const reads = await h.deps.db.query("SELECT 1 FROM audit_logs WHERE actor = 'operator' AND action = 'read' AND resource_type = 'template'");
    expect(reads.length).toBeGreaterThan(0);
  });

  it('a taken slug is 409 on create and on update', async () => {
    const a = await f.createTemplate();
    const b = await f.createTemplate();
    const dup = await admin('POST', '/api/v1/admin/templates', { name: 'Dup', slug: a.slug });
    expect(dup.statusCode).toBe(409);
    expect(json(dup)).toMatchObject({ error: 'conflict', code: 'CONFLICT' });
    expect((await admin('PUT', `/api/v1/admin/templates/${b.id}`, { slug: a.slug })).statusCode).toBe(409);
  });

  it('bad input is 400 naming the field (flat shape) and writes nothing', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ name: 'x', slug: 'Not A Slug' }, 'slug'],
      [{ name: 'x', slug: '-leading' }, 'slug'],
      [{ name: 'x', slug: slugOf('ok'), icon_url: 'javascript:alert(1)' }, 'icon_url'],
      [{ name: 'x', slug: slugOf('ok'), config: [1, 2] }, 'config'],
      [{ name: 'x', slug: slugOf('ok'), config: 'text' }, 'config'],
      [{ name: '', slug: slugOf('ok') }, 'name'],
      [{ name: 'x', slug: slugOf('ok'), surprise: true }, 'surprise'],
    ];
    const before = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM templates');
    for (const [payload, field] of cases) {
      const res = await admin('POST', '/api/v1/admin/templates', payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      const body = json<{ code: string; fields: Array<{ field: string }> }>(res);
      expect(body.code).toBe('INVALID_REQUEST');
      expect(body.fields.map((x) => x.field)).toContain(field);
    }
    const after = await h.deps.db.query<{ n: number }>('SELECT count(*)::int AS n FROM templates');
    expect(after[0]!.n).toBe(before[0]!.n);
    const t = await f.createTemplate();
    expect((await admin('PUT', `/api/v1/admin/templates/${t.id}`, {})).statusCode).toBe(400);
    expect((await admin('PUT', `/api/v1/admin/templates/${t.id}`, { config: null })).statusCode).toBe(400);
  });

  it('a template that deployments use cannot be deleted (409); deactivated, it stays for them', async () => {
    const t = await f.createTemplate();
    const o = await signUpWithOrganization(h, 'tpl-del');
    await f.createDeployment(o.accessToken, o.organizationId, t.id);
    const refused = await admin('DELETE', `/api/v1/admin/templates/${t.id}`);
    expect(refused.statusCode).toBe(409);
    expect(json<{ message: string }>(refused).message).toContain('deactivate');
    expect((await admin('PUT', `/api/v1/admin/templates/${t.id}`, { is_active: false })).statusCode).toBe(200);
    expect(await f.countDeployments(o.organizationId)).toBe(1);
  });

  it('needs the operator key: a user token or an API key is 401', async () => {
    const t = await createTenant(h);
    const user = await signUp(h);
    for (const headers of [bearer(t.apiKey), bearer(user.accessToken), {}]) {
      expect((await h.request({ method: 'GET', url: '/api/v1/admin/templates', headers })).statusCode).toBe(401);
    }
  });
});

describe('GET /templates', () => {
  it('lists active templates only, in the envelope, to a signed-in user and to an API key with read', async () => {
    const active = await f.createTemplate({ name: 'Active one' });
    const hidden = await f.createTemplate({ name: 'Hidden one', is_active: false });
    const user = await signUp(h);
    const res = await h.request({ method: 'GET', url: '/templates', headers: bearer(user.accessToken) });
    expect(res.statusCode, res.body).toBe(200);
    const body = json<{ success: boolean; data: TemplateView[] }>(res);
    expect(body.success).toBe(true);
    expect(body.data.every((t) => t.is_active)).toBe(true);
    expect(body.data.map((t) => t.id)).toContain(active.id);
    expect(body.data.map((t) => t.id)).not.toContain(hidden.id);

    const tenant = await createTenant(h);
    const byKey = await h.request({ method: 'GET', url: '/templates', headers: bearer(tenant.apiKey) });
    expect(byKey.statusCode).toBe(200);
    const writeOnly = await createTenant(h, { scopes: ['write'] });
    const refused = await h.request({ method: 'GET', url: '/templates', headers: bearer(writeOnly.apiKey) });
    expect(refused.statusCode).toBe(403);
    expect(json(refused)).toMatchObject({ success: false, error: { code: 'INSUFFICIENT_SCOPE' } });
  });

  it('without credentials is 401 in the envelope', async () => {
    const res = await h.request({ method: 'GET', url: '/templates' });
    expect(res.statusCode).toBe(401);
    expect(json(res)).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
  });
});
