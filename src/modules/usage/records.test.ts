import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createHarness, createTenant, type Harness, json } from '../../../test/harness.js';
import { type RecordPage, usageFixtures } from '../../../test/usage-fixtures.js';

/** GET /organizations/{id}/usage/records: keyset pages, filters and the fields of a record (docs/usage-analytics.md). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const f = usageFixtures(() => h);
const key = (apiKey: string) => ({ 'x-api-key': apiKey });
const ids = (records: Array<{ id: string }>) => records.map((r) => r.id);

describe('GET /organizations/{id}/usage/records', () => {
  it('pages newest first over (timestamp, id), without duplicates or gaps, also while records are written', async () => {
    h.clock.set('2026-03-01T00:00:00.000Z');
    const t = await createTenant(h);
    const rag = await f.toolFor('rag_query');
    for (let i = 0; i < 9; i++) {
      if (i % 3 === 0) h.clock.advance(1000); // runs of three share a timestamp: the id breaks the tie
      await f.record(t.deploymentId, rag);
    }
    const expected = await h.deps.db.query<{ id: string }>(
      'SELECT id FROM usage_records WHERE organization_id = $1 ORDER BY "timestamp" DESC, id DESC',
      [t.organizationId],
    );
    expect(ids(await f.walk(key(t.apiKey), t.organizationId, '?limit=4'))).toEqual(ids(expected));
    expect(json<RecordPage>(await f.recordsRes(key(t.apiKey), t.organizationId)).data).toHaveLength(9); // default limit 20

    const first = json<RecordPage>(await f.recordsRes(key(t.apiKey), t.organizationId, '?limit=4'));
    h.clock.advance(1000);
    for (let i = 0; i < 3; i++) await f.record(t.deploymentId, rag);
    const rest = await f.walk(key(t.apiKey), t.organizationId, '?limit=4', first.meta.next_cursor);
    const seen = [...ids(first.data), ...ids(rest)];
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).toEqual(ids(expected));
    // A new walk starts with the new records.
    expect(await f.walk(key(t.apiKey), t.organizationId, '?limit=5')).toHaveLength(12);
  });

  it('filters by range, deployment, tool, end user and outcome, and carries the documented fields only', async () => {
    h.clock.set('2026-03-10T00:00:00.000Z');
    const t = await createTenant(h);
    const second = await f.addDeployment(t.organizationId);
    const starved = await h.request({ method: 'PUT', url: `/api/v1/admin/deployments/${second}/overrides`, headers: adminHeaders(h), payload: { monthly_credits: 1 } });
    expect(starved.statusCode, starved.body).toBe(200);
    const rag = await f.toolFor('rag_query');
    const advanced = await f.toolFor('task_advanced');
    const a = await f.record(t.deploymentId, rag, { at: '2026-03-11T10:00:00.000Z', mcpUserId: 'alice', invocationId: 'inv-a-1' });
    const b = await f.record(t.deploymentId, advanced, { at: '2026-03-12T10:00:00.000Z', mcpUserId: 'bob' });
    const c = await f.record(second, rag, { at: '2026-03-13T10:00:00.000Z', mcpUserId: 'alice' }); // 2 credits > 1: refused
    expect(c.success).toBe(false);
    const d = await f.record(t.deploymentId, rag, { at: '2026-03-14T10:00:00.000Z' });

    const list = (query: string) => f.walk(key(t.apiKey), t.organizationId, query);
    expect(ids(await list(''))).toEqual([d, c, b, a].map((r) => r.usage_id));
    expect(ids(await list('?from=2026-03-12T10:00:00Z&to=2026-03-14T10:00:00Z'))).toEqual([c, b].map((r) => r.usage_id));
    expect(ids(await list(`?from=${encodeURIComponent('2026-03-12T12:00:00+02:00')}`))).toEqual([d, c, b].map((r) => r.usage_id));
    expect(ids(await list(`?deployment_id=${second}`))).toEqual([c.usage_id]);
    expect(ids(await list(`?tool_name=${encodeURIComponent(advanced)}`))).toEqual([b.usage_id]);
    expect(ids(await list('?mcp_user_id=alice'))).toEqual([c, a].map((r) => r.usage_id));
    expect(ids(await list('?success=false'))).toEqual([c.usage_id]);
    expect(ids(await list('?success=true&mcp_user_id=alice'))).toEqual([a.usage_id]);
    expect(await list('?tool_name=nothing-like-it')).toEqual([]);

    const [first] = await list('?mcp_user_id=alice&success=true');
    expect(first).toEqual({
      id: a.usage_id,
      deployment_id: t.deploymentId,
      tool_name: rag,
      action: 'rag_query',
      mcp_user_id: 'alice',
      credits: 2,
      credits_refunded: 0,
      success: true,
      error: null,
      invocation_id: 'inv-a-1',
      timestamp: '2026-03-11T10:00:00.000Z',
    });
    const [refused] = await list('?success=false');
    expect(refused).toMatchObject({ deployment_id: second, credits: 0, success: false, error: 'insufficient_credits' });

    await f.refund(b.usage_id!, 2);
    const [partly] = await list(`?tool_name=${encodeURIComponent(advanced)}`);
    expect(partly).toMatchObject({ credits: 1, credits_refunded: 2 });
  });
});
