import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  type Harness,
  json,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';
import { expectEnvelopeError, slugOf, templateFixtures } from '../../../test/template-fixtures.js';
import type { TemplateView } from './catalog.js';
import type { TemplateDeploymentView } from './deployments.js';

/**
 * Template deployments (docs/templates.md) over HTTP, before any provisioning: create/read/update/delete,
 * who may do what (owners and admins manage, members and viewers read, API keys by scope), isolation
 * between organizations, bad input (400 naming the field, nothing written), duplicates (409) and the
 * custom_domain flag (403 FEATURE_NOT_AVAILABLE until the operator turns it on).
 */
let h: Harness;
let template: TemplateView;
const f = templateFixtures(() => h);
beforeAll(async () => {
  h = await createHarness();
  template = await f.createTemplate();
});
afterAll(async () => {
  await h.close();
});

const one = (orgId: string, id: string) => `${f.deploymentsUrl(orgId)}/${id}`;
type Data<T> = { data: T };

const enableCustomDomain = f.enableCustomDomain;

describe('create, read, update, delete', () => {
  it('an owner creates a pending deployment, reads it, lists it, renames and reconfigures it, and deletes it', async () => {
    const o = await signUpWithOrganization(h, 'td');
    const subdomain = slugOf('blog');
    const created = await f.createDeployment(o.accessToken, o.organizationId, template.id, { subdomain, config: { theme: 'dark' } });
    expect(created).toMatchObject({
      organization_id: o.organizationId,
      template_id: template.id,
      name: 'My blog',
      subdomain,
      custom_domain: null,
      config: { theme: 'dark' },
      status: 'pending',
      deployment_url: null,
      last_error: null,
      attempts: 0,
    });
    const headers = bearer(o.accessToken);
    const read = await h.request({ method: 'GET', url: one(o.organizationId, created.id), headers });
    expect(json<Data<TemplateDeploymentView>>(read).data).toEqual(created);
    const list = await h.request({ method: 'GET', url: f.deploymentsUrl(o.organizationId), headers });
    expect(json<{ data: TemplateDeploymentView[]; meta: { next_cursor: string | null } }>(list)).toMatchObject({ data: [created], meta: { next_cursor: null } });

    const updated = await h.request({ method: 'PUT', url: one(o.organizationId, created.id), headers, payload: { name: 'Renamed', config: { theme: 'light' } } });
    expect(updated.statusCode, updated.body).toBe(200);
    expect(json<Data<TemplateDeploymentView>>(updated).data).toMatchObject({ name: 'Renamed', config: { theme: 'light' }, status: 'pending' });
    expectEnvelopeError(await h.request({ method: 'PUT', url: one(o.organizationId, created.id), headers, payload: {} }), 400, 'VALIDATION_ERROR');

    const deleted = await h.request({ method: 'DELETE', url: one(o.organizationId, created.id), headers });
    expect(deleted.statusCode, deleted.body).toBe(200);
    expectEnvelopeError(await h.request({ method: 'GET', url: one(o.organizationId, created.id), headers }), 404, 'NOT_FOUND');
    const audit = await f.auditRows(created.id);
    expect(audit.map((a) => a.action).sort()).toEqual(['create', 'delete', 'update']);
    expect(audit.every((a) => a.organization_id === o.organizationId)).toBe(true);
  });

  it('retry of a deployment that has not failed is 409', async () => {
    const o = await signUpWithOrganization(h, 'td');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    const res = await h.request({ method: 'POST', url: `${one(o.organizationId, d.id)}/retry`, headers: bearer(o.accessToken) });
    expectEnvelopeError(res, 409, 'CONFLICT');
  });

  it('lists newest first with cursor pagination', async () => {
    const o = await signUpWithOrganization(h, 'td');
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push((await f.createDeployment(o.accessToken, o.organizationId, template.id)).id);
      h.clock.advance(1000);
    }
    const first = json<{ data: TemplateDeploymentView[]; meta: { next_cursor: string } }>(
      await h.request({ method: 'GET', url: `${f.deploymentsUrl(o.organizationId)}?limit=2`, headers: bearer(o.accessToken) }),
    );
    expect(first.data.map((d) => d.id)).toEqual([ids[2], ids[1]]);
    const second = json<{ data: TemplateDeploymentView[] }>(
      await h.request({ method: 'GET', url: `${f.deploymentsUrl(o.organizationId)}?limit=2&cursor=${first.meta.next_cursor}`, headers: bearer(o.accessToken) }),
    );
    expect(second.data.map((d) => d.id)).toEqual([ids[0]]);
  });
});

describe('rights', () => {
  it('admins manage; members and viewers read but cannot write (403); API keys: read lists, write manages', async () => {
    const o = await signUpWithOrganization(h, 'td-rights');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    const admin = await signUpAsMember(h, o.organizationId, 'admin');
    const member = await signUpAsMember(h, o.organizationId, 'member');
    const viewer = await signUpAsMember(h, o.organizationId, 'viewer');

    const byAdmin = await f.createDeployment(admin.accessToken, o.organizationId, template.id);
    expect((await h.request({ method: 'DELETE', url: one(o.organizationId, byAdmin.id), headers: bearer(admin.accessToken) })).statusCode).toBe(200);

    for (const reader of [member, viewer]) {
      const headers = bearer(reader.accessToken);
      expect((await h.request({ method: 'GET', url: f.deploymentsUrl(o.organizationId), headers })).statusCode).toBe(200);
      expect((await h.request({ method: 'GET', url: one(o.organizationId, d.id), headers })).statusCode).toBe(200);
      expectEnvelopeError(await f.postDeployment(reader.accessToken, o.organizationId, { template_id: template.id, name: 'x', subdomain: slugOf('no') }), 403, 'FORBIDDEN');
      expectEnvelopeError(await h.request({ method: 'PUT', url: one(o.organizationId, d.id), headers, payload: { name: 'no' } }), 403, 'FORBIDDEN');
      expectEnvelopeError(await h.request({ method: 'DELETE', url: one(o.organizationId, d.id), headers }), 403, 'FORBIDDEN');
      expectEnvelopeError(await h.request({ method: 'POST', url: `${one(o.organizationId, d.id)}/retry`, headers }), 403, 'FORBIDDEN');
    }

    const readKey = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read'] });
    expect((await h.request({ method: 'GET', url: f.deploymentsUrl(o.organizationId), headers: { 'x-api-key': readKey.key } })).statusCode).toBe(200);
    const refused = await h.request({ method: 'PUT', url: one(o.organizationId, d.id), headers: { 'x-api-key': readKey.key }, payload: { name: 'no' } });
    expectEnvelopeError(refused, 403, 'FORBIDDEN');
    const writeKey = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write'] });
    const byKey = await h.request({ method: 'PUT', url: one(o.organizationId, d.id), headers: { 'x-api-key': writeKey.key }, payload: { name: 'By key' } });
    expect(byKey.statusCode, byKey.body).toBe(200);
    expect(await f.countDeployments(o.organizationId)).toBe(1);
  });

  it("another organization's deployment is 404 on every route, and its list does not show it", async () => {
    const a = await signUpWithOrganization(h, 'td-a');
    const b = await signUpWithOrganization(h, 'td-b');
    const d = await f.createDeployment(a.accessToken, a.organizationId, template.id);
    const headers = bearer(b.accessToken);
    for (const orgId of [a.organizationId, b.organizationId]) {
      expectEnvelopeError(await h.request({ method: 'GET', url: one(orgId, d.id), headers }), 404, 'NOT_FOUND');
      expectEnvelopeError(await h.request({ method: 'PUT', url: one(orgId, d.id), headers, payload: { name: 'x' } }), 404, 'NOT_FOUND');
      expectEnvelopeError(await h.request({ method: 'DELETE', url: one(orgId, d.id), headers }), 404, 'NOT_FOUND');
      expectEnvelopeError(await h.request({ method: 'POST', url: `${one(orgId, d.id)}/retry`, headers }), 404, 'NOT_FOUND');
    }
    expectEnvelopeError(await h.request({ method: 'GET', url: f.deploymentsUrl(a.organizationId), headers }), 404, 'NOT_FOUND');
    const own = json<{ data: TemplateDeploymentView[] }>(await h.request({ method: 'GET', url: f.deploymentsUrl(b.organizationId), headers }));
    expect(own.data).toEqual([]);
    const keyOfB = await createKeyOverHttp(h, headers, b.organizationId, { scopes: ['read', 'write'] });
    expectEnvelopeError(await h.request({ method: 'GET', url: one(a.organizationId, d.id), headers: { 'x-api-key': keyOfB.key } }), 404, 'NOT_FOUND');
    expect(await f.countDeployments(a.organizationId)).toBe(1);
  });
});

describe('input', () => {
  it('bad input is 400 naming the field, and nothing is written', async () => {
    const o = await signUpWithOrganization(h, 'td-bad');
    await enableCustomDomain(o.deploymentId);
    const inactive = await f.createTemplate({ is_active: false });
    const base = { template_id: template.id, name: 'x', subdomain: slugOf('ok') };
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ ...base, subdomain: 'Has_Upper' }, 'subdomain'],
      [{ ...base, subdomain: 'ends-with-' }, 'subdomain'],
      [{ ...base, subdomain: 'a'.repeat(64) }, 'subdomain'],
      [{ ...base, config: [1, 2] }, 'config'],
      [{ ...base, config: 'x' }, 'config'],
      [{ ...base, config: null }, 'config'],
      [{ ...base, template_id: '6f1c3d2e-0000-4000-8000-000000000000' }, 'template_id'],
      [{ ...base, template_id: inactive.id }, 'template_id'],
      [{ ...base, template_id: 'nope' }, 'template_id'],
      [{ ...base, custom_domain: 'not a domain' }, 'custom_domain'],
      [{ ...base, custom_domain: 'localhost' }, 'custom_domain'],
      [{ ...base, custom_domain: '10.0.0.1' }, 'custom_domain'],
      [{ ...base, custom_domain: `x.${h.config.templateBaseDomain}` }, 'custom_domain'],
      [{ ...base, custom_domain: 'app.localhost' }, 'custom_domain'],
      [{ ...base, custom_domain: '0x7f.1' }, 'custom_domain'],
      [{ ...base, custom_domain: '[::1]' }, 'custom_domain'],
      // PUBLIC_BASE_URL's host is this service's own name.
      [{ ...base, custom_domain: 'creditgate.test' }, 'custom_domain'],
      [{ ...base, custom_domain: 'evil.creditgate.test' }, 'custom_domain'],
      [{ ...base, name: '' }, 'name'],
      [{ ...base, status: 'active' }, 'status'],
    ];
    for (const [payload, field] of cases) {
      expectEnvelopeError(await f.postDeployment(o.accessToken, o.organizationId, payload), 400, 'VALIDATION_ERROR', field);
    }
    expect(await f.countDeployments(o.organizationId)).toBe(0);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    for (const [payload, field] of [
      [{ config: [1] }, 'config'],
      [{ custom_domain: 'bad domain' }, 'custom_domain'],
      [{ subdomain: 'moved' }, 'subdomain'],
    ] as Array<[Record<string, unknown>, string]>) {
      const res = await h.request({ method: 'PUT', url: one(o.organizationId, d.id), headers: bearer(o.accessToken), payload });
      expectEnvelopeError(res, 400, 'VALIDATION_ERROR', field);
    }
    const still = json<Data<TemplateDeploymentView>>(await h.request({ method: 'GET', url: one(o.organizationId, d.id), headers: bearer(o.accessToken) }));
    expect(still.data).toEqual(d);
  });

  it('a taken subdomain is 409 across organizations; a custom domain claimed elsewhere (unverified) is not, and is stored as lower-case punycode', async () => {
    const a = await signUpWithOrganization(h, 'td-dup');
    const b = await signUpWithOrganization(h, 'td-dup');
    await enableCustomDomain(a.deploymentId);
    await enableCustomDomain(b.deploymentId);
    const domain = `${slugOf('shop')}.example.com`;
    const first = await f.createDeployment(a.accessToken, a.organizationId, template.id, { custom_domain: domain.toUpperCase() });
    expect(first.custom_domain).toBe(domain);
    expectEnvelopeError(await f.postDeployment(b.accessToken, b.organizationId, { template_id: template.id, name: 'x', subdomain: first.subdomain }), 409, 'CONFLICT');
    expect(first).toMatchObject({ custom_domain_status: 'pending_verification', custom_domain_verified_at: null });
    expect(first.custom_domain_challenge).toEqual({ type: 'TXT', name: `_creditgate-challenge.${domain}`, value: expect.stringMatching(/^creditgate-verify=[0-9A-Za-z]{32}$/) });
    // A claim proves nothing: b may claim it too (docs/templates.md, Custom domains), with its own challenge.
    const second = await f.createDeployment(b.accessToken, b.organizationId, template.id, { custom_domain: `${domain}.` });
    expect(second).toMatchObject({ custom_domain: domain, custom_domain_status: 'pending_verification' });
    expect(second.custom_domain_challenge?.value).not.toBe(first.custom_domain_challenge?.value);
    const idn = await f.createDeployment(b.accessToken, b.organizationId, template.id, { custom_domain: 'Bücher.Example.COM.' });
    expect(idn.custom_domain).toBe('xn--bcher-kva.example.com');
    expect(await f.countDeployments(b.organizationId)).toBe(2);
    // The same domain again keeps the claim; another one is a new claim with a new challenge.
    const same = await h.request({ method: 'PUT', url: one(a.organizationId, first.id), headers: bearer(a.accessToken), payload: { custom_domain: domain } });
    expect(json<Data<TemplateDeploymentView>>(same).data.custom_domain_challenge).toEqual(first.custom_domain_challenge);
    const moved = await h.request({ method: 'PUT', url: one(a.organizationId, first.id), headers: bearer(a.accessToken), payload: { custom_domain: `new.${domain}` } });
    expect(json<Data<TemplateDeploymentView>>(moved).data.custom_domain_challenge?.value).not.toBe(first.custom_domain_challenge?.value);
  });

  it('custom_domain needs the flag of the primary deployment: 403 FEATURE_NOT_AVAILABLE until the operator turns it on', async () => {
    const o = await signUpWithOrganization(h, 'td-flag');
    const domain = `${slugOf('flag')}.example.com`;
    const body = { template_id: template.id, name: 'x', subdomain: slugOf('flag'), custom_domain: domain };
    expectEnvelopeError(await f.postDeployment(o.accessToken, o.organizationId, body), 403, 'FEATURE_NOT_AVAILABLE');
    const plain = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    const put = await h.request({ method: 'PUT', url: one(o.organizationId, plain.id), headers: bearer(o.accessToken), payload: { custom_domain: domain } });
    expectEnvelopeError(put, 403, 'FEATURE_NOT_AVAILABLE');
    expect(await f.countDeployments(o.organizationId)).toBe(1);

    await enableCustomDomain(o.deploymentId);
    const created = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domain });
    expect(created.custom_domain).toBe(domain);
    const cleared = await h.request({ method: 'PUT', url: one(o.organizationId, created.id), headers: bearer(o.accessToken), payload: { custom_domain: null } });
    expect(json<Data<TemplateDeploymentView>>(cleared).data).toMatchObject({ custom_domain: null, custom_domain_status: null, custom_domain_challenge: null });
  });
});
