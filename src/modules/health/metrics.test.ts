import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetFixtures } from '../../../test/budget-fixtures.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { adminHeaders, bearer, createHarness, createTenant, grant, type Harness, json, serviceHeaders } from '../../../test/harness.js';
import { delta, scrape } from '../../../test/metrics.js';

/**
 * GET /metrics as a stock Prometheus reads it (docs/operations-metrics.md): the scraper's token, the
 * process metrics, the HTTP histogram by route pattern, and the product series moving by what the
 * test did. The harness's app has its own registry, but tests of this file share it: every
 * assertion is on a difference between two scrapes.
 */
const METRICS_TOKEN = 'test-metrics-token-0123456789abcdef';
let h: Harness;
beforeAll(async () => {
  h = await createHarness({ metricsToken: METRICS_TOKEN });
});
afterAll(async () => {
  await h.close();
});

const { toolFor, tenantWith } = creditFixtures(() => h);
const record = (apiKey: string, toolName: string, invocationId?: string) =>
  h.request({
    method: 'POST',
    url: '/api/v1/mcp/stdio/record-usage',
    headers: bearer(apiKey),
    payload: { tool_name: toolName, ...(invocationId ? { invocation_id: invocationId } : {}) },
  });

describe('who may scrape', () => {
  it('Bearer METRICS_TOKEN opens /metrics; a wrong token, none, or an API key is 401; X-Admin-Key still works', async () => {
    await scrape(h, bearer(METRICS_TOKEN));
    await scrape(h, adminHeaders(h));
    const t = await createTenant(h);
    for (const headers of [bearer('test-metrics-token-0123456789abcdeX'), bearer('short'), {}, bearer(t.apiKey), { 'x-admin-key': 'wrong-admin-key-0123456789' }]) {
      const res = await h.request({ method: 'GET', url: '/metrics', headers });
      expect(res.statusCode, JSON.stringify(headers)).toBe(401);
      expect(res.json()).toMatchObject({ success: false, error: { code: 'UNAUTHORIZED' } });
    }
  });

  it('the token opens nothing else', async () => {
    const res = await h.request({ method: 'GET', url: '/api/v1/admin/deployments', headers: bearer(METRICS_TOKEN) });
    expect(res.statusCode).toBe(401);
  });

  it('without METRICS_TOKEN configured only the operator key opens it', async () => {
    const other = await createHarness();
    try {
      const res = await other.request({ method: 'GET', url: '/metrics', headers: bearer(METRICS_TOKEN) });
      expect(res.statusCode).toBe(401);
      await scrape(other, adminHeaders(other));
    } finally {
      await other.close();
    }
  });
});

describe('what a scrape shows', () => {
  it('the process metrics of prom-client', async () => {
    const s = await scrape(h, bearer(METRICS_TOKEN));
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_start_time_seconds',
      'process_resident_memory_bytes',
      'nodejs_heap_size_used_bytes',
      'nodejs_eventloop_lag_p99_seconds',
      'nodejs_eventloop_lag_seconds',
      'nodejs_version_info',
      'nodejs_gc_duration_seconds',
    ]) {
      expect(s.family(name), name).toBeDefined();
    }
    expect(s.value('process_start_time_seconds')).toBeGreaterThan(0);
  });

  it('HTTP requests by route pattern, method and status: no raw id, token or path reaches a label', async () => {
    const t = await createTenant(h);
    const tool = await toolFor('task_basic');
    const invocationId = `inv-${randomUUID()}`;
    const route = { route: '/api/v1/mcp/stdio/record-usage', method: 'POST', status_code: '200' };
    const byId = { route: '/api/v1/mcp/invocations/:invocation_id', method: 'GET', status_code: '200' };
    const probe = `/no-such-path/${randomUUID()}`;
    const before = await scrape(h);
    expect((await record(t.apiKey, tool, invocationId)).statusCode).toBe(200);
    const status = await h.request({ method: 'GET', url: `/api/v1/mcp/invocations/${invocationId}`, headers: bearer(t.apiKey) });
    expect(status.statusCode).toBe(200);
    expect((await h.request({ method: 'GET', url: probe })).statusCode).toBe(404);
    const after = await scrape(h);
    const name = 'creditgate_http_request_duration_seconds';
    expect(after.histogram(name, route).count - before.histogram(name, route).count).toBe(1);
    expect(after.histogram(name, byId).count - before.histogram(name, byId).count).toBe(1);
    const unmatched = { route: 'unmatched', method: 'GET', status_code: '404' };
    expect(after.histogram(name, unmatched).count - before.histogram(name, unmatched).count).toBe(1);
    for (const secret of [invocationId, probe, t.apiKey, t.deploymentId, t.organizationId]) expect(after.text).not.toContain(secret);
  });

  it('deductions and the credits they took, by source', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const tool = await toolFor('task_advanced'); // 3 credits
    const before = await scrape(h);
    for (let i = 0; i < 4; i++) expect(json(await record(t.apiKey, tool, `inv-${randomUUID()}`))).toMatchObject({ success: true, credits_used: 3 });
    // A replay deducts nothing and is not counted again.
    const id = `inv-${randomUUID()}`;
    expect((await record(t.apiKey, tool, id)).statusCode).toBe(200);
    expect((await record(t.apiKey, tool, id)).headers['idempotent-replayed']).toBe('true');
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_deductions_total', { source: 'mcp' })).toBe(5);
    expect(delta(before, after, 'creditgate_credits_deducted_total', { source: 'mcp' })).toBe(15);
    expect(delta(before, after, 'creditgate_deduction_refusals_total')).toBe(0);
  });

  it('refusals by reason: insufficient credits, and a gate (sandbox tier)', async () => {
    const poor = await tenantWith(2);
    const sandbox = await createTenant(h, { tier: 'sandbox' });
    const tool = await toolFor('task_advanced');
    const before = await scrape(h);
    expect(json(await record(poor.apiKey, tool, `inv-${randomUUID()}`))).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect(json(await record(poor.apiKey, tool))).toMatchObject({ success: false, error: 'insufficient_credits' });
    expect(json(await record(sandbox.apiKey, tool))).toMatchObject({ success: false, error: 'sandbox_tier' });
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_deduction_refusals_total', { source: 'mcp', reason: 'insufficient_credits' })).toBe(2);
    expect(delta(before, after, 'creditgate_deduction_refusals_total', { source: 'mcp', reason: 'sandbox_tier' })).toBe(1);
    expect(delta(before, after, 'creditgate_deductions_total')).toBe(0);
    expect(delta(before, after, 'creditgate_credits_deducted_total')).toBe(0);
  });

  it('a refusal by a block budget: reason budget_exceeded; the refused call deducts nothing', async () => {
    const t = await tenantWith(100);
    const tool = await toolFor('task_advanced'); // 3 credits
    await budgetFixtures(() => h).addBudget({ organizationId: t.organizationId, scope: 'organization', limitCredits: 3, window: 'day' });
    const before = await scrape(h);
    expect(json(await record(t.apiKey, tool))).toMatchObject({ success: true, credits_used: 3 });
    expect(json(await record(t.apiKey, tool))).toMatchObject({ success: false, error: 'budget_exceeded' });
    const after = await scrape(h);
    expect(delta(before, after, 'creditgate_deduction_refusals_total', { source: 'mcp', reason: 'budget_exceeded' })).toBe(1);
    expect(delta(before, after, 'creditgate_deductions_total', { source: 'mcp' })).toBe(1);
    expect(delta(before, after, 'creditgate_credits_deducted_total', { source: 'mcp' })).toBe(3);
  });

  it('group-commit batch sizes, waits and durations', async () => {
    const t = await createTenant(h);
    const tool = await toolFor('task_basic');
    const name = 'creditgate_deduction_batch_size';
    const first = await scrape(h);
    const before = first.histogram(name);
    // Sent together: however they are grouped, every request is in exactly one committed batch.
    const answers = await Promise.all(Array.from({ length: 6 }, () => record(t.apiKey, tool, `inv-${randomUUID()}`)));
    for (const res of answers) expect(res.statusCode).toBe(200);
    const last = await scrape(h);
    const after = last.histogram(name);
    const batches = after.count - before.count;
    expect(batches).toBeGreaterThanOrEqual(1);
    expect(batches).toBeLessThanOrEqual(6);
    expect(after.sum - before.sum).toBe(6);
    // One wait per request, one duration per batch; a batch's transaction takes time.
    const wait = 'creditgate_deduction_batch_wait_seconds';
    expect(last.histogram(wait).count - first.histogram(wait).count).toBe(6);
    const duration = 'creditgate_deduction_batch_duration_seconds';
    expect(last.histogram(duration).count - first.histogram(duration).count).toBe(batches);
    expect(last.histogram(duration).sum - first.histogram(duration).sum).toBeGreaterThan(0);
  });

  it('batches on remembered rows: committed, and stale once another writer changed the row', async () => {
    const t = await createTenant(h);
    const tool = await toolFor('task_basic');
    const name = 'creditgate_deduction_batch_remembered_total';
    const before = await scrape(h);
    // One at a time: the first batch reads and locks the row, the second goes on what the first left.
    for (let i = 0; i < 2; i++) expect(json(await record(t.apiKey, tool, `inv-${randomUUID()}`))).toMatchObject({ success: true });
    const middle = await scrape(h);
    expect(delta(before, middle, name, { outcome: 'committed' })).toBe(1);
    // An operator's grant writes the row: the next remembered attempt is refused and the locking path records it.
    await grant(h, t.deploymentId, 5);
    expect(json(await record(t.apiKey, tool, `inv-${randomUUID()}`))).toMatchObject({ success: true });
    const after = await scrape(h);
    expect(delta(middle, after, name, { outcome: 'stale' })).toBe(1);
    expect(delta(middle, after, name, { outcome: 'committed' })).toBe(0);
  });

  it('balance reads of checks, per gathered statement', async () => {
    const tenants = await Promise.all(Array.from({ length: 3 }, () => createTenant(h)));
    const name = 'creditgate_balance_read_batch_size';
    const check = (deploymentId: string) =>
      h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers: serviceHeaders(h), payload: { deployment_id: deploymentId, tool_name: 'x' } });
    const before = (await scrape(h)).histogram(name);
    // Each check reads its deployment's balance once; the next ones answer from the copy.
    for (const t of tenants) for (let i = 0; i < 2; i++) expect(json(await check(t.deploymentId))).toMatchObject({ allowed: true });
    const after = (await scrape(h)).histogram(name);
    expect(after.count - before.count).toBe(3);
    expect(after.sum - before.sum).toBe(3);
  });

  it('reservations held, refused and released', async () => {
    const t = await tenantWith(4);
    const tool = await toolFor('task_advanced');
    const check = (invocationId: string) =>
      h.request({ method: 'POST', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), payload: { tool_name: tool, reserve: true, invocation_id: invocationId } });
    const before = await scrape(h);
    const held = `inv-${randomUUID()}`;
    expect(json(await check(held))).toMatchObject({ allowed: true });
    expect(json(await check(`inv-${randomUUID()}`))).toMatchObject({ allowed: false, reason: 'insufficient_credits' });
    const released = await h.request({ method: 'POST', url: `/api/v1/mcp/reservations/${held}/release`, headers: bearer(t.apiKey), payload: {} });
    expect(json(released)).toMatchObject({ status: 'released', released_credits: 3 });
    const after = await scrape(h);
    for (const [outcome, n] of [['held', 1], ['refused', 1], ['released', 1]] as const) {
      expect(delta(before, after, 'creditgate_reservations_total', { outcome }), outcome).toBe(n);
    }
  });
});
