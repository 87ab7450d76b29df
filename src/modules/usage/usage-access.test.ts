import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bearer,
  createHarness,
  createKeyOverHttp,
  createTenant,
  type Harness,
  json,
  signUpAsMember,
  signUpWithOrganization,
} from '../../../test/harness.js';
import { type ErrorBody, usageFixtures } from '../../../test/usage-fixtures.js';

/** Who may read usage analytics, and the 400s and 404s of bad input (docs/usage-analytics.md). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

const f = usageFixtures(() => h);
const ROUTES = ['summary', 'records'] as const;
const get = (headers: Record<string, string>, orgId: string, route: (typeof ROUTES)[number], query = '') =>
  h.request({ method: 'GET', url: `/organizations/${orgId}/usage/${route}${query}`, headers });

describe('usage analytics: rights', () => {
  it('every role and a read key read; another organization is 404, for users and keys alike', async () => {
    const owner = await signUpWithOrganization(h);
    const org = owner.organizationId;
    const readKey = await createKeyOverHttp(h, bearer(owner.accessToken), org, { scopes: ['read'] });
    const callers: Array<[string, Record<string, string>]> = [
      ['owner', bearer(owner.accessToken)],
      ['read key (X-API-Key)', { 'x-api-key': readKey.key }],
      ['read key (Bearer)', bearer(readKey.key)],
    ];
    for (const role of ['admin', 'member', 'viewer'] as const) callers.push([role, bearer((await signUpAsMember(h, org, role)).accessToken)]);
    for (const route of ROUTES) {
      for (const [who, headers] of callers) expect((await get(headers, org, route)).statusCode, `${who} ${route}`).toBe(200);
    }
    // A per-user override takes the permission away like any other.
    const denied = await signUpAsMember(h, org, 'viewer');
    const override = await h.request({
      method: 'PUT',
      url: `/organizations/${org}/users/${denied.userId}`,
      headers: bearer(owner.accessToken),
      payload: { permissions: { 'usage.read': false } },
    });
    expect(override.statusCode, override.body).toBe(200);
    for (const route of ROUTES) {
      const res = await get(bearer(denied.accessToken), org, route);
      expect(res.statusCode, route).toBe(403);
      expect(json<ErrorBody>(res).error.code).toBe('FORBIDDEN');
    }

    const stranger = await signUpWithOrganization(h, 'stranger');
    const strangerKey = await createKeyOverHttp(h, bearer(stranger.accessToken), stranger.organizationId, { scopes: ['read', 'write', 'admin'] });
    for (const route of ROUTES) {
      for (const headers of [bearer(stranger.accessToken), { 'x-api-key': strangerKey.key }]) {
        const res = await get(headers, org, route);
        expect(res.statusCode, route).toBe(404);
        expect(json<ErrorBody>(res).error.code).toBe('NOT_FOUND');
      }
      expect((await get({}, org, route)).statusCode).toBe(401);
      expect((await get(bearer(owner.accessToken), 'not-a-uuid', route)).statusCode).toBe(404);
    }
  });

  it("a deployment of another organization is 404 and never shows that organization's usage", async () => {
    const mine = await createTenant(h);
    const theirs = await createTenant(h);
    const tool = await f.toolFor('rag_query');
    await f.record(theirs.deploymentId, tool);
    h.clock.advance(1000);
    for (const route of ROUTES) {
      for (const deployment of [theirs.deploymentId, '6f1c3d2e-0000-4000-8000-000000000000']) {
        const res = await get({ 'x-api-key': mine.apiKey }, mine.organizationId, route, `?deployment_id=${deployment}`);
        expect(res.statusCode, `${route} ${deployment}`).toBe(404);
        expect(json<ErrorBody>(res).error.code).toBe('NOT_FOUND');
      }
      expect((await get({ 'x-api-key': mine.apiKey }, mine.organizationId, route, `?deployment_id=${mine.deploymentId}`)).statusCode).toBe(200);
    }
    expect((await f.summary({ 'x-api-key': mine.apiKey }, mine.organizationId)).totals.calls).toBe(0);
    expect((await f.summary({ 'x-api-key': theirs.apiKey }, theirs.organizationId)).totals.calls).toBe(1);
  });
});

describe('usage analytics: bad input is 400 VALIDATION_ERROR naming the parameter', () => {
  const forged = (v: object) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const e = encodeURIComponent;
  const CASES: Array<[(typeof ROUTES)[number], string, string]> = [
    ['summary', '?group_by=week', 'group_by'],
    ['summary', '?group_by=', 'group_by'],
    ['summary', '?from=yesterday', 'from'],
    ['summary', '?to=2026-13-01T00:00:00Z', 'to'],
    ['summary', '?from=2026-01-10T00:00:00', 'from'], // no offset: not RFC 3339
    ['summary', '?from=2026-01-10', 'from'],
    ['summary', `?from=${e('2026-06-30T23:59:60Z')}`, 'from'],
    ['summary', '?from=1960-01-01T00:00:00Z', 'from'],
    // docs/input.md, Dates: a year-9999 date rounded up to its day (or read at -23:59) would be year 10000.
    ['summary', '?to=9999-12-31T23:59:59Z', 'to'],
    ['summary', '?from=2026-01-10T00:00:00Z&to=2026-01-10T00:00:00Z', 'from'],
    ['summary', '?from=2026-01-11T00:00:00Z&to=2026-01-10T00:00:00Z', 'from'],
    ['summary', '?from=2025-01-01T00:00:00Z&to=2026-01-03T00:00:00Z', 'from'], // 367 days
    ['summary', '?group_by=tool&from=2025-01-01T00:00:00Z&to=2026-01-03T00:00:00Z', 'from'],
    ['summary', '?group_by=hour&from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:01Z', 'from'], // 31 days and a second
    ['summary', '?deployment_id=not-a-uuid', 'deployment_id'],
    ['summary', '?limit=5', 'limit'],
    ['records', '?cursor=not-a-cursor', 'cursor'],
    ['records', `?cursor=${forged({ at: '2026-01-01T00:00:00.000Z', id: 'x' })}`, 'cursor'],
    ['records', `?cursor=${forged({ at: '0000-01-01T00:00:00.000Z', id: '00000000-0000-4000-8000-000000000000' })}`, 'cursor'],
    ['records', `?to=${e('9999-12-31T23:59:59-23:59')}`, 'to'],
    ['records', `?from=${e('9999-12-31T23:59:59-23:59')}`, 'from'],
    ['records', '?limit=0', 'limit'],
    ['records', '?limit=101', 'limit'],
    ['records', '?success=maybe', 'success'],
    ['records', '?deployment_id=123', 'deployment_id'],
    ['records', `?tool_name=${'t'.repeat(201)}`, 'tool_name'],
    ['records', '?mcp_user_id=', 'mcp_user_id'],
    ['records', '?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z', 'from'],
    ['records', '?to=soon', 'to'],
    ['records', '?group_by=day', 'group_by'],
  ];

  it('for every case on both routes', async () => {
    const t = await createTenant(h);
    for (const [route, query, field] of CASES) {
      const res = await get({ 'x-api-key': t.apiKey }, t.organizationId, route, query);
      expect(res.statusCode, `${route}${query}: ${res.body}`).toBe(400);
      const body = json<ErrorBody>(res);
      expect(body.error.code).toBe('VALIDATION_ERROR');
      expect(body.details.fields?.map((x) => x.field), `${route}${query}`).toContain(field);
      expect(body.error.message, `${route}${query}`).toContain(field);
    }
  });

  it('the last instants taken, rounded up to their day or hour, still answer (docs/input.md, Dates)', async () => {
    const t = await createTenant(h);
    for (const route of ROUTES) {
      for (const query of ['?to=9998-12-31T23:59:59Z', '?from=9998-12-31T00:00:00Z&to=9998-12-31T23:59:59.999Z']) {
        const res = await get({ 'x-api-key': t.apiKey }, t.organizationId, route, query);
        expect(res.statusCode, `${route}${query}: ${res.body}`).toBe(200);
      }
    }
  });
});
