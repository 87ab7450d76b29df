import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createKeyOverHttp, createPassesHarness, type Harness, json, setTierOverHttp, signUpWithOrganization } from '../../../test/harness.js';
import { type DnsStandIn, startDnsStandIn } from '../../../test/dns-stand-in.js';
import { type ProvisionerStandIn, startProvisioner } from '../../../test/provisioner-stand-in.js';
import { expectEnvelopeError, templateFixtures } from '../../../test/template-fixtures.js';
import { WORKERS } from '../../workers/catalog.js';
import { RETRY_SCHEDULE_MS } from '../webhooks/organization.js';
import type { TemplateView } from './catalog.js';
import type { TemplateDeploymentView } from './deployments.js';

/**
 * The status machine (docs/templates.md), driven by the declared worker run by hand under a manual clock: the
 * built-in provisioner, a signed provisioner stand-in on loopback that fails and recovers or always
 * fails, retry, the SSRF guard, the 409s of every other transition, and one audit row per transition.
 * The clocks start before the other template suites' rows (2026), so this file's worker never claims them.
 */
const START = '2025-05-01T00:00:00.000Z';
const SECRET = `whsec_${randomBytes(32).toString('base64')}`;
let builtIn: Harness;
let external: Harness;
let guarded: Harness;
let provisioner: ProvisionerStandIn;
let dns: DnsStandIn;
let h: Harness;
const f = templateFixtures(() => h);
const orgs = new Set<string>();

beforeAll(async () => {
  provisioner = await startProvisioner(SECRET);
  dns = await startDnsStandIn();
  builtIn = await createPassesHarness({ templateBaseDomain: 'apps.example.test' }, START);
  external = await createHarness(
    {
      // The provisioner (operator configuration) may be on loopback; tenants' webhooks may not.
      templateProvisionerAllowPrivate: true,
      webhookAttemptTimeoutMs: 2000,
      templateProvisionerUrl: `${provisioner.url}/provision`,
      templateProvisionerSecret: SECRET,
      dnsServers: [dns.server],
    },
    START,
    builtIn.deps.db,
  );
  // The guard refuses loopback unless WEBHOOK_ALLOW_PRIVATE_NETWORKS is on.
  guarded = await createHarness({ templateProvisionerUrl: `${provisioner.url}/provision`, templateProvisionerSecret: SECRET }, START, builtIn.deps.db);
});
afterAll(async () => {
  // builtIn's database is the file's own on PostgreSQL: closed last.
  await Promise.all([external?.close(), guarded?.close()]);
  await builtIn?.close();
  await Promise.all([provisioner.close(), dns.close()]);
});
afterEach(async () => {
  // Nothing of one test stays due for the next.
  await builtIn.deps.db.query(
    `UPDATE template_deployments SET status = 'failed', next_attempt_at = NULL, leased_until = NULL
     WHERE status IN ('pending', 'deploying') AND organization_id = ANY($1::uuid[])`,
    [[...orgs]],
  );
});

const worker = WORKERS.find((w) => w.name === 'template-provisioning')!;
const pass = (harness: Harness) => worker.run(harness.deps);
/** The owner's organization and a read+write API key: access tokens would expire as the clock moves past the backoffs. */
type Owner = Awaited<ReturnType<typeof signUpWithOrganization>> & { headers: Record<string, string> };

async function setUp(harness: Harness): Promise<{ o: Owner; template: TemplateView }> {
  h = harness;
  const template = await f.createTemplate({ config: { image: 'blog:1' } });
  const owner = await signUpWithOrganization(h, 'prov');
  orgs.add(owner.organizationId);
  const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write'] });
  return { o: { ...owner, headers: { 'x-api-key': key.key } }, template };
}

const url = (o: Owner, id: string) => `${f.deploymentsUrl(o.organizationId)}/${id}`;
async function read(o: Owner, id: string): Promise<TemplateDeploymentView> {
  const res = await h.request({ method: 'GET', url: url(o, id), headers: o.headers });
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: TemplateDeploymentView }>(res).data;
}
const act = (o: Owner, method: 'PUT' | 'DELETE' | 'POST', id: string, payload?: Record<string, unknown>) =>
  h.request({ method, url: method === 'POST' ? `${url(o, id)}/retry` : url(o, id), headers: o.headers, ...(payload ? { payload } : {}) });

/**
 * The status changes in order. A worker's claim and its outcome share one instant of the manual
 * clock; of two rows at one instant, the one into deploying came first.
 */
async function transitions(id: string): Promise<string[]> {
  const rows = (await f.auditRows(id)).filter((r) => r.action === 'status_change');
  const key = (r: (typeof rows)[number]) => r.created_at.getTime() * 2 + (r.metadata.to === 'deploying' ? 0 : 1);
  return rows.sort((a, b) => key(a) - key(b)).map((r) => `${r.metadata.from}>${r.metadata.to}`);
}

/** Past the longest wait after the n-th failed attempt (schedule +20 %). */
const pastBackoff = (failed: number) => Math.ceil(RETRY_SCHEDULE_MS[Math.min(failed, RETRY_SCHEDULE_MS.length) - 1]! * 1.2) + 1;

describe('built-in provisioner', () => {
  it('pending → deploying → active at the first pass, with https://{subdomain}.{TEMPLATE_BASE_DOMAIN}; then only name changes and delete are allowed', async () => {
    const { o, template } = await setUp(builtIn);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    expect(d.status).toBe('pending');
    h.clock.advance(1000);
    await pass(h);
    const active = await read(o, d.id);
    expect(active).toMatchObject({ status: 'active', deployment_url: `https://${d.subdomain}.apps.example.test`, attempts: 1, last_error: null, next_attempt_at: null });
    expect(await transitions(d.id)).toEqual(['pending>deploying', 'deploying>active']);
    const audit = await f.auditRows(d.id);
    expect(audit.filter((r) => r.action === 'status_change').every((r) => r.actor === 'system' && r.organization_id === o.organizationId)).toBe(true);

    expectEnvelopeError(await act(o, 'POST', d.id), 409, 'CONFLICT');
    expectEnvelopeError(await act(o, 'PUT', d.id, { config: { theme: 'x' } }), 409, 'CONFLICT');
    expectEnvelopeError(await act(o, 'PUT', d.id, { custom_domain: null }), 409, 'CONFLICT');
    const renamed = await act(o, 'PUT', d.id, { name: 'Renamed' });
    expect(renamed.statusCode, renamed.body).toBe(200);
    expect((await read(o, d.id)).status).toBe('active');
    expect((await act(o, 'DELETE', d.id)).statusCode).toBe(200);
  });

  it("a deleted organization's deployments are not provisioned", async () => {
    const { o, template } = await setUp(builtIn);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    const deleted = await h.request({ method: 'DELETE', url: `/organizations/${o.organizationId}`, headers: bearer(o.accessToken) });
    expect(deleted.statusCode, deleted.body).toBe(200);
    h.clock.advance(1000);
    await pass(h);
    const rows = await h.deps.db.query<{ status: string; attempts: number }>('SELECT status, attempts FROM template_deployments WHERE id = $1', [d.id]);
    expect(rows[0]).toEqual({ status: 'pending', attempts: 0 });
    expect(await transitions(d.id)).toEqual([]);
  });

  it('two workers at once provision each deployment once', async () => {
    const { o, template } = await setUp(builtIn);
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await f.createDeployment(o.accessToken, o.organizationId, template.id)).id);
    await Promise.all([pass(h), pass(h)]);
    for (const id of ids) {
      expect((await read(o, id)).status).toBe('active');
      expect(await transitions(id)).toEqual(['pending>deploying', 'deploying>active']);
    }
  });
});

describe('provisioner at TEMPLATE_PROVISIONER_URL', () => {
  it('fails twice, then succeeds: retried after each backoff, active with the answered URL; signed requests with the template config and the deployment fields', async () => {
    const { o, template } = await setUp(external);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { config: { theme: 'dark' } });
    provisioner.plan(d.id, { status: 500, body: { error: 'disk full' } }, { status: 502 }, { status: 201, body: { deployment_url: 'https://blog.customer.example/' } });

    await pass(h);
    let now = await read(o, d.id);
    expect(now).toMatchObject({ status: 'deploying', attempts: 1 });
    expect(now.last_error).toContain('500');
    // The provisioner's body stays in the operator's log: every member of the organization reads last_error.
    expect(now.last_error).not.toContain('disk full');
    const wait = new Date(now.next_attempt_at!).getTime() - h.clock.now().getTime();
    expect(wait).toBeGreaterThanOrEqual(24_000);
    expect(wait).toBeLessThanOrEqual(36_000);

    // While deploying: no retry, no reconfiguration, no delete.
    expectEnvelopeError(await act(o, 'POST', d.id), 409, 'CONFLICT');
    expectEnvelopeError(await act(o, 'PUT', d.id, { config: {} }), 409, 'CONFLICT');
    expectEnvelopeError(await act(o, 'DELETE', d.id), 409, 'CONFLICT');

    await pass(h); // not due yet
    expect(provisioner.requestsFor(d.id)).toHaveLength(1);
    h.clock.advance(pastBackoff(1));
    await pass(h);
    now = await read(o, d.id);
    expect(now).toMatchObject({ status: 'deploying', attempts: 2 });
    expect(now.last_error).toContain('502');
    h.clock.advance(pastBackoff(2));
    await pass(h);
    now = await read(o, d.id);
    expect(now).toMatchObject({ status: 'active', attempts: 3, deployment_url: 'https://blog.customer.example/', last_error: null, next_attempt_at: null });

    const requests = provisioner.requestsFor(d.id);
    expect(requests).toHaveLength(3);
    expect(requests.every((r) => r.verified)).toBe(true);
    expect(requests.map((r) => r.body.data.attempt)).toEqual([1, 2, 3]);
    expect(new Set(requests.map((r) => r.headers['webhook-id']))).toEqual(new Set([d.id]));
    expect(requests[0]!.headers['x-service-event']).toBe('template_deployment.provision');
    expect(requests[0]!.body).toMatchObject({
      id: d.id,
      type: 'template_deployment.provision',
      data: {
        template: { id: template.id, slug: template.slug, config: { image: 'blog:1' } },
        deployment: { id: d.id, organization_id: o.organizationId, template_id: template.id, name: d.name, subdomain: d.subdomain, custom_domain: null, config: { theme: 'dark' } },
      },
    });
    expect(await transitions(d.id)).toEqual(['pending>deploying', 'deploying>active']);
  });

  it('always fails: failed with the last error after 5 attempts; retry → deploying, attempted again, and may then succeed', async () => {
    const { o, template } = await setUp(external);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    provisioner.plan(d.id, { status: 503, body: { error: 'try later' } });
    for (let attempt = 1; attempt <= 5; attempt++) {
      await pass(h);
      expect(provisioner.requestsFor(d.id)).toHaveLength(attempt);
      h.clock.advance(pastBackoff(attempt));
    }
    const failed = await read(o, d.id);
    expect(failed).toMatchObject({ status: 'failed', attempts: 5, next_attempt_at: null, deployment_url: null });
    expect(failed.last_error).toContain('503');
    await pass(h);
    expect(provisioner.requestsFor(d.id)).toHaveLength(5);

    // Reconfiguring is allowed again while failed; then retry.
    expect((await act(o, 'PUT', d.id, { config: { size: 'small' } })).statusCode).toBe(200);
    const retried = await act(o, 'POST', d.id);
    expect(retried.statusCode, retried.body).toBe(200);
    expect(json<{ data: TemplateDeploymentView }>(retried).data).toMatchObject({ status: 'deploying', attempts: 0 });
    expectEnvelopeError(await act(o, 'POST', d.id), 409, 'CONFLICT');
    await pass(h);
    expect(provisioner.requestsFor(d.id)).toHaveLength(6);
    expect(provisioner.requestsFor(d.id)[5]!.body.data).toMatchObject({ attempt: 1, deployment: { config: { size: 'small' } } });
    expect(await read(o, d.id)).toMatchObject({ status: 'deploying', attempts: 1 });

    provisioner.plan(d.id, { status: 200, body: {} });
    h.clock.advance(pastBackoff(1));
    await pass(h);
    expect(await read(o, d.id)).toMatchObject({ status: 'active', deployment_url: `https://${d.subdomain}.localhost`, attempts: 2 });
    expect(await transitions(d.id)).toEqual(['pending>deploying', 'deploying>failed', 'failed>deploying', 'deploying>active']);
    const failedRow = (await f.auditRows(d.id)).find((r) => r.metadata.to === 'failed');
    expect(String(failedRow?.metadata.error)).toContain('503');
  });

  it('a 2xx whose deployment_url is not an http(s) URL is a failed attempt', async () => {
    const { o, template } = await setUp(external);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    provisioner.plan(d.id, { status: 200, body: { deployment_url: 'javascript:alert(1)' } });
    await pass(h);
    const now = await read(o, d.id);
    expect(now).toMatchObject({ status: 'deploying', attempts: 1, deployment_url: null });
    expect(now.last_error).toContain('deployment_url');
  });

  it('a provisioner allowed on a private network opens no private address to tenants’ webhooks', async () => {
    const { o } = await setUp(external);
    const created = await external.request({
      method: 'POST',
      url: `/organizations/${o.organizationId}/webhooks`,
      headers: bearer(o.accessToken),
      payload: { url: `${provisioner.url}/provision`, events: ['api_key.created'] },
    });
    expect(created.statusCode, created.body).toBe(403);
    expect(created.body).toContain('"URL_NOT_ALLOWED"');
    // Not by the URL's form only: the shared client itself refuses a private address.
    expect(external.deps.outbound.allowPrivate).toBe(false);
    expect(external.deps.provisionerOutbound.allowPrivate).toBe(true);
  });

  it('the SSRF guard refuses a loopback provisioner: failed at the first attempt, nothing sent', async () => {
    const { o, template } = await setUp(guarded);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    await pass(h);
    const now = await read(o, d.id);
    expect(now).toMatchObject({ status: 'failed', attempts: 1 });
    expect(now.last_error).toContain('not allowed');
    expect(provisioner.requestsFor(d.id)).toHaveLength(0);
  });
});

describe('custom domains and the provisioner', () => {
  it('the provisioner is given custom_domain only once verified: verifying an active deployment provisions it again with the domain', async () => {
    const { o, template } = await setUp(external);
    await f.enableCustomDomain(o.deploymentId);
    const domain = `${randomBytes(6).toString('hex')}.example.com`;
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domain });
    await pass(h);
    expect(await read(o, d.id)).toMatchObject({ status: 'active', custom_domain: domain, custom_domain_status: 'pending_verification' });
    expect(provisioner.requestsFor(d.id).map((r) => r.body.data.deployment.custom_domain)).toEqual([null]);

    dns.set(d.custom_domain_challenge!.name, { txt: [[d.custom_domain_challenge!.value]] });
    h.clock.advance(1000);
    const verified = await f.verifyDomain(o.headers, o.organizationId, d.id);
    expect(verified.statusCode, verified.body).toBe(200);
    expect(await read(o, d.id)).toMatchObject({ status: 'deploying', attempts: 0, custom_domain_status: 'verified' });
    h.clock.advance(1000);
    await pass(h);
    expect(await read(o, d.id)).toMatchObject({ status: 'active' });
    expect(provisioner.requestsFor(d.id).map((r) => r.body.data.deployment.custom_domain)).toEqual([null, domain]);
    expect(await transitions(d.id)).toEqual(['pending>deploying', 'deploying>active', 'active>deploying', 'deploying>active']);
  });

  it('a verified domain of an organization that lost the custom_domain flag (override off, a tier without it, suspended) is released and provisioned away; one that keeps it stays', async () => {
    const release = WORKERS.find((w) => w.name === 'custom-domain-entitlement')!;
    const operator = (deploymentId: string, path: string, payload: Record<string, unknown>) =>
      h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${deploymentId}${path}`, headers: { 'x-admin-key': h.config.adminApiKey }, payload });
    /** An organization whose template deployment is active and serves its verified domain, by the flag override or by its tier. */
    const serving = async (by: 'override' | 'tier') => {
      const { o, template } = await setUp(external);
      if (by === 'override') await f.enableCustomDomain(o.deploymentId);
      else await setTierOverHttp(h, o.deploymentId, 'launch');
      const domain = `${randomBytes(6).toString('hex')}.example.com`;
      const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domain });
      dns.set(d.custom_domain_challenge!.name, { txt: [[d.custom_domain_challenge!.value]] });
      expect((await f.verifyDomain(o.headers, o.organizationId, d.id)).statusCode).toBe(200);
      await pass(h);
      expect(await read(o, d.id)).toMatchObject({ status: 'active', custom_domain: domain, custom_domain_status: 'verified' });
      expect(provisioner.requestsFor(d.id).at(-1)!.body.data.deployment.custom_domain).toBe(domain);
      return { o, d, domain };
    };
    const cases = [
      { lost: 'flag override off', by: 'override' as const, lose: (id: string) => operator(id, '/flags', { custom_domain: false }) },
      { lost: 'a tier without it', by: 'tier' as const, lose: (id: string) => operator(id, '', { tier: 'trial' }) },
      { lost: 'suspended', by: 'override' as const, lose: (id: string) => operator(id, '', { status: 'suspended' }) },
    ];
    const kept = await serving('tier');
    for (const c of cases) {
      const { o, d, domain } = await serving(c.by);
      h.clock.advance(1000);
      // Still entitled: nothing is released.
      await release.run(h.deps);
      expect(await read(o, d.id), c.lost).toMatchObject({ status: 'active', custom_domain: domain, custom_domain_status: 'verified' });

      expect((await c.lose(o.deploymentId)).statusCode, c.lost).toBe(200);
      await release.run(h.deps);
      const after = await h.deps.db.query<{ status: string; custom_domain: string | null; custom_domain_status: string }>(
        'SELECT status, custom_domain, custom_domain_status FROM template_deployments WHERE id = $1',
        [d.id],
      );
      expect(after, c.lost).toEqual([{ status: 'deploying', custom_domain: null, custom_domain_status: 'lapsed' }]);
      const audit = (await f.auditRows(d.id)).find((r) => r.action === 'custom_domain_released');
      expect(audit, c.lost).toMatchObject({ actor: 'system', organization_id: o.organizationId, metadata: { custom_domain: domain, reason: 'feature_not_available' } });
      h.clock.advance(1000);
      await pass(h);
      // The provisioner is told: the deployment is provisioned again without the domain.
      expect(provisioner.requestsFor(d.id).at(-1)!.body.data.deployment.custom_domain, c.lost).toBeNull();
      expect((await transitions(d.id)).slice(-2), c.lost).toEqual(['active>deploying', 'deploying>active']);
    }
    expect(await read(kept.o, kept.d.id)).toMatchObject({ status: 'active', custom_domain: kept.domain, custom_domain_status: 'verified' });
  });

  it('a deleted organization’s verified domain is released: another organization may claim and verify it', async () => {
    const release = WORKERS.find((w) => w.name === 'custom-domain-entitlement')!;
    const { o: gone, template } = await setUp(external);
    await f.enableCustomDomain(gone.deploymentId);
    const domain = `${randomBytes(6).toString('hex')}.example.com`;
    const d = await f.createDeployment(gone.accessToken, gone.organizationId, template.id, { custom_domain: domain });
    dns.set(d.custom_domain_challenge!.name, { txt: [[d.custom_domain_challenge!.value]] });
    expect((await f.verifyDomain(gone.headers, gone.organizationId, d.id)).statusCode).toBe(200);
    expect((await h.request({ method: 'DELETE', url: `/organizations/${gone.organizationId}`, headers: bearer(gone.accessToken) })).statusCode).toBe(200);
    await release.run(h.deps);
    const [row] = await h.deps.db.query<{ custom_domain: string | null; custom_domain_status: string }>(
      'SELECT custom_domain, custom_domain_status FROM template_deployments WHERE id = $1',
      [d.id],
    );
    expect(row).toEqual({ custom_domain: null, custom_domain_status: 'lapsed' });
    const { o: next } = await setUp(external);
    await f.enableCustomDomain(next.deploymentId);
    const claim = await f.createDeployment(next.accessToken, next.organizationId, template.id, { custom_domain: domain });
    dns.set(claim.custom_domain_challenge!.name, { txt: [[claim.custom_domain_challenge!.value]] });
    const verified = await f.verifyDomain(next.headers, next.organizationId, claim.id);
    expect(json<{ data: { verified: boolean } }>(verified).data.verified).toBe(true);
  });
});
