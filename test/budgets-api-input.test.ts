import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BudgetTenant, budgetsApi, expectEnvelopeError } from './budgets-api-fixtures.js';
import { createHarness, type Harness, json } from './harness.js';

/**
 * The budgets API refuses bad input (docs/budgets.md, API): every field, 400 VALIDATION_ERROR naming
 * it and nothing written; and keeps organizations apart: another organization's budget is 404, its
 * deployment or API key named in a body is 400.
 */
let h: Harness;
let t: BudgetTenant;
let other: BudgetTenant;
let otherKeyId: string;
beforeAll(async () => {
  h = await createHarness();
  t = await api.tenant();
  other = await api.tenant();
  otherKeyId = (await api.key(other.organizationId, ['read'])).id;
});
afterAll(async () => {
  await h.close();
});
const api = budgetsApi(() => h);
const NOWHERE = '6f1c3d2e-0000-4000-8000-000000000000';
const ok = { scope: 'organization', limit_credits: 10, window: 'day' };

describe('bad input on create: 400 naming the field, nothing written', () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['unknown scope', { ...ok, scope: 'team' }, 'scope'],
    ['no scope', { limit_credits: 10, window: 'day' }, 'scope'],
    ['unknown window', { ...ok, window: 'year' }, 'window'],
    ['no window', { scope: 'organization', limit_credits: 10 }, 'window'],
    ['unknown mode', { ...ok, mode: 'warn' }, 'mode'],
    ['no limit', { scope: 'organization', window: 'day' }, 'limit_credits'],
    ['both limits null', { scope: 'organization', window: 'day', limit_credits: null, limit_ai_tokens: null }, 'limit_credits'],
    ['limit 0', { ...ok, limit_credits: 0 }, 'limit_credits'],
    ['negative limit', { ...ok, limit_credits: -5 }, 'limit_credits'],
    ['fractional limit', { ...ok, limit_credits: 1.5 }, 'limit_credits'],
    ['limit as a string', { ...ok, limit_credits: '10' }, 'limit_credits'],
    ['limit too large', { ...ok, limit_credits: 10 ** 13 }, 'limit_credits'],
    ['AI token limit 0', { scope: 'organization', window: 'day', limit_ai_tokens: 0 }, 'limit_ai_tokens'],
    ['threshold 0', { ...ok, alert_thresholds: [0, 80] }, 'alert_thresholds'],
    ['threshold 101', { ...ok, alert_thresholds: [101] }, 'alert_thresholds'],
    ['repeated threshold', { ...ok, alert_thresholds: [80, 80] }, 'alert_thresholds'],
    ['fractional threshold', { ...ok, alert_thresholds: [50.5] }, 'alert_thresholds'],
    ['deployment scope without its id', { ...ok, scope: 'deployment' }, 'deployment_id'],
    ['api_key scope without its id', { ...ok, scope: 'api_key' }, 'api_key_id'],
    ['end_user scope without its id', { ...ok, scope: 'end_user' }, 'end_user_id'],
    ['tool scope without its name', { ...ok, scope: 'tool' }, 'tool_name'],
    ['empty end user', { ...ok, scope: 'end_user', end_user_id: '' }, 'end_user_id'],
    ['end user over 200 characters', { ...ok, scope: 'end_user', end_user_id: 'u'.repeat(201) }, 'end_user_id'],
    ['empty tool name', { ...ok, scope: 'tool', tool_name: '' }, 'tool_name'],
    ['tool name over 200 characters', { ...ok, scope: 'tool', tool_name: 't'.repeat(201) }, 'tool_name'],
    ['deployment id not a UUID', { ...ok, scope: 'deployment', deployment_id: 'dep-1' }, 'deployment_id'],
    ['api key id not a UUID', { ...ok, scope: 'api_key', api_key_id: 'key-1' }, 'api_key_id'],
    ['a deployment that does not exist', { ...ok, scope: 'deployment', deployment_id: NOWHERE }, 'deployment_id'],
    ['an API key that does not exist', { ...ok, scope: 'api_key', api_key_id: NOWHERE }, 'api_key_id'],
    ['an api_key_id on a tool budget', { ...ok, scope: 'tool', tool_name: 'x', api_key_id: NOWHERE }, 'api_key_id'],
    ['an end_user_id on an organization budget', { ...ok, end_user_id: 'alice' }, 'end_user_id'],
    ['a tool_name on an end_user budget', { ...ok, scope: 'end_user', end_user_id: '*', tool_name: 'x' }, 'tool_name'],
    ['an unknown field', { ...ok, owner: 'me' }, 'owner'],
  ];
  for (const [name, body, field] of cases) {
    it(`${name} → ${field}`, async () => {
      const before = await api.counts(t.organizationId);
      expectEnvelopeError(await api.send('POST', api.url(t.organizationId), api.asUser(t.owner), body), 400, 'VALIDATION_ERROR', field);
      expect(await api.counts(t.organizationId)).toEqual(before);
    });
  }
});

describe('bad input on change: 400 naming the field, nothing written', () => {
  it('refuses bad values, a change that leaves no limit, and any change of the scope or its ids', async () => {
    const b = await api.create(api.asUser(t.owner), t.organizationId, {
      scope: 'end_user',
      end_user_id: 'alice',
      deployment_id: t.deploymentId,
      limit_credits: 10,
      window: 'day',
    });
    const cases: Array<[Record<string, unknown>, string]> = [
      [{}, 'body'],
      [{ limit_credits: 0 }, 'limit_credits'],
      [{ limit_credits: null }, 'limit_credits'],
      [{ limit_ai_tokens: -1 }, 'limit_ai_tokens'],
      [{ window: 'fortnight' }, 'window'],
      [{ mode: 'soft' }, 'mode'],
      [{ alert_thresholds: [200] }, 'alert_thresholds'],
      [{ scope: 'organization' }, 'scope'],
      [{ end_user_id: 'bob' }, 'end_user_id'],
      [{ end_user_id: null }, 'end_user_id'],
      [{ deployment_id: null }, 'deployment_id'],
      [{ deployment_id: NOWHERE }, 'deployment_id'],
      [{ api_key_id: NOWHERE }, 'api_key_id'],
      [{ tool_name: 'x' }, 'tool_name'],
      [{ limit_credits: 20, color: 'red' }, 'color'],
    ];
    for (const [body, field] of cases) {
      const before = await api.counts(t.organizationId);
      const res = await api.send('PUT', api.url(t.organizationId, b.id), api.asUser(t.owner), body);
      if (field === 'body') expectEnvelopeError(res, 400, 'VALIDATION_ERROR');
      else expectEnvelopeError(res, 400, 'VALIDATION_ERROR', field);
      expect(await api.counts(t.organizationId), JSON.stringify(body)).toEqual(before);
    }
    // A change of the scope names the rule; sending the values as they are is no change.
    const res = await api.send('PUT', api.url(t.organizationId, b.id), api.asUser(t.owner), { scope: 'tool' });
    expect(json<{ error: { message: string } }>(res).error.message).toContain('cannot be changed');
    const same = await api.send('PUT', api.url(t.organizationId, b.id), api.asUser(t.owner), {
      scope: 'end_user',
      end_user_id: 'alice',
      deployment_id: t.deploymentId,
      api_key_id: null,
      tool_name: null,
      limit_credits: 12,
    });
    expect(same.statusCode, same.body).toBe(200);
    expect((await api.read(api.asUser(t.owner), t.organizationId, b.id)).limit_credits).toBe(12);
  });
});

describe('isolation', () => {
  it("another organization's budget id is 404 on read, change and delete, and it is left as it was", async () => {
    const theirs = await api.create(api.asUser(other.owner), other.organizationId, { scope: 'organization', limit_credits: 3, window: 'day' });
    const mine = api.asUser(t.owner);
    const admin = await api.key(t.organizationId, ['read', 'write', 'admin']);
    const before = await api.counts(other.organizationId);
    for (const headers of [mine, admin.headers]) {
      expectEnvelopeError(await api.send('GET', api.url(t.organizationId, theirs.id), headers), 404, 'NOT_FOUND');
      expectEnvelopeError(await api.send('PUT', api.url(t.organizationId, theirs.id), headers, { limit_credits: 1000 }), 404, 'NOT_FOUND');
      expectEnvelopeError(await api.send('DELETE', api.url(t.organizationId, theirs.id), headers), 404, 'NOT_FOUND');
      // …and the other organization's own path is 404 for a stranger.
      expectEnvelopeError(await api.send('GET', api.url(other.organizationId, theirs.id), headers), 404, 'NOT_FOUND');
      expectEnvelopeError(await api.send('GET', api.url(other.organizationId), headers), 404, 'NOT_FOUND');
      expectEnvelopeError(await api.send('DELETE', api.url(other.organizationId, theirs.id), headers), 404, 'NOT_FOUND');
    }
    expectEnvelopeError(await api.send('GET', api.url(t.organizationId, 'not-a-uuid'), mine), 404, 'NOT_FOUND');
    expect(await api.counts(other.organizationId)).toEqual(before);
    expect((await api.read(api.asUser(other.owner), other.organizationId, theirs.id)).limit_credits).toBe(3);
    // The operator's path names the organization too: the budget under another organization is 404.
    const res = await api.send('GET', api.adminUrl(t.organizationId, theirs.id), api.operator());
    expect(res.statusCode).toBe(404);
  });

  it("another organization's deployment or API key in a body is 400 naming the field, nothing written", async () => {
    const before = await api.counts(t.organizationId);
    const owner = api.asUser(t.owner);
    const bodies: Array<[Record<string, unknown>, string]> = [
      [{ ...ok, scope: 'deployment', deployment_id: other.deploymentId }, 'deployment_id'],
      [{ ...ok, scope: 'tool', tool_name: '*', deployment_id: other.deploymentId }, 'deployment_id'],
      [{ ...ok, scope: 'api_key', api_key_id: otherKeyId }, 'api_key_id'],
    ];
    for (const [body, field] of bodies) {
      expectEnvelopeError(await api.send('POST', api.url(t.organizationId), owner, body), 400, 'VALIDATION_ERROR', field);
      const res = await api.send('POST', api.adminUrl(t.organizationId), api.operator(), body);
      expect(res.statusCode).toBe(400);
      expect(json(res)).toMatchObject({ code: 'INVALID_REQUEST', fields: [{ field }] });
    }
    expect(await api.counts(t.organizationId)).toEqual(before);
  });
});
