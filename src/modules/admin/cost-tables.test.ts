import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, type Harness, json, unique } from '../../../test/harness.js';
import type { CreditCostRow, ToolActionRow } from './lists.js';

/** GET /api/v1/admin/credit-costs and /tool-actions: the tables the operator edits, as stored now. */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Method = NonNullable<InjectOptions['method']>;
const admin = (method: Method, url: string, payload?: object) =>
  h.request({ method, url, headers: adminHeaders(h), ...(payload === undefined ? {} : { payload }) });

async function costs(): Promise<CreditCostRow[]> {
  const res = await admin('GET', '/api/v1/admin/credit-costs');
  expect(res.statusCode, res.body).toBe(200);
  return json<{ credit_costs: CreditCostRow[] }>(res).credit_costs;
}

async function mappings(): Promise<ToolActionRow[]> {
  const res = await admin('GET', '/api/v1/admin/tool-actions');
  expect(res.statusCode, res.body).toBe(200);
  return json<{ tool_actions: ToolActionRow[] }>(res).tool_actions;
}

const operatorReads = (resourceType: string) =>
  h.deps.db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM audit_logs WHERE actor = 'operator' AND action = 'read' AND resource_type = $1",
    [resourceType],
  );

const uniqueAction = (prefix: string) => unique(prefix).toLowerCase();

describe('GET credit-costs and tool-actions: authentication and input', () => {
  it('answers 401 with the flat body without the key or with a wrong one', async () => {
    for (const url of ['/api/v1/admin/credit-costs', '/api/v1/admin/tool-actions']) {
      for (const headers of [{}, { 'x-admin-key': 'wrong-admin-key-0123456789' }, bearer(h.config.adminApiKey)]) {
        const res = await h.request({ method: 'GET', url, headers });
        expect(res.statusCode, `${url} ${res.body}`).toBe(401);
        expect(json(res)).toMatchObject({ error: 'unauthorized', code: 'UNAUTHORIZED' });
      }
    }
  });

  it('answers 400 naming an unknown query parameter', async () => {
    for (const url of ['/api/v1/admin/credit-costs?action=task_basic', '/api/v1/admin/tool-actions?action=task_basic']) {
      const res = await admin('GET', url);
      expect(res.statusCode, res.body).toBe(400);
      const body = json<{ code: string; fields?: Array<{ field: string }> }>(res);
      expect(body.code).toBe('INVALID_REQUEST');
      expect((body.fields ?? []).map((f) => f.field)).toContain('action');
    }
  });
});

describe('GET credit-costs', () => {
  it('lists the seeded actions by name, then a new cost and a changed one as soon as they are set; each read is audited', async () => {
    const seeded = await costs();
    const names = seeded.map((c) => c.action);
    expect(names).toEqual([...names].sort());
    expect(seeded.find((c) => c.action === 'platform_basic')).toMatchObject({ credits: 1, updated_at: expect.stringMatching(/Z$/) });
    expect(names).toEqual(expect.arrayContaining(['task_basic', 'platform_basic']));

    const reads = (await operatorReads('credit_cost'))[0]!.n;
    const action = uniqueAction('listed');
    expect((await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 4, description: 'four' })).statusCode).toBe(200);
    expect((await costs()).find((c) => c.action === action)).toEqual({ action, credits: 4, description: 'four', updated_at: h.clock.now().toISOString() });
    h.clock.advance(1000);
    expect((await admin('PUT', `/api/v1/admin/credit-costs/${action}`, { credits: 9 })).statusCode).toBe(200);
    expect((await costs()).find((c) => c.action === action)).toEqual({ action, credits: 9, description: 'four', updated_at: h.clock.now().toISOString() });
    expect((await operatorReads('credit_cost'))[0]!.n).toBeGreaterThanOrEqual(reads + 2);
  });
});

describe('GET tool-actions', () => {
  it('lists a mapping with its action and the action’s cost, follows a remap and a cost change, and drops an unmapped tool', async () => {
    const cheap = uniqueAction('cheap');
    const dear = uniqueAction('dear');
    await admin('PUT', `/api/v1/admin/credit-costs/${cheap}`, { credits: 2 });
    await admin('PUT', `/api/v1/admin/credit-costs/${dear}`, { credits: 30 });
    const tool = `${uniqueAction('tool')}/search.v2`;

    const reads = (await operatorReads('tool_action'))[0]!.n;
    expect((await mappings()).find((m) => m.tool_name === tool)).toBeUndefined();
    expect((await admin('PUT', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`, { action: cheap })).statusCode).toBe(200);
    expect((await mappings()).find((m) => m.tool_name === tool)).toEqual({ tool_name: tool, action: cheap, credits: 2, updated_at: h.clock.now().toISOString() });

    await admin('PUT', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`, { action: dear });
    await admin('PUT', `/api/v1/admin/credit-costs/${dear}`, { credits: 31 });
    expect((await mappings()).find((m) => m.tool_name === tool)).toMatchObject({ action: dear, credits: 31 });

    const all = (await mappings()).map((m) => m.tool_name);
    expect(all).toEqual([...all].sort());

    expect((await admin('DELETE', `/api/v1/admin/tool-actions/${encodeURIComponent(tool)}`)).statusCode).toBe(204);
    expect((await mappings()).find((m) => m.tool_name === tool)).toBeUndefined();
    expect((await operatorReads('tool_action'))[0]!.n).toBeGreaterThanOrEqual(reads + 4);
  });
});
