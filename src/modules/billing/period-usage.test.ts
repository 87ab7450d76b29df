import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createKeyOverHttp, type Harness, json, setTierOverHttp, signUpWithOrganization } from '../../../test/harness.js';

/**
 * GET /billing/usage reads the period's counts from the hour rollups for its whole hours and from the
 * records for the part hours at its edges (docs/decisions-keys-billing.md, "Billing reads"). A period starts
 * at its anchor's second: records of the hour it starts in fall on both sides of it, and each must be
 * counted in its own period. The answer is compared with the records themselves, counted directly.
 */
let h: Harness;
// 10:20:30 UTC: the organization's period starts there, not on an hour.
const START = '2026-03-02T10:20:30.000Z';
beforeAll(async () => {
  h = await createHarness({}, START);
});
afterAll(async () => {
  await h.close();
});

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

interface Metric {
  metric: string;
  count: number;
  quantity: number;
  refunded: number;
}

describe('the usage of the period', () => {
  it('counts each record of the edge hours in its own period, and whole hours from the rollups, as the records say', async () => {
    const owner = await signUpWithOrganization(h);
    await setTierOverHttp(h, owner.deploymentId, 'growth');
    const key = await createKeyOverHttp(h, bearer(owner.accessToken), owner.organizationId, { scopes: ['read', 'write'] });
    const usageIds: string[] = [];
    const record = async (tool: string) => {
      const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(key.key), payload: { tool_name: tool } });
      const body = json<{ success: boolean; usage_id: string }>(res);
      expect(body.success, res.body).toBe(true);
      usageIds.push(body.usage_id);
    };
    const usage = async () => {
      const res = await h.request({ method: 'GET', url: `/billing/usage?organization_id=${owner.organizationId}`, headers: bearer(key.key) });
      expect(res.statusCode, res.body).toBe(200);
      return json<{ data: { period_start: string; period_end: string; metrics: Metric[] } }>(res).data;
    };
    /** The same counts, straight from the records of [start, end). */
    const direct = async (start: string, end: string) =>
      h.deps.db.query<Metric>(
        `SELECT metric, count(*)::int AS count, sum(quantity)::bigint AS quantity, sum(refunded)::bigint AS refunded
         FROM usage_records WHERE organization_id = $1 AND success AND "timestamp" >= $2 AND "timestamp" < $3
         GROUP BY metric ORDER BY metric`,
        [owner.organizationId, start, end],
      );

    // The first period: calls in its first part hour, in later whole hours, and 15 minutes before its end.
    h.clock.advance(5 * MINUTE);
    await record('search');
    h.clock.advance(3 * HOUR);
    await record('search');
    await record('summarize');
    const first = await usage();
    expect(first.period_start).toBe(START);
    h.clock.set(new Date(new Date(first.period_end).getTime() - 15 * MINUTE));
    await record('search');

    // The next period starts in the same hour: 20 minutes into it, and two hours later.
    h.clock.advance(35 * MINUTE);
    await record('search');
    await record('translate');
    h.clock.advance(2 * HOUR);
    await record('search');
    // A refund of one of them (the platform's, by the service key): refunded is counted too.
    const refund = await h.request({
      method: 'POST',
      url: `/api/v1/mcp/usage/${usageIds.at(-1)}/refund`,
      headers: { 'x-mcp-service-key': h.deps.config.mcpServiceKey },
      payload: { reason: 'period usage test' },
    });
    expect(refund.statusCode, refund.body).toBe(200);

    const second = await usage();
    expect(second.period_start).toBe(first.period_end);
    const expected = await direct(second.period_start, second.period_end);
    expect(expected.reduce((n, m) => n + m.count, 0)).toBe(3);
    expect(expected.reduce((n, m) => n + m.refunded, 0)).toBeGreaterThan(0);
    expect(second.metrics).toEqual(expected);

    // The first period, read as the records have it, differs: its last call is in the hour the second starts in.
    const before = await direct(first.period_start, first.period_end);
    expect(before.reduce((n, m) => n + m.count, 0)).toBe(4);
  });
});
