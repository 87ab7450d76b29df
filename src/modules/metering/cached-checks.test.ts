import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, mistyped, serviceHeaders, testDatabase, watchStatements } from '../../../test/harness.js';
import { buildApp } from '../../app.js';
import { testConfig } from '../../config.js';
import { generateApiKey } from '../../lib/secrets.js';
import { createApiKey } from '../api-keys/service.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/**
 * Checks without a round trip (docs/adr/0005-cached-checks.md): principals and terms
 * come from the instance's cache, the balance a check reads may be up to BALANCE_CACHE_MS old and is
 * written through by this instance's deductions, and a check never refuses on a cached balance.
 */
let h: Harness;
/** A second instance on the same database and clock with its own in-process bus: it hears none of h's messages. */
let other: FastifyInstance;

beforeAll(async () => {
  h = await createHarness();
  other = await buildApp({ config: testConfig(), db: await testDatabase(), clock: h.clock });
  await other.ready();
});
afterAll(async () => {
  await Promise.all([other.close(), h.close()]);
});

const stdioCheck = (app: FastifyInstance, apiKey: string) =>
  app.inject({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(apiKey), payload: { tool_name: 'x' } });
const stdioRecord = (app: FastifyInstance, apiKey: string) =>
  app.inject({
    method: 'POST',
    url: '/api/v1/mcp/stdio/record-usage',
    headers: bearer(apiKey),
    payload: { tool_name: 'x', invocation_id: randomUUID() },
  });
async function available(app: FastifyInstance, deploymentId: string): Promise<{ allowed: boolean; credits_available: number }> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/v1/mcp/check-entitlement',
    headers: serviceHeaders(h),
    payload: { deployment_id: deploymentId, tool_name: 'x' },
  });
  expect(res.statusCode, res.body).toBe(200);
  return json(res);
}

async function monthlyCredits(deploymentId: string, credits: number): Promise<void> {
  const res = await h.request({
    method: 'PUT',
    url: `/api/v1/admin/deployments/${deploymentId}/overrides`,
    headers: adminHeaders(h),
    payload: { monthly_credits: credits },
  });
  expect(res.statusCode, res.body).toBe(200);
}

/** The statements that read the principal or balance tables, through the database both instances share. */
const watchReads = () => watchStatements(h.deps.db, /\bFROM\s+(api_keys|deployments|credit_balances|organizations)\b/i);

describe('cached principals and balances', () => {
  it('a repeated check reads neither the key, the deployment nor the balance', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expect(json(await stdioCheck(h.app, t.apiKey)).allowed).toBe(true);
    const reads = watchReads();
    for (let i = 0; i < 5; i++) expect(json(await stdioCheck(h.app, t.apiKey)).allowed).toBe(true);
    expect(reads.stop()).toEqual([]);
  });

  it('a mistyped key is refused without a read, every time; an unknown well-formed key is read each time, never cached', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const unknown = generateApiKey();
    const reads = watchReads();
    for (let i = 0; i < 2; i++) {
      expect((await stdioCheck(h.app, mistyped(t.apiKey))).statusCode).toBe(401);
      expect((await stdioCheck(h.app, unknown)).statusCode).toBe(401);
    }
    expect(reads.stop()).toEqual(['api_key_principal', 'api_key_principal']);
    // The real key, now cached, is still served.
    expect(json(await stdioCheck(h.app, t.apiKey)).allowed).toBe(true);
  });

  it('record-usage reads no principal: the deduction is its only statement on the balance', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expect((await stdioRecord(h.app, t.apiKey)).statusCode).toBe(200);
    const reads = watchReads();
    const res = await stdioRecord(h.app, t.apiKey);
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).credits_remaining).toBe(98);
    expect(reads.stop()).toEqual([]);
  });

  it("a check after this instance's deduction shows what the deduction left, without reading the row", async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expect((await available(h.app, t.deploymentId)).credits_available).toBe(100);
    expect((await stdioRecord(h.app, t.apiKey)).statusCode).toBe(200);
    const reads = watchReads();
    expect((await available(h.app, t.deploymentId)).credits_available).toBe(99);
    expect(reads.stop()).toEqual([]);
  });

  it("another instance's deductions show once its cached balance is older than BALANCE_CACHE_MS", async () => {
    const t = await createTenant(h, { tier: 'trial' });
    expect((await available(other, t.deploymentId)).credits_available).toBe(100);
    for (let i = 0; i < 5; i++) expect((await stdioRecord(h.app, t.apiKey)).statusCode).toBe(200);
    // Within the bound the other instance may still answer from its copy (an advisory check, docs/adr/0005-cached-checks.md)…
    expect((await available(other, t.deploymentId)).credits_available).toBe(100);
    // …and never after it.
    h.clock.advance(h.config.balanceCacheMs + 1);
    expect((await available(other, t.deploymentId)).credits_available).toBe(95);
  });

  it('a stale copy may let a check allow a call that record-usage then refuses, and never charges past the balance', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await monthlyCredits(t.deploymentId, 3);
    expect((await available(other, t.deploymentId)).credits_available).toBe(3);
    for (let i = 0; i < 3; i++) expect(json(await stdioRecord(h.app, t.apiKey)).success).toBe(true);
    expect((await available(other, t.deploymentId)).allowed).toBe(true);
    const refused = await stdioRecord(other, t.apiKey);
    expect(refused.statusCode).toBe(200);
    expect(json(refused)).toMatchObject({ success: false, credits_used: 0, error: 'insufficient_credits' });
    expect(await available(other, t.deploymentId)).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a check never refuses on a cached balance: a low copy is read again before saying no', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    await monthlyCredits(t.deploymentId, 1);
    expect(json(await stdioRecord(h.app, t.apiKey)).success).toBe(true);
    expect(await available(other, t.deploymentId)).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    // A grant whose invalidation the other instance never hears (separate buses): its low copy is still cached.
    const grant = await h.request({
      method: 'POST',
      url: `/api/v1/admin/deployments/${t.deploymentId}/credits`,
      headers: adminHeaders(h),
      payload: { amount: 7, reason: 'goodwill' },
    });
    expect(grant.statusCode, grant.body).toBe(200);
    expect(await available(other, t.deploymentId)).toMatchObject({ allowed: true, credits_available: 7 });
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });

  it('a cached key still expires on time', async () => {
    const t = await createTenant(h, { tier: 'trial' });
    const { key } = await createApiKey(h.ctx, {
      organizationId: t.organizationId,
      name: 'short-lived',
      scopes: ['read', 'write'],
      expiresAt: new Date(h.clock.now().getTime() + 10_000),
    });
    expect((await stdioCheck(h.app, key)).statusCode).toBe(200);
    h.clock.advance(10_000);
    const res = await stdioCheck(h.app, key);
    expect(res.statusCode).toBe(401);
    expect(json(res).code).toBe('UNAUTHORIZED');
  });

  it('a cached deployment still refuses a wrong secret', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const quota = (secret: string) =>
      h.request({ method: 'GET', url: '/api/v1/ai/quota', headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': secret } });
    expect((await quota(t.deploymentSecret)).statusCode).toBe(200);
    const other = await createTenant(h, { tier: 'launch' });
    const res = await quota(other.deploymentSecret);
    expect(res.statusCode).toBe(401);
    expect((await quota(t.deploymentSecret)).statusCode).toBe(200);
  });

  it('a mistyped deployment secret is refused without a read, whether the deployment is cached or not', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const quota = (secret: string) =>
      h.request({ method: 'GET', url: '/api/v1/ai/quota', headers: { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': secret } });
    h.deps.caches.deployments.clear();
    // The principal's tables only: the AI quota reads its balance after authentication.
    const watchPrincipal = () => watchStatements(h.deps.db, /\bFROM\s+(api_keys|deployments|organizations)\b/i);
    const reads = watchPrincipal();
    expect((await quota(mistyped(t.deploymentSecret))).statusCode).toBe(401);
    expect(reads.stop()).toEqual([]);
    expect((await quota(t.deploymentSecret)).statusCode).toBe(200);
    const cachedReads = watchPrincipal();
    expect((await quota(mistyped(t.deploymentSecret))).statusCode).toBe(401);
    expect((await quota(t.deploymentSecret)).statusCode).toBe(200);
    expect(cachedReads.stop()).toEqual([]);
  });
});
