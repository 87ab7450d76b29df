import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY, HOUR } from '../../clock.js';
import { creditFixtures } from '../../../test/credit-fixtures.js';
import { bearer, createHarness, createTenant, grant, type Harness, json, signUpAsMember, signUpWithOrganization } from '../../../test/harness.js';
import { type ErrorBody, usageFixtures } from '../../../test/usage-fixtures.js';
import type { BalanceHistoryView } from './balance-history.js';

/** The balance history (docs/usage-analytics.md, "Balance history") against the ledger's after-values. */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const f = usageFixtures(() => h);
const c = creditFixtures(() => h);
const historyRes = (headers: Record<string, string>, orgId: string, query = '') =>
  h.request({ method: 'GET', url: `/organizations/${orgId}/balance/history${query}`, headers });
async function history(headers: Record<string, string>, orgId: string, query = ''): Promise<BalanceHistoryView> {
  const res = await historyRes(headers, orgId, query);
  expect(res.statusCode, res.body).toBe(200);
  return json<{ data: BalanceHistoryView }>(res).data;
}

/** The balance at `at` as the ledger wrote it: the last row before it, per deployment (monthly_after + purchased_after). */
async function ledgerBalanceAt(deploymentId: string, at: Date): Promise<number> {
  const rows = await h.deps.db.query<{ b: number }>(
    `SELECT (COALESCE(monthly_after, 0) + purchased_after)::bigint AS b FROM credit_ledger
     WHERE deployment_id = $1 AND created_at < $2 ORDER BY created_at DESC, id DESC LIMIT 1`,
    [deploymentId, at],
  );
  return Number(rows[0]?.b ?? 0);
}

const iso = (t: number) => new Date(t).toISOString();

describe('balance history', () => {
  it('closing balances equal the ledger at each day end, across a grant, a refund and a period reset', async () => {
    const start = Math.floor(h.clock.now().getTime() / DAY) * DAY + DAY + HOUR;
    h.clock.set(start);
    const t = await c.tenantWith(100);
    const tool = await f.toolFor('rag_query'); // 2 credits
    const first = await f.record(t.deploymentId, tool, { at: iso(start + HOUR) });
    await f.record(t.deploymentId, tool, { at: iso(start + 2 * HOUR) });
    h.clock.set(start + DAY);
    await grant(h, t.deploymentId, 50);
    await f.record(t.deploymentId, tool, { at: iso(start + DAY + HOUR) });
    h.clock.set(start + DAY + 2 * HOUR);
    await f.refund(first.usage_id!, 2);
    for (let i = 0; i < 3; i++) await f.record(t.deploymentId, tool, { at: iso(start + 3 * DAY + i * HOUR) });
    const [period] = await h.deps.db.query<{ period_end: Date }>('SELECT period_end FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]);
    const reset = period!.period_end.getTime();
    await f.record(t.deploymentId, tool, { at: iso(reset + 2 * HOUR) }); // brings the row into the new period: the reset row is written now
    await f.record(t.deploymentId, tool, { at: iso(reset + DAY + HOUR) });
    h.clock.set(reset + DAY + 5 * HOUR);
    const from = iso(start - DAY);
    const to = iso(reset + 2 * DAY);
    const view = await history({ 'x-api-key': t.apiKey }, t.organizationId, `?from=${from}&to=${to}`);

    expect(view.days.length).toBe(Math.floor((reset + 2 * DAY - 1) / DAY) - Math.floor((start - DAY) / DAY) + 1);
    const now = h.clock.now().getTime();
    const kinds = new Set<string>();
    for (const day of view.days) {
      const end = new Date(Math.min(new Date(day.day).getTime() + DAY, now));
      const expected = await ledgerBalanceAt(t.deploymentId, end);
      expect(day.balance, day.day).toBe(expected);
      expect(day.deployments).toEqual([{ deployment_id: t.deploymentId, balance: expected }]);
      const [spent] = await h.deps.db.query<{ s: number }>(
        `SELECT COALESCE(sum(quantity), 0)::bigint AS s FROM usage_records WHERE deployment_id = $1 AND success AND "timestamp" >= $2 AND "timestamp" < $3`,
        [t.deploymentId, new Date(day.day), new Date(new Date(day.day).getTime() + DAY)],
      );
      expect(day.spent, day.day).toBe(Number(spent!.s));
      if (day.refunded) kinds.add('refund');
    }
    expect(kinds).toEqual(new Set(['refund']));
    // The reset shows on the day of the first sync after the period's end: the monthly bucket back to 100.
    const resetDay = view.days.find((d) => new Date(d.day).getTime() === Math.floor(reset / DAY) * DAY)!;
    expect(resetDay.balance).toBe(100 - 2 + 50 - 0); // fresh 100, one call of 2, purchased 50 untouched
    expect(view.balance).toBe(view.days.at(-1)!.balance);
    const last7 = view.days.slice(-7);
    const burn = last7.reduce((s, d) => s + d.spent - d.refunded, 0) / 7;
    expect(view.burn_rate).toBeCloseTo(burn, 2);
    expect(view.burn_rate).toBeCloseTo(4 / 7, 2);
    expect(view.runs_out_at).toBe(new Date(now + (view.balance! / view.burn_rate) * DAY).toISOString());
    await c.expectLedgerConsistent(t);
  });

  it('a range in the past: what came after it (calls, a grant, a refund) is summed once, and each day still equals the ledger', async () => {
    const start = Math.floor(h.clock.now().getTime() / DAY) * DAY + 80 * DAY + 3 * HOUR;
    h.clock.set(start);
    const t = await c.tenantWith(0, 500);
    const tool = await f.toolFor('rag_query'); // 2 credits
    const early = await f.record(t.deploymentId, tool, { at: iso(start + HOUR) });
    await f.record(t.deploymentId, tool, { at: iso(start + DAY + HOUR) });
    // After the range asked below: calls on many later days, a grant and a refund of a call made in it.
    for (let d = 5; d < 25; d++) await f.record(t.deploymentId, tool, { at: iso(start + d * DAY) });
    h.clock.set(start + 30 * DAY);
    await grant(h, t.deploymentId, 40);
    await f.refund(early.usage_id!, 2);
    h.clock.set(start + 31 * DAY);
    const view = await history({ 'x-api-key': t.apiKey }, t.organizationId, `?from=${iso(start - DAY)}&to=${iso(start + 3 * DAY)}`);
    expect(view.days).toHaveLength(5);
    for (const day of view.days) {
      const expected = await ledgerBalanceAt(t.deploymentId, new Date(new Date(day.day).getTime() + DAY));
      expect(day.balance, day.day).toBe(expected);
    }
    expect(view.days.map((d) => d.spent)).toEqual([0, 2, 2, 0, 0]);
    // The refund is counted on its own day, which is not in the range.
    expect(view.days.every((d) => d.refunded === 0)).toBe(true);
    expect(view.balance).toBe(500 - 2 * 22 + 40 + 2);
  });

  it('no spending in the last 7 days: burn rate 0 and no runs_out_at; tz moves day boundaries', async () => {
    const day = Math.floor(h.clock.now().getTime() / DAY) * DAY + 40 * DAY;
    h.clock.set(day + 2 * HOUR); // 02:00 UTC: the previous day in New York
    const t = await c.tenantWith(100);
    const tool = await f.toolFor('rag_query');
    await f.record(t.deploymentId, tool);
    h.clock.set(day + 20 * DAY);
    const range = `?from=${iso(day - 2 * DAY)}&to=${iso(day + 2 * DAY)}`;
    const utc = await history({ 'x-api-key': t.apiKey }, t.organizationId, range);
    expect(utc.days.find((d) => d.spent > 0)!.day).toBe(iso(day));
    expect(utc.burn_rate).toBeCloseTo(2 / 4, 2);
    const ny = await history({ 'x-api-key': t.apiKey }, t.organizationId, `${range}&tz=America/New_York`);
    const spentDay = ny.days.find((d) => d.spent > 0)!;
    expect(new Date(spentDay.day).getTime()).toBeLessThan(day);
    expect([4, 5]).toContain(new Date(spentDay.day).getUTCHours());
    const quiet = await history({ 'x-api-key': t.apiKey }, t.organizationId, `?from=${iso(day + 10 * DAY)}&to=${iso(day + 19 * DAY)}`);
    expect(quiet.burn_rate).toBe(0);
    expect(quiet.runs_out_at).toBeNull();
    expect(quiet.days.every((d) => d.balance === 98)).toBe(true);
  });

  it('rights: the owner and a viewer read; a key without read is 403; another organization is 404', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const viewer = await signUpAsMember(h, org, 'viewer');
    expect((await historyRes(bearer(viewer.accessToken), org)).statusCode).toBe(200);
    expect((await historyRes(bearer(owner.accessToken), org)).statusCode).toBe(200);
    const writeOnly = await createTenant(h, { scopes: ['write'] });
    const denied = await historyRes({ 'x-api-key': writeOnly.apiKey }, writeOnly.organizationId);
    expect(denied.statusCode, denied.body).toBe(403);
    const other = await createTenant(h);
    const strangers: Array<[Record<string, string>, string]> = [
      [{ 'x-api-key': other.apiKey }, org],
      [bearer(viewer.accessToken), other.organizationId],
    ];
    for (const [headers, orgId] of strangers) {
      const res = await historyRes(headers, orgId);
      expect(res.statusCode).toBe(404);
      expect(json<ErrorBody>(res).error.code).toBe('NOT_FOUND');
    }
    expect((await historyRes({}, org)).statusCode).toBe(401);
  });

  it('bad input is 400 naming the field', async () => {
    const t = await createTenant(h);
    const CASES: Array<[string, string]> = [
      ['?from=2026-01-11T00:00:00Z&to=2026-01-10T00:00:00Z', 'from'],
      ['?from=2025-01-01T00:00:00Z&to=2026-01-03T00:00:00Z', 'from'],
      ['?to=soon', 'to'],
      ['?to=9999-12-31T23:59:59Z', 'to'], // docs/input.md, Dates: rounded up, year 10000
      ['?tz=Mars/Olympus', 'tz'],
      ['?tz=Asia/Kolkata', 'tz'],
      ['?group_by=day', 'group_by'],
    ];
    for (const [query, field] of CASES) {
      const res = await historyRes({ 'x-api-key': t.apiKey }, t.organizationId, query);
      expect(res.statusCode, `${query}: ${res.body}`).toBe(400);
      const body = json<ErrorBody>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields?.map((x) => x.field), query).toContain(field);
    }
  });
});
