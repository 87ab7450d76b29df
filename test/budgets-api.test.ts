import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { budgetsApi, type BudgetView, expectEnvelopeError } from './budgets-api-fixtures.js';
import { createHarness, type Harness, json } from './harness.js';

/**
 * The budgets API (docs/budgets.md, API): create, list, read, change and delete by owners and admins,
 * reads by every role, API key scopes and a key's own budget, the operator's twin, audit rows.
 * Bad input and isolation: test/budgets-api-input.test.ts; reads after usage: test/budgets-api-reads.test.ts.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});
const api = budgetsApi(() => h);

describe('budgets CRUD over HTTP', () => {
  it('an owner creates, lists, reads, changes and deletes a budget; each change is one audit row', async () => {
    const t = await api.tenant();
    const owner = api.asUser(t.owner);
    const res = await api.send('POST', api.url(t.organizationId), owner, { scope: 'organization', limit_credits: 500, window: 'day' });
    expect(res.statusCode, res.body).toBe(201);
    const created = json<{ success: boolean; message: string; data: BudgetView }>(res);
    expect(created.success).toBe(true);
    expect(created.data).toEqual({
      id: expect.any(String),
      organization_id: t.organizationId,
      scope: 'organization',
      deployment_id: null,
      api_key_id: null,
      end_user_id: null,
      tool_name: null,
      limit_credits: 500,
      limit_ai_tokens: null,
      window: 'day',
      mode: 'block',
      alert_thresholds: [80, 100],
      spent_credits: 0,
      remaining_credits: 500,
      spent_ai_tokens: null,
      remaining_ai_tokens: null,
      window_start: '2026-01-15T00:00:00.000Z',
      resets_at: '2026-01-16T00:00:00.000Z',
      subjects: null,
      created_at: h.clock.now().toISOString(),
      updated_at: h.clock.now().toISOString(),
    });
    const id = created.data.id;

    h.clock.advance(1);
    const narrowed = await api.create(owner, t.organizationId, {
      scope: 'tool',
      tool_name: 'rag_query',
      deployment_id: t.deploymentId,
      limit_ai_tokens: 10_000,
      window: 'week',
      mode: 'alert',
      alert_thresholds: [100, 50, 90],
    });
    expect(narrowed).toMatchObject({ scope: 'tool', tool_name: 'rag_query', deployment_id: t.deploymentId, limit_credits: null, spent_credits: null, remaining_credits: null });
    expect(narrowed).toMatchObject({ limit_ai_tokens: 10_000, spent_ai_tokens: 0, remaining_ai_tokens: 10_000, mode: 'alert', alert_thresholds: [50, 90, 100] });
    expect(narrowed).toMatchObject({ window_start: '2026-01-12T00:00:00.000Z', resets_at: '2026-01-19T00:00:00.000Z' });

    const list = await api.send('GET', api.url(t.organizationId), owner);
    expect(list.statusCode).toBe(200);
    expect(json<{ data: BudgetView[] }>(list).data.map((b) => b.id)).toEqual([id, narrowed.id]);
    expect(await api.read(owner, t.organizationId, id)).toEqual(created.data);

    h.clock.advance(1000);
    const changed = await api.send('PUT', api.url(t.organizationId, id), owner, { limit_credits: 900, window: 'month', mode: 'alert', alert_thresholds: [50] });
    expect(changed.statusCode, changed.body).toBe(200);
    expect(json<{ data: BudgetView }>(changed).data).toMatchObject({
      limit_credits: 900,
      window: 'month',
      mode: 'alert',
      alert_thresholds: [50],
      remaining_credits: 900,
      window_start: '2026-01-01T00:00:00.000Z',
      resets_at: '2026-02-01T00:00:00.000Z',
      created_at: created.data.created_at,
      updated_at: h.clock.now().toISOString(),
    });
    // Fields left out keep their values; the scope's own values may be sent as they are.
    h.clock.advance(1000);
    const partial = await api.send('PUT', api.url(t.organizationId, id), owner, { scope: 'organization', deployment_id: null, limit_ai_tokens: 77 });
    expect(json<{ data: BudgetView }>(partial).data).toMatchObject({ limit_credits: 900, limit_ai_tokens: 77, window: 'month', mode: 'alert' });
    // A limit may be removed while the other remains.
    h.clock.advance(1000);
    const removed = await api.send('PUT', api.url(t.organizationId, id), owner, { limit_credits: null });
    expect(json<{ data: BudgetView }>(removed).data).toMatchObject({ limit_credits: null, spent_credits: null, limit_ai_tokens: 77 });

    h.clock.advance(1000);
    const deleted = await api.send('DELETE', api.url(t.organizationId, id), owner);
    expect(deleted.statusCode).toBe(200);
    expect(json<{ data: BudgetView }>(deleted).data).toMatchObject({ id, limit_ai_tokens: 77 });
    expectEnvelopeError(await api.send('GET', api.url(t.organizationId, id), owner), 404, 'NOT_FOUND');
    expectEnvelopeError(await api.send('DELETE', api.url(t.organizationId, id), owner), 404, 'NOT_FOUND');
    expectEnvelopeError(await api.send('PUT', api.url(t.organizationId, id), owner, { limit_credits: 1 }), 404, 'NOT_FOUND');

    const audit = await api.auditOf(id);
    expect(audit.map((a) => a.action)).toEqual(['create', 'update', 'update', 'update', 'delete']);
    for (const a of audit) expect(a).toMatchObject({ user_id: t.owner.userId, organization_id: t.organizationId, actor: `user:${t.owner.userId}` });
    expect(audit[0]!.metadata).toMatchObject({ budget: { id, scope: 'organization', limit_credits: 500, window: 'day' } });
    expect(audit[1]!.metadata).toMatchObject({ before: { limit_credits: 500, window: 'day' }, after: { limit_credits: 900, window: 'month' } });
    expect(audit[4]!.metadata).toMatchObject({ budget: { id, limit_credits: null, limit_ai_tokens: 77 } });
  });

  it('every change gives the organization\'s balance rows a new version, in the change\'s transaction', async () => {
    const t = await api.tenant();
    const version = async () =>
      (await h.deps.db.query<{ v: string }>('SELECT xmin::text AS v FROM credit_balances WHERE deployment_id = $1', [t.deploymentId]))[0]!.v;
    const v0 = await version();
    const b = await api.create(api.asUser(t.admin), t.organizationId, { scope: 'organization', limit_credits: 5, window: 'hour' });
    const v1 = await version();
    expect(v1).not.toBe(v0);
    await api.send('PUT', api.url(t.organizationId, b.id), api.asUser(t.admin), { limit_credits: 6 });
    const v2 = await version();
    expect(v2).not.toBe(v1);
    await api.send('DELETE', api.url(t.organizationId, b.id), api.asUser(t.admin));
    expect(await version()).not.toBe(v2);
  });

  it('an organization has at most 100 budgets: the 101st is 409 CONFLICT and nothing is written', async () => {
    const t = await api.tenant();
    for (let i = 0; i < 100; i++) await api.create(api.asUser(t.owner), t.organizationId, { scope: 'tool', tool_name: `tool-${i}`, limit_credits: 5, window: 'day' });
    const refused = await api.send('POST', api.url(t.organizationId), api.asUser(t.owner), { scope: 'organization', limit_credits: 5, window: 'day' });
    expect(refused.statusCode).toBe(409);
    expect(json<{ error: { code: string } }>(refused).error.code).toBe('CONFLICT');
    expect(await api.counts(t.organizationId)).toMatchObject({ budgets: 100 });
  });

  it('deleting a budget deletes its windows', async () => {
    const t = await api.tenant();
    const b = await api.create(api.asUser(t.owner), t.organizationId, { scope: 'organization', limit_credits: 50, window: 'day' });
    await api.spend(t, 2);
    expect(await api.counts(t.organizationId)).toMatchObject({ budgets: 1, windows: 1 });
    const deleted = await api.send('DELETE', api.url(t.organizationId, b.id), api.asUser(t.owner));
    expect(json<{ data: BudgetView }>(deleted).data).toMatchObject({ spent_credits: 2, remaining_credits: 48 });
    expect(await api.counts(t.organizationId)).toMatchObject({ budgets: 0, windows: 0 });
  });
});

describe('roles', () => {
  it('owners and admins manage; members and viewers read and get 403 FORBIDDEN on every write, nothing written', async () => {
    const t = await api.tenant();
    const b = await api.create(api.asUser(t.admin), t.organizationId, { scope: 'deployment', deployment_id: t.deploymentId, limit_credits: 10, window: 'day' });
    const admin = await api.send('PUT', api.url(t.organizationId, b.id), api.asUser(t.admin), { limit_credits: 11 });
    expect(admin.statusCode, admin.body).toBe(200);
    for (const reader of [t.member, t.viewer]) {
      const headers = api.asUser(reader);
      expect((await api.send('GET', api.url(t.organizationId), headers)).statusCode).toBe(200);
      expect((await api.read(headers, t.organizationId, b.id)).limit_credits).toBe(11);
      const before = await api.counts(t.organizationId);
      expectEnvelopeError(await api.send('POST', api.url(t.organizationId), headers, { scope: 'organization', limit_credits: 1, window: 'day' }), 403, 'FORBIDDEN');
      expectEnvelopeError(await api.send('PUT', api.url(t.organizationId, b.id), headers, { limit_credits: 1000 }), 403, 'FORBIDDEN');
      expectEnvelopeError(await api.send('DELETE', api.url(t.organizationId, b.id), headers), 403, 'FORBIDDEN');
      expect(await api.counts(t.organizationId)).toEqual(before);
    }
    expect((await api.read(api.asUser(t.owner), t.organizationId, b.id)).limit_credits).toBe(11);
  });
});

describe('API keys', () => {
  it('read reads; create, change and delete need admin (403 FORBIDDEN otherwise, nothing written)', async () => {
    const t = await api.tenant();
    const reader = await api.key(t.organizationId, ['read']);
    const writer = await api.key(t.organizationId, ['read', 'write']);
    const admin = await api.key(t.organizationId, ['read', 'write', 'admin']);
    const b = await api.create(admin.headers, t.organizationId, { scope: 'organization', limit_credits: 10, window: 'day' });
    expect((await api.read(reader.headers, t.organizationId, b.id)).id).toBe(b.id);
    expect((await api.send('GET', api.url(t.organizationId), reader.headers)).statusCode).toBe(200);
    for (const k of [reader, writer]) {
      const before = await api.counts(t.organizationId);
      expectEnvelopeError(await api.send('POST', api.url(t.organizationId), k.headers, { scope: 'organization', limit_credits: 1, window: 'day' }), 403, 'FORBIDDEN');
      expectEnvelopeError(await api.send('PUT', api.url(t.organizationId, b.id), k.headers, { limit_credits: 99 }), 403, 'FORBIDDEN');
      expectEnvelopeError(await api.send('DELETE', api.url(t.organizationId, b.id), k.headers), 403, 'FORBIDDEN');
      expect(await api.counts(t.organizationId)).toEqual(before);
    }
    expect((await api.send('PUT', api.url(t.organizationId, b.id), admin.headers, { limit_credits: 12 })).statusCode).toBe(200);
    expect((await api.send('DELETE', api.url(t.organizationId, b.id), admin.headers)).statusCode).toBe(200);
    const audit = await api.auditOf(b.id);
    expect(audit.map((a) => a.action).sort()).toEqual(['create', 'delete', 'update']);
    for (const a of audit) expect(a).toMatchObject({ actor: `api_key:${admin.id}`, user_id: null });
  });

  it('a key may create a budget on itself but never change or delete it (403); others may', async () => {
    const t = await api.tenant();
    const self = await api.key(t.organizationId, ['read', 'write', 'admin']);
    const other = await api.key(t.organizationId, ['read', 'write', 'admin']);
    const own = await api.create(self.headers, t.organizationId, { scope: 'api_key', api_key_id: self.id, limit_credits: 5, window: 'hour' });
    const theirs = await api.create(self.headers, t.organizationId, { scope: 'api_key', api_key_id: other.id, limit_credits: 5, window: 'hour' });
    const before = await api.counts(t.organizationId);
    const lift = await api.send('PUT', api.url(t.organizationId, own.id), self.headers, { limit_credits: 1_000_000 });
    expectEnvelopeError(lift, 403, 'FORBIDDEN');
    expect(json<{ error: { message: string } }>(lift).error.message).toContain('on itself');
    expectEnvelopeError(await api.send('DELETE', api.url(t.organizationId, own.id), self.headers), 403, 'FORBIDDEN');
    expect(await api.counts(t.organizationId)).toEqual(before);
    expect((await api.read(self.headers, t.organizationId, own.id)).limit_credits).toBe(5);
    // Another key's budget, and the key's own through another key or a person: allowed.
    expect((await api.send('PUT', api.url(t.organizationId, theirs.id), self.headers, { limit_credits: 6 })).statusCode).toBe(200);
    expect((await api.send('PUT', api.url(t.organizationId, own.id), other.headers, { limit_credits: 7 })).statusCode).toBe(200);
    expect((await api.send('DELETE', api.url(t.organizationId, own.id), api.asUser(t.owner))).statusCode).toBe(200);
  });
});

describe('the operator API', () => {
  it('creates, lists, reads, changes and deletes any organization\'s budgets in the flat shape; every call is audited', async () => {
    const t = await api.tenant();
    const op = api.operator();
    const created = await api.send('POST', api.adminUrl(t.organizationId), op, { scope: 'end_user', end_user_id: '*', limit_credits: 20, window: 'day' });
    expect(created.statusCode, created.body).toBe(201);
    const b = json<BudgetView>(created);
    expect(b).toMatchObject({ organization_id: t.organizationId, scope: 'end_user', end_user_id: '*', limit_credits: 20, spent_credits: 0, subjects: [] });
    const list = await api.send('GET', api.adminUrl(t.organizationId), op);
    expect(json<{ budgets: BudgetView[] }>(list).budgets.map((x) => x.id)).toEqual([b.id]);
    expect(json<BudgetView>(await api.send('GET', api.adminUrl(t.organizationId, b.id), op))).toEqual(b);
    const changed = await api.send('PUT', api.adminUrl(t.organizationId, b.id), op, { limit_credits: 30 });
    expect(json<BudgetView>(changed).limit_credits).toBe(30);
    // The organization sees what the operator made.
    expect((await api.read(api.asUser(t.viewer), t.organizationId, b.id)).limit_credits).toBe(30);
    const deleted = await api.send('DELETE', api.adminUrl(t.organizationId, b.id), op);
    expect(json<BudgetView>(deleted).id).toBe(b.id);
    const missing = await api.send('GET', api.adminUrl(t.organizationId, b.id), op);
    expect(missing.statusCode).toBe(404);
    expect(json(missing)).toMatchObject({ error: 'not_found', code: 'NOT_FOUND' });
    const audit = await api.auditOf(b.id);
    expect(audit.map((a) => a.action).sort()).toEqual(['create', 'delete', 'read', 'update']);
    for (const a of audit) expect(a).toMatchObject({ actor: 'operator', organization_id: t.organizationId });
    const listReads = await h.deps.db.query(
      `SELECT 1 FROM audit_logs WHERE organization_id = $1 AND resource_type = 'budget' AND action = 'read' AND resource_id IS NULL`,
      [t.organizationId],
    );
    expect(listReads).toHaveLength(1);
  });

  it('an organization that does not exist is 404; bad input is 400 INVALID_REQUEST naming the field', async () => {
    const op = api.operator();
    const nobody = '6f1c3d2e-0000-4000-8000-000000000000';
    for (const res of [
      await api.send('GET', api.adminUrl(nobody), op),
      await api.send('POST', api.adminUrl(nobody), op, { scope: 'organization', limit_credits: 1, window: 'day' }),
      await api.send('GET', api.adminUrl(nobody, nobody), op),
    ]) {
      expect(res.statusCode).toBe(404);
      expect(json(res)).toMatchObject({ code: 'NOT_FOUND' });
    }
    const t = await api.tenant();
    const bad = await api.send('POST', api.adminUrl(t.organizationId), op, { scope: 'api_key', limit_credits: 1, window: 'day' });
    expect(bad.statusCode).toBe(400);
    expect(json(bad)).toMatchObject({ code: 'INVALID_REQUEST', fields: [{ field: 'api_key_id' }] });
    expect(await api.counts(t.organizationId)).toEqual({ budgets: 0, windows: 0, audit: 0 });
  });
});
