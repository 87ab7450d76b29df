import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DnsStandIn, startDnsStandIn } from '../../../test/dns-stand-in.js';
import { bearer, createHarness, createKeyOverHttp, createPassesHarness, type Harness, json, signUpWithOrganization } from '../../../test/harness.js';
import { expectEnvelopeError, slugOf, templateFixtures } from '../../../test/template-fixtures.js';
import { WORKERS } from '../../workers/catalog.js';
import type { TemplateView } from './catalog.js';
import type { TemplateDeploymentView } from './deployments.js';

/**
 * Custom domains are claimed, then proven by a DNS TXT record (docs/templates.md, Custom domains),
 * resolved by the product's own resolver against a DNS server on loopback UDP. The lapse harness's
 * clock starts before every other template suite's rows, so its sweep lapses only its own claims
 * (another suite's provisioning worker may provision those rows meanwhile: the lapse ignores status).
 */
let dns: DnsStandIn;
let h: Harness;
let lapseH: Harness;
let template: TemplateView;
const f = templateFixtures(() => h);
beforeAll(async () => {
  dns = await startDnsStandIn();
  // A short lookup bound (test-only config, not an environment variable) keeps the timeout case quick.
  // A second: an answering stand-in on a loaded machine is never mistaken for a silent one.
  const dnsConfig = { dnsServers: [dns.server], dnsTimeoutMs: 1000 };
  h = await createPassesHarness({ ...dnsConfig, templateReservedSubdomains: ['shop'] });
  lapseH = await createHarness(dnsConfig, '2024-01-01T00:00:00.000Z', h.deps.db);
  template = await f.createTemplate();
});
afterAll(async () => {
  await lapseH?.close();
  await h?.close();
  await dns.close();
});

type Owner = Awaited<ReturnType<typeof signUpWithOrganization>>;
type Data<T> = { data: T };
const one = (o: Owner, id: string) => `${f.deploymentsUrl(o.organizationId)}/${id}`;
const domainOf = (prefix: string) => `${slugOf(prefix)}.example.com`;
async function owner(prefix: string): Promise<Owner> {
  const o = await signUpWithOrganization(h, prefix);
  await f.enableCustomDomain(o.deploymentId);
  return o;
}
async function read(o: Owner, id: string): Promise<TemplateDeploymentView> {
  return json<Data<TemplateDeploymentView>>(await h.request({ method: 'GET', url: one(o, id), headers: bearer(o.accessToken) })).data;
}
async function verify(o: Owner, id: string): Promise<{ status: number; data: { verified: boolean; reason?: string } }> {
  const res = await f.verifyDomain(bearer(o.accessToken), o.organizationId, id);
  expect(res.statusCode, res.body).toBeLessThan(500);
  return { status: res.statusCode, data: res.statusCode === 200 ? json<Data<{ verified: boolean; reason?: string }>>(res).data : { verified: false } };
}
/** Publish a claim's challenge, its value split over two character-strings (a multi-string record), beside an unrelated one. */
function publish(d: TemplateDeploymentView): void {
  const value = d.custom_domain_challenge!.value;
  dns.set(d.custom_domain_challenge!.name, { txt: [['v=spf1 -all'], [value.slice(0, 20), value.slice(20)]] });
}

describe('the first to prove a domain gets it, not the first to claim it', () => {
  it("another organization's earlier claim does not block the victim; the victim verifies, the squatter's claim is released and its verification fails", async () => {
    const victim = await owner('victim');
    const squatter = await owner('squatter');
    const domain = `api.${domainOf('victimcorp')}`;
    const squat = await f.createDeployment(squatter.accessToken, squatter.organizationId, template.id, { custom_domain: domain });
    expect(squat.custom_domain_status).toBe('pending_verification');

    // The request that used to be 409: the victim can claim its own domain.
    const mine = await f.createDeployment(victim.accessToken, victim.organizationId, template.id, { custom_domain: domain.toUpperCase() });
    expect(mine).toMatchObject({ custom_domain: domain, custom_domain_status: 'pending_verification', custom_domain_verified_at: null });
    publish(mine);

    expect(await verify(squatter, squat.id)).toEqual({ status: 200, data: { verified: false, reason: 'record_not_found' } });
    expect(await verify(victim, mine.id)).toEqual({ status: 200, data: { verified: true } });
    expect(await read(victim, mine.id)).toMatchObject({ custom_domain: domain, custom_domain_status: 'verified', custom_domain_verified_at: h.clock.now().toISOString() });
    expect(await read(squatter, squat.id)).toMatchObject({ custom_domain: null, custom_domain_status: 'lapsed', custom_domain_challenge: null });

    const released = (await f.auditRows(squat.id)).find((r) => r.action === 'custom_domain_released');
    // Written in the squatter's organization by `system`: the victim is not named there.
    expect(released).toMatchObject({ actor: 'system', organization_id: squatter.organizationId, metadata: { custom_domain: domain, reason: 'verified_by_another_deployment' } });
    const verified = (await f.auditRows(mine.id)).find((r) => r.action === 'custom_domain_verified');
    expect(verified).toMatchObject({ organization_id: victim.organizationId, metadata: { custom_domain: domain } });

    // Now it is the victim's: claiming it elsewhere is 409, and verifying again is a no-op.
    const again = { template_id: template.id, name: 'x', subdomain: slugOf('again'), custom_domain: domain };
    expectEnvelopeError(await f.postDeployment(squatter.accessToken, squatter.organizationId, again), 409, 'CONFLICT');
    const put = await h.request({ method: 'PUT', url: one(squatter, squat.id), headers: bearer(squatter.accessToken), payload: { custom_domain: domain } });
    expectEnvelopeError(put, 409, 'CONFLICT');
    expect(await read(squatter, squat.id)).toMatchObject({ custom_domain: null, custom_domain_status: 'lapsed' });
    expect(await verify(victim, mine.id)).toEqual({ status: 200, data: { verified: true } });
  });

  it('a claim made while the tier had custom domains is not verified once it has lost them (403), its record published or not', async () => {
    const o = await owner('downgraded');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domainOf('downgraded') });
    publish(d);
    const off = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${o.deploymentId}/flags`,
      headers: { 'x-admin-key': h.config.adminApiKey },
      payload: { custom_domain: false },
    });
    expect(off.statusCode, off.body).toBe(200);
    expectEnvelopeError(await f.verifyDomain(bearer(o.accessToken), o.organizationId, d.id), 403, 'FEATURE_NOT_AVAILABLE');
    expect(await read(o, d.id)).toMatchObject({ custom_domain_status: 'pending_verification', custom_domain_verified_at: null });
  });

  it('a suspended primary deployment has the flag off: no claim and no verification while suspended', async () => {
    const o = await owner('suspended');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domainOf('suspended') });
    publish(d);
    const suspend = (status: string) =>
      h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${o.deploymentId}`, headers: { 'x-admin-key': h.config.adminApiKey }, payload: { status } });
    expect((await suspend('suspended')).statusCode).toBe(200);
    expectEnvelopeError(await f.verifyDomain(bearer(o.accessToken), o.organizationId, d.id), 403, 'FEATURE_NOT_AVAILABLE');
    const claim = await f.postDeployment(o.accessToken, o.organizationId, {
      template_id: template.id,
      name: 'x',
      subdomain: slugOf('suspended-claim'),
      custom_domain: domainOf('suspended-claim'),
    });
    expectEnvelopeError(claim, 403, 'FEATURE_NOT_AVAILABLE');
    expect(await read(o, d.id)).toMatchObject({ custom_domain_status: 'pending_verification' });
    // Active again: the claim verifies.
    expect((await suspend('active')).statusCode).toBe(200);
    expect(await verify(o, d.id)).toEqual({ status: 200, data: { verified: true } });
  });

  it('a DNS server that stays silent is dns_timeout, SERVFAIL is dns_error, and neither verifies; no domain to verify is 409', async () => {
    const o = await owner('dns-fail');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domainOf('flaky') });
    dns.set(d.custom_domain_challenge!.name, 'silent');
    expect(await verify(o, d.id)).toEqual({ status: 200, data: { verified: false, reason: 'dns_timeout' } });
    dns.set(d.custom_domain_challenge!.name, 'servfail');
    expect(await verify(o, d.id)).toEqual({ status: 200, data: { verified: false, reason: 'dns_error' } });
    dns.set(d.custom_domain_challenge!.name, { txt: [[`${d.custom_domain_challenge!.value}x`]] });
    expect(await verify(o, d.id)).toEqual({ status: 200, data: { verified: false, reason: 'record_not_found' } });
    expect((await read(o, d.id)).custom_domain_status).toBe('pending_verification');
    const plain = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    expectEnvelopeError(await f.verifyDomain(bearer(o.accessToken), o.organizationId, plain.id), 409, 'CONFLICT');
  });

  it('verify-domain: 10 per hour per template deployment, then 429 with Retry-After; another deployment has its own allowance', async () => {
    const o = await owner('verify-limit');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domainOf('limited') });
    for (let i = 0; i < 10; i++) expect((await verify(o, d.id)).data).toEqual({ verified: false, reason: 'record_not_found' });
    const refused = await f.verifyDomain(bearer(o.accessToken), o.organizationId, d.id);
    expectEnvelopeError(refused, 429, 'RATE_LIMITED');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    const other = await f.createDeployment(o.accessToken, o.organizationId, template.id, { custom_domain: domainOf('other') });
    expect((await verify(o, other.id)).status).toBe(200);
    // An API key: the access token expires within the hour.
    const key = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write'] });
    h.clock.advance(60 * 60_000 + 1);
    expect((await f.verifyDomain({ 'x-api-key': key.key }, o.organizationId, d.id)).statusCode).toBe(200);
  });
});

describe('reserved subdomains', () => {
  it('the built-in list and TEMPLATE_RESERVED_SUBDOMAINS are 400 on subdomain at creation, and a change of subdomain is refused too', async () => {
    const o = await owner('reserved');
    for (const subdomain of ['www', 'api', 'admin', 'console', 'mail', 'root', 'shop']) {
      expectEnvelopeError(await f.postDeployment(o.accessToken, o.organizationId, { template_id: template.id, name: 'x', subdomain }), 400, 'VALIDATION_ERROR', 'subdomain');
    }
    expect(await f.countDeployments(o.organizationId)).toBe(0);
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    const put = await h.request({ method: 'PUT', url: one(o, d.id), headers: bearer(o.accessToken), payload: { subdomain: 'www' } });
    expectEnvelopeError(put, 400, 'VALIDATION_ERROR', 'subdomain');
    expect((await read(o, d.id)).subdomain).toBe(d.subdomain);
  });

  it('a deployment that holds a name reserved later keeps it', async () => {
    const o = await owner('reserved-later');
    const d = await f.createDeployment(o.accessToken, o.organizationId, template.id);
    const key = await createKeyOverHttp(h, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write'] });
    const later = await createHarness({ templateReservedSubdomains: [d.subdomain] }, undefined, h.deps.db);
    try {
      const res = await later.request({ method: 'PUT', url: one(o, d.id), headers: { 'x-api-key': key.key }, payload: { name: 'Still mine' } });
      expect(res.statusCode, res.body).toBe(200);
      expect(json<Data<TemplateDeploymentView>>(res).data).toMatchObject({ subdomain: d.subdomain, name: 'Still mine' });
    } finally {
      await later.close();
    }
  });
});

describe('lapse', () => {
  it('a claim unverified 7 days after it was made lapses (domain null, audit row); a verified one stays', async () => {
    const g = templateFixtures(() => lapseH);
    const o = await signUpWithOrganization(lapseH, 'lapse');
    await g.enableCustomDomain(o.deploymentId);
    // An API key: the access token would expire as the clock moves a week.
    const key = await createKeyOverHttp(lapseH, bearer(o.accessToken), o.organizationId, { scopes: ['read', 'write'] });
    const tpl = await g.createTemplate();
    const stale = await g.createDeployment(o.accessToken, o.organizationId, tpl.id, { custom_domain: domainOf('stale') });
    const proven = await g.createDeployment(o.accessToken, o.organizationId, tpl.id, { custom_domain: domainOf('proven') });
    publish(proven);
    expect(json<Data<{ verified: boolean }>>(await g.verifyDomain(bearer(o.accessToken), o.organizationId, proven.id)).data.verified).toBe(true);
    const sweep = WORKERS.find((w) => w.name === 'custom-domain-lapse')!;
    const state = async (id: string) =>
      (await lapseH.deps.db.query<{ custom_domain: string | null; custom_domain_status: string }>('SELECT custom_domain, custom_domain_status FROM template_deployments WHERE id = $1', [id]))[0];

    lapseH.clock.advance(7 * 24 * 60 * 60_000 - 1000);
    await sweep.run(lapseH.deps);
    expect(await state(stale.id)).toEqual({ custom_domain: stale.custom_domain, custom_domain_status: 'pending_verification' });
    lapseH.clock.advance(1000);
    await sweep.run(lapseH.deps);
    expect(await state(stale.id)).toEqual({ custom_domain: null, custom_domain_status: 'lapsed' });
    expect(await state(proven.id)).toEqual({ custom_domain: proven.custom_domain, custom_domain_status: 'verified' });
    const lapsed = (await g.auditRows(stale.id)).find((r) => r.action === 'custom_domain_lapsed');
    expect(lapsed).toMatchObject({ actor: 'system', organization_id: o.organizationId, metadata: { custom_domain: stale.custom_domain } });
    // The domain is free to claim again, with a fresh challenge.
    const reclaimed = await g.createDeployment(key.key, o.organizationId, tpl.id, { custom_domain: stale.custom_domain });
    expect(reclaimed.custom_domain_challenge?.value).not.toBe(stale.custom_domain_challenge?.value);
  });
});
