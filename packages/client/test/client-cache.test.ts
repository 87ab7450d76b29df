import { type CacheOptions, type ClientOptions, type Credentials, createClient } from '@creditgate/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createTenant, grant, setTier, type Tenant, unique } from '../../../test/harness.js';
import { type LiveService, startLiveService } from './support.js';

/**
 * The client's caches against a real creditgate, with a clock the test moves. Requests are counted by
 * wrapping `fetch`; every answer still comes from the service.
 */
let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live.close();
});

const SECOND = 1_000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

interface Rig {
  c: ReturnType<typeof createClient>;
  /** Requests sent to a path (pathname, no query). */
  count(path: string): number;
  urls: URL[];
  advance(ms: number): void;
}

const PATHS = {
  stdioCheck: '/api/v1/mcp/stdio/check-entitlement',
  serviceCheck: '/api/v1/mcp/check-entitlement',
  costs: '/api/v1/mcp/credit-costs',
  resolve: '/api/v1/mcp/resolve-deployment',
  snapshot: '/api/v1/entitlements/check',
} as const;

function rig(credentials: Credentials, cache?: CacheOptions | false, options: Partial<ClientOptions> = {}): Rig {
  const clock = { ms: Date.parse('2026-01-15T12:00:00.000Z') };
  const urls: URL[] = [];
  const counting: typeof fetch = (input, init) => {
    urls.push(new URL(input instanceof Request ? input.url : String(input)));
    return fetch(input, init);
  };
  const c = createClient(credentials, { baseUrl: live.baseUrl, retries: 0, fetch: counting, now: () => clock.ms, cache, ...options });
  return {
    c,
    urls,
    count: (path) => urls.filter((u) => u.pathname === path).length,
    advance: (ms) => {
      clock.ms += ms;
    },
  };
}
const stdioRig = (t: Tenant, cache?: CacheOptions | false) => rig({ apiKey: t.apiKey }, cache);
const serviceRig = (cache?: CacheOptions | false) => rig({ serviceKey: live.h.config.mcpServiceKey }, cache);
const deploymentRig = (t: Tenant, cache?: CacheOptions | false) => rig({ deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret }, cache);

async function admin(url: string, payload: Record<string, unknown>): Promise<void> {
  const res = await live.h.request({ method: 'PUT', url, headers: adminHeaders(live.h), payload });
  expect(res.statusCode, res.body).toBe(200);
}
const setMonthly = (t: Tenant, credits: number) => admin(`/api/v1/admin/deployments/${t.deploymentId}/overrides`, { monthly_credits: credits });
async function toolFor(action: string): Promise<string> {
  const tool = unique(`tool-${action}`);
  await admin(`/api/v1/admin/tool-actions/${tool}`, { action });
  return tool;
}

describe('check-entitlement answers', () => {
  it('are reused up to 5 minutes, then asked again (stdio and service mode)', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const s = stdioRig(t);
    const v = serviceRig();
    const ask = () =>
      Promise.all([s.c.stdio.checkEntitlement({ tool_name: 'search' }), v.c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: 'search' })]);
    expect((await ask()).map((a) => a.allowed)).toEqual([true, true]);
    await ask();
    s.advance(5 * MINUTE - 1);
    v.advance(5 * MINUTE - 1);
    await ask();
    expect([s.count(PATHS.stdioCheck), v.count(PATHS.serviceCheck)]).toEqual([1, 1]);
    s.advance(1);
    v.advance(1);
    await ask();
    expect([s.count(PATHS.stdioCheck), v.count(PATHS.serviceCheck)]).toEqual([2, 2]);
    // Per tool: another tool is its own entry.
    await s.c.stdio.checkEntitlement({ tool_name: 'other' });
    expect(s.count(PATHS.stdioCheck)).toBe(3);
  });

  it('forceRefresh asks the service and sees a change at once', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const s = stdioRig(t);
    expect((await s.c.stdio.checkEntitlement({ tool_name: 'search' })).allowed).toBe(true);
    await setTier(live.h, t.deploymentId, 'sandbox');
    expect((await s.c.stdio.checkEntitlement({ tool_name: 'search' })).allowed).toBe(true);
    expect(await s.c.stdio.checkEntitlement({ tool_name: 'search' }, { forceRefresh: true })).toMatchObject({ allowed: false, reason: 'sandbox_tier' });
    expect(s.count(PATHS.stdioCheck)).toBe(2);
  });

  it('a reservation check is never served from, nor stored in, the cache', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const s = stdioRig(t);
    await s.c.stdio.checkEntitlement({ tool_name: 'search' });
    const one = await s.c.stdio.checkEntitlement({ tool_name: 'search', reserve: true });
    const two = await s.c.stdio.checkEntitlement({ tool_name: 'search', reserve: true });
    expect(one.invocation_id).not.toBe(two.invocation_id);
    expect(s.count(PATHS.stdioCheck)).toBe(3);
    expect(await s.c.getInvocation(two.invocation_id!)).toMatchObject({ status: 'reserved', reserved_credits: 1 });
    // The plain entry is the one from before the reservations.
    await s.c.stdio.checkEntitlement({ tool_name: 'search' });
    expect(s.count(PATHS.stdioCheck)).toBe(3);
  });

  it('an insufficient_credits denial is never cached: after a grant the next check is allowed without forceRefresh', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    await setMonthly(t, 0);
    const s = stdioRig(t);
    const v = serviceRig();
    const stdio = () => s.c.stdio.checkEntitlement({ tool_name: 'search' });
    const service = () => v.c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: 'search' });
    expect(await stdio()).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(await service()).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    await grant(live.h, t.deploymentId, 5);
    expect(await stdio()).toMatchObject({ allowed: true, credit_cost: 1 });
    expect(await service()).toMatchObject({ allowed: true, credits_available: 5 });
    expect([s.count(PATHS.stdioCheck), v.count(PATHS.serviceCheck)]).toEqual([2, 2]);
  });

  it('a cached allowed is not reused once recordUsage reports a balance below its cost (service mode)', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    await setMonthly(t, 5);
    const advanced = await toolFor('task_advanced');
    const v = serviceRig();
    const check = () => v.c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: advanced });
    expect(await check()).toMatchObject({ allowed: true, credit_cost: 3, credits_available: 5 });
    expect(await v.c.service.recordUsage({ deployment_id: t.deploymentId, tool_name: 'search' })).toMatchObject({ credits_remaining: 4 });
    await check(); // 4 still covers 3: cached
    expect(v.count(PATHS.serviceCheck)).toBe(1);
    expect(await v.c.service.recordUsage({ deployment_id: t.deploymentId, tool_name: advanced })).toMatchObject({ credits_remaining: 1 });
    expect(await check()).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    expect(v.count(PATHS.serviceCheck)).toBe(2);
  });

  it('the same in stdio mode', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    await setMonthly(t, 4);
    const advanced = await toolFor('task_advanced');
    const s = stdioRig(t);
    const check = () => s.c.stdio.checkEntitlement({ tool_name: advanced });
    expect(await check()).toMatchObject({ allowed: true, credit_cost: 3 });
    expect(await s.c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ credits_remaining: 3 });
    await check();
    expect(s.count(PATHS.stdioCheck)).toBe(1);
    expect(await s.c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ credits_remaining: 2 });
    expect(await check()).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    await grant(live.h, t.deploymentId, 10);
    expect(await check()).toMatchObject({ allowed: true });
    expect(s.count(PATHS.stdioCheck)).toBe(3);
  });

  // For you to decide (see report): in stdio mode an allowed answer carries no balance, so the low
  // balance a record reported stays "last known" and every later allowed answer is asked again.
  it('stdio mode: once credits are back, the allowed answer is cached again', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    await setMonthly(t, 1);
    const s = stdioRig(t);
    expect(await s.c.stdio.recordUsage({ tool_name: 'search' })).toMatchObject({ credits_remaining: 0 });
    await grant(live.h, t.deploymentId, 10);
    expect(await s.c.stdio.checkEntitlement({ tool_name: 'search' })).toMatchObject({ allowed: true });
    await s.c.stdio.checkEntitlement({ tool_name: 'search' });
    expect(s.count(PATHS.stdioCheck)).toBe(1);
  });
});

describe('credit costs, resolve, entitlement snapshot', () => {
  it('credit costs are cached 1 hour; forceRefresh asks', async () => {
    const v = serviceRig();
    // At least the ten default actions (other files of this worker may add actions to the shared database).
    expect((await v.c.service.creditCosts()).costs.length).toBeGreaterThanOrEqual(10);
    v.advance(HOUR - 1);
    await v.c.service.creditCosts();
    expect(v.count(PATHS.costs)).toBe(1);
    await v.c.service.creditCosts({ forceRefresh: true });
    expect(v.count(PATHS.costs)).toBe(2);
    v.advance(HOUR);
    await v.c.service.creditCosts();
    expect(v.count(PATHS.costs)).toBe(3);
  });

  it('resolve is cached 5 minutes per user, only when a deployment was found', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const v = serviceRig();
    const nobody = unique('nobody');
    for (let i = 0; i < 3; i++) expect((await v.c.service.resolveDeployment(nobody)).error).toBe('no_deployment_found');
    expect(v.count(PATHS.resolve)).toBe(3);
    for (let i = 0; i < 3; i++) expect((await v.c.service.resolveDeployment(t.userId)).deployment_id).toBe(t.deploymentId);
    expect(v.count(PATHS.resolve)).toBe(4);
    v.advance(5 * MINUTE);
    await v.c.service.resolveDeployment(t.userId);
    expect(v.count(PATHS.resolve)).toBe(5);
    await v.c.service.resolveDeployment(t.userId, { forceRefresh: true });
    expect(v.count(PATHS.resolve)).toBe(6);
  });

  it('the snapshot is cached next_check_seconds; forceRefresh sends force=true and sees a tier change at once', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const d = deploymentRig(t);
    const first = await d.c.entitlements.check();
    expect(first).toMatchObject({ tier: 'launch', next_check_seconds: 300 });
    await setTier(live.h, t.deploymentId, 'growth');
    d.advance(300 * SECOND - 1);
    expect((await d.c.entitlements.check()).tier).toBe('launch');
    expect(d.count(PATHS.snapshot)).toBe(1);
    expect(d.urls[0]!.searchParams.has('force')).toBe(false);
    expect(await d.c.entitlements.check({ forceRefresh: true })).toMatchObject({ tier: 'growth', features: { white_label: true } });
    expect(d.urls[1]!.searchParams.get('force')).toBe('true');
    // The forced answer is the new cached one.
    expect((await d.c.entitlements.check()).tier).toBe('growth');
    expect(d.count(PATHS.snapshot)).toBe(2);
    d.advance(300 * SECOND);
    await d.c.entitlements.check();
    expect(d.count(PATHS.snapshot)).toBe(3);
  });
});

describe('cache options', () => {
  it('cache: false asks the service every time (checks, costs, resolve)', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const s = stdioRig(t, false);
    const v = serviceRig(false);
    for (let i = 0; i < 2; i++) {
      await s.c.stdio.checkEntitlement({ tool_name: 'search' });
      await v.c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: 'search' });
      await v.c.service.creditCosts();
      await v.c.service.resolveDeployment(t.userId);
    }
    expect([s.count(PATHS.stdioCheck), v.count(PATHS.serviceCheck), v.count(PATHS.costs), v.count(PATHS.resolve)]).toEqual([2, 2, 2, 2]);
  });

  // Bug (see report): the snapshot is cached for next_check_seconds even with `cache: false`.
  it('cache: false asks the service for every entitlement snapshot too', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const d = deploymentRig(t, false);
    await d.c.entitlements.check();
    await setTier(live.h, t.deploymentId, 'growth');
    expect((await d.c.entitlements.check()).tier).toBe('growth');
    expect(d.count(PATHS.snapshot)).toBe(2);
  });

  it('TTLs above the caps of docs/client.md are capped; shorter ones are honoured', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const long = serviceRig({ entitlementsMs: HOUR, creditCostsMs: 24 * HOUR, resolveMs: HOUR });
    const calls = (c: Rig['c']) =>
      Promise.all([
        c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: 'search' }),
        c.service.creditCosts(),
        c.service.resolveDeployment(t.userId),
      ]);
    const counts = (r: Rig) => [r.count(PATHS.serviceCheck), r.count(PATHS.costs), r.count(PATHS.resolve)];
    await calls(long.c);
    long.advance(5 * MINUTE);
    await calls(long.c);
    expect(counts(long)).toEqual([2, 1, 2]);
    long.advance(HOUR - 5 * MINUTE);
    await calls(long.c);
    expect(counts(long)).toEqual([3, 2, 3]);

    const short = serviceRig({ entitlementsMs: 10 * SECOND, creditCostsMs: 10 * SECOND, resolveMs: 10 * SECOND });
    await calls(short.c);
    short.advance(10 * SECOND - 1);
    await calls(short.c);
    expect(counts(short)).toEqual([1, 1, 1]);
    short.advance(1);
    await calls(short.c);
    expect(counts(short)).toEqual([2, 2, 2]);
  });

  it('clearCache drops every cached answer', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const r = rig({ serviceKey: live.h.config.mcpServiceKey, deploymentId: t.deploymentId, deploymentSecret: t.deploymentSecret });
    const all = async () => {
      await r.c.service.checkEntitlement({ deployment_id: t.deploymentId, tool_name: 'search' });
      await r.c.service.creditCosts();
      await r.c.service.resolveDeployment(t.userId);
      await r.c.entitlements.check();
    };
    await all();
    await all();
    expect(r.urls).toHaveLength(4);
    r.c.clearCache();
    await all();
    expect(r.urls).toHaveLength(8);
  });
});

describe('concurrent first reads', () => {
  it('share one request: 16 checks of one tool, 16 resolves of one user, 16 cost lookups', async () => {
    const t = await createTenant(live.h, { tier: 'launch' });
    const stdio = stdioRig(t);
    const checks = await Promise.all(Array.from({ length: 16 }, () => stdio.c.stdio.checkEntitlement({ tool_name: 'search' })));
    expect(checks.every((c) => c.allowed)).toBe(true);
    expect(stdio.count(PATHS.stdioCheck)).toBe(1);

    const service = serviceRig();
    const resolved = await Promise.all(Array.from({ length: 16 }, () => service.c.service.resolveDeployment(t.userId)));
    expect(new Set(resolved.map((r) => r.deployment_id))).toEqual(new Set([t.deploymentId]));
    expect(service.count(PATHS.resolve)).toBe(1);
    await Promise.all(Array.from({ length: 16 }, () => service.c.service.creditCosts()));
    expect(service.count(PATHS.costs)).toBe(1);

    // Reservations are writes: each goes out.
    await Promise.all(Array.from({ length: 4 }, () => stdio.c.stdio.checkEntitlement({ tool_name: 'search', reserve: true })));
    expect(stdio.count(PATHS.stdioCheck)).toBe(5);
  });
});
