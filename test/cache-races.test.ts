import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../src/db/client.js';
import { revokeApiKey } from '../src/modules/api-keys/service.js';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, serviceHeaders, signUpAsMember, testDatabase, unique } from './harness.js';

/**
 * A read that races an invalidation (docs/metering.md, Caches): the resolve, terms and cost caches
 * load through TtlCache.load, whose generation guard keeps a read that began before an operator's
 * change (and so saw the old row) from being stored after the change's invalidation cleared the cache,
 * to be served until the TTL (resolve 5 min, terms 30 s, costs 60 s).
 *
 * The race is made deterministic by parking one named statement's result: the statement runs (reads
 * the old state), the change commits and publishes its invalidation, then the parked read returns.
 * On PostgreSQL the same interleaving happens whenever the read's snapshot predates the change's
 * COMMIT and its answer arrives after the bus message.
 */

let h: Harness;
const parked = new Map<string, { reached: () => void; release: Promise<void> }>();

/** The next statement named `name` reads the database, then waits for release() before returning its rows. */
function park(name: string): { reached: Promise<void>; release: () => void } {
  let reached!: () => void;
  let release!: () => void;
  const reachedP = new Promise<void>((r) => (reached = r));
  const releaseP = new Promise<void>((r) => (release = r));
  parked.set(name, { reached, release: releaseP });
  return { reached: reachedP, release };
}

beforeAll(async () => {
  const db = await testDatabase();
  const proxy = new Proxy(db, {
    get(target, prop) {
      if (prop === 'query') {
        return async (text: string, params?: readonly unknown[], name?: string) => {
          const rows = await target.query(text, params, name);
          const p = name !== undefined ? parked.get(name) : undefined;
          if (p) {
            parked.delete(name!);
            p.reached();
            await p.release;
          }
          return rows;
        };
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  }) as Database;
  h = await createHarness({}, undefined, proxy);
});
afterAll(async () => {
  await h?.close();
});

const resolve = (userId: string) =>
  h.request({ method: 'GET', url: `/api/v1/mcp/resolve-deployment?user_id=${userId}`, headers: serviceHeaders(h) });

describe('reads racing an invalidation (plain get/set caches)', () => {
  it('resolve-deployment: a member removed while a resolve read is in flight is not resolved to the old organization afterwards', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const member = await signUpAsMember(h, t.organizationId, 'member');
    const gate = park('resolve_deployment');
    const inFlight = resolve(member.userId);
    await gate.reached;
    // The member leaves (or is removed) meanwhile: committed, resolve-cache published.
    const left = await h.request({
      method: 'DELETE',
      url: `/organizations/${t.organizationId}/users/${member.userId}`,
      headers: bearer(member.accessToken),
    });
    expect(left.statusCode, left.body).toBe(200);
    gate.release();
    // The racing answer itself may carry what it read (it began before the removal).
    expect((await inFlight).statusCode).toBe(200);
    // Every later answer must not: docs/metering.md "Caches": a membership change drops the cache on every instance.
    const after = json(await resolve(member.userId));
    expect(after.deployment_id, 'a removed member still resolves to the organization it left').toBeNull();
    expect(after.error).toBe('no_deployment_found');
  });

  it('resolve-deployment: a deployment suspended while a resolve read is in flight is not resolved afterwards', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const gate = park('resolve_deployment');
    const inFlight = resolve(t.userId);
    await gate.reached;
    const suspended = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}`,
      headers: adminHeaders(h),
      payload: { status: 'suspended' },
    });
    expect(suspended.statusCode, suspended.body).toBe(200);
    gate.release();
    await inFlight;
    const after = json(await resolve(t.userId));
    expect(after.deployment_id, 'a suspended deployment is still resolved').toBeNull();
  });

  it('rate-limit terms: an api_rate_limit lowered while a service call reads the terms applies to the next call', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const check = () =>
      h.request({
        method: 'POST',
        url: '/api/v1/mcp/check-entitlement',
        headers: serviceHeaders(h),
        payload: { deployment_id: t.deploymentId, tool_name: 'x' },
      });
    const gate = park('rate_limit_terms');
    const inFlight = check();
    await gate.reached;
    const lowered = await h.request({
      method: 'PUT',
      url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`,
      headers: adminHeaders(h),
      payload: { api_rate_limit: 3 },
    });
    expect(lowered.statusCode, lowered.body).toBe(200);
    gate.release();
    await inFlight;
    // docs/limits.md: "changes of tier or overrides drop the terms on every instance at once".
    const next = await check();
    expect(next.headers['x-ratelimit-limit'], 'the lowered rate limit is not applied').toBe('3');
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await check()).statusCode);
    expect(statuses, 'more than 3 service calls a minute after lowering the limit to 3').toContain(429);
  });

  it('cost table: a price raised while a cost-table read is in flight is charged on the next record', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const action = `race_${Date.now().toString(36)}`;
    const tool = `${action}_tool`;
    expect((await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 1 } })).statusCode).toBe(200);
    expect((await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${tool}`, headers: adminHeaders(h), payload: { action } })).statusCode).toBe(200);
    const gate = park('cost_table');
    const inFlight = h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: tool } });
    await gate.reached;
    const raised = await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 40 } });
    expect(raised.statusCode, raised.body).toBe(200);
    gate.release();
    await inFlight;
    // docs/metering.md "Caches": the cost table is dropped on every instance when an operator changes it.
    const recorded = json(
      await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: tool } }),
    );
    expect(recorded.success).toBe(true);
    expect(recorded.credits_used, 'the tenant is charged the old (lower) price after the operator raised it').toBe(40);
  });

  it('control: an API key revoked while its principal read is in flight is refused afterwards (TtlCache.load guard)', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const [key] = await h.deps.db.query<{ id: string }>('SELECT id FROM api_keys WHERE organization_id = $1', [t.organizationId]);
    const check = () => h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: 'x' } });
    const gate = park('api_key_principal');
    const inFlight = check();
    await gate.reached;
    await revokeApiKey(h.ctx, t.organizationId, key!.id);
    gate.release();
    await inFlight;
    expect((await check()).statusCode).toBe(401);
  });

  it('control: a deployment suspended while its row is read is refused afterwards (TtlCache.load guard)', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const check = () =>
      h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x' } });
    const gate = park('deployment_state');
    const inFlight = check();
    await gate.reached;
    const suspended = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}`, headers: adminHeaders(h), payload: { status: 'suspended' } });
    expect(suspended.statusCode).toBe(200);
    gate.release();
    await inFlight;
    expect(json(await check()).allowed).toBe(false);
  });
});

describe('controls: the same changes without a racing read are seen at once', () => {
  it('resolve-deployment forgets a removed member', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const member = await signUpAsMember(h, t.organizationId, 'member');
    expect(json(await resolve(member.userId)).deployment_id).toBe(t.deploymentId);
    const left = await h.request({ method: 'DELETE', url: `/organizations/${t.organizationId}/users/${member.userId}`, headers: bearer(member.accessToken) });
    expect(left.statusCode).toBe(200);
    expect(json(await resolve(member.userId)).deployment_id).toBeNull();
  });

  it('a raised price is charged at once', async () => {
    const t = await createTenant(h, { tier: 'growth' });
    const action = `ctl_${unique('a').replace(/[^a-z0-9]/gi, '_').toLowerCase()}`.slice(0, 60);
    const tool = `${action}_tool`;
    await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 1 } });
    await h.request({ method: 'PUT', url: `/api/v1/admin/tool-actions/${tool}`, headers: adminHeaders(h), payload: { action } });
    await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: tool } });
    await h.request({ method: 'PUT', url: `/api/v1/admin/credit-costs/${action}`, headers: adminHeaders(h), payload: { credits: 40 } });
    const recorded = json(await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: tool } }));
    expect(recorded.credits_used).toBe(40);
  });
});
