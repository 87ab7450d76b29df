import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toAppError } from '../src/http/error-handler.js';
import { MAX_JSON_DEPTH } from '../src/http/input-guard.js';
import {
  adminHeaders,
  bearer,
  createHarness,
  createTenant,
  type Harness,
  serviceHeaders,
  signUp,
  signUpWithOrganization,
  type Tenant,
  unique,
} from './harness.js';

/**
 * docs/input.md (input that must never reach a 5xx), written as the attacks a security review sent (each got a 500):
 * NUL and unpaired surrogates in every part of a request, non-UUID ids, JSON nested 10,000 deep.
 * Each answer is checked for status, wire shape, code and the field named, and nothing is written.
 */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Res = { statusCode: number; body: string };
type Headers = Record<string, string>;
type FlatBody = { error: string; code: string; message: string; fields?: Array<{ field: string }> };
type EnvelopeBody = { success: false; error: { code: string; message: string }; details: { timestamp: string; fields?: Array<{ field: string }> } };

const deep = (levels: number, leaf = '1') => `${'{"a":'.repeat(levels)}${leaf}${'}'.repeat(levels)}`;

function expectFlat(res: Res, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body.slice(0, 300)).toBe(status);
  const body = JSON.parse(res.body) as FlatBody;
  expect(body).toMatchObject({ code, message: expect.any(String) });
  expect(body).not.toHaveProperty('success');
  if (field) expect(body.fields?.map((f) => f.field), res.body.slice(0, 300)).toContain(field);
}

function expectEnvelope(res: Res, status: number, code: string, field?: string): void {
  expect(res.statusCode, res.body.slice(0, 300)).toBe(status);
  const body = JSON.parse(res.body) as EnvelopeBody;
  expect(body).toMatchObject({ success: false, error: { code, message: expect.any(String) }, details: { timestamp: expect.any(String) } });
  if (field) expect(body.details.fields?.map((f) => f.field), res.body.slice(0, 300)).toContain(field);
}

const invalid = (res: Res, field?: string) => expectFlat(res, 400, 'INVALID_REQUEST', field);

/** Send a raw JSON text, so the escapes (\u0000, \ud800) reach the server exactly as an attacker writes them. */
function raw(method: 'POST' | 'PUT', url: string, headers: Headers, payload: string) {
  return h.request({ method, url, headers: { ...headers, 'content-type': 'application/json' }, payload });
}

/** Everything a metered call could have written for a deployment: balance, usage, invocations, ledger. */
async function footprint(deploymentId: string): Promise<unknown> {
  return h.deps.db.query(
    `SELECT b.monthly_used, b.purchased_balance, b.reserved,
       (SELECT count(*)::int FROM usage_records WHERE deployment_id = $1) AS usage,
       (SELECT count(*)::int FROM invocations WHERE deployment_id = $1) AS invocations,
       (SELECT count(*)::int FROM credit_ledger WHERE deployment_id = $1) AS ledger,
       (SELECT count(*)::int FROM webhook_deliveries WHERE deployment_id = $1) AS deliveries
     FROM credit_balances b WHERE b.deployment_id = $1`,
    [deploymentId],
  );
}

async function unchangedBy(t: Tenant, attack: () => Promise<void>): Promise<void> {
  const before = await footprint(t.deploymentId);
  await attack();
  expect(await footprint(t.deploymentId)).toEqual(before);
}

describe('NUL and unpaired surrogates in a body (any depth, keys too) → 400 naming the field', () => {
  it('metering, stdio and service: flat INVALID_REQUEST, nothing metered', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 10 });
    const stdio = (json: string) => raw('POST', '/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), json);
    const service = (json: string) => raw('POST', '/api/v1/mcp/usage', serviceHeaders(h), `{"deployment_id":"${t.deploymentId}",${json}}`);
    await unchangedBy(t, async () => {
      invalid(await stdio('{"tool_name":"a\\u0000b"}'), 'tool_name');
      invalid(await stdio('{"tool_name":"x","metadata":{"a":{"b":"\\ud800"}}}'), 'metadata.a.b');
      invalid(await stdio('{"tool_name":"x","metadata":{"list":["ok","\\udc00x"]}}'), 'metadata.list.1');
      invalid(await stdio('{"tool_name":"x","metadata":{"k\\u0000":1}}'), 'metadata.k\\u0000');
      invalid(await stdio('{"tool_name":"x","metadata":{"\\udbff":1}}'), 'metadata.\\udbff');
      invalid(await service('"tool_name":"x","mcp_user_id":"\\u0000"'), 'mcp_user_id');
      invalid(await service('"tool_name":"x","invocation_id":"i\\ud800"'), 'invocation_id');
      invalid(await raw('POST', '/api/v1/mcp/check-entitlement', serviceHeaders(h), `{"deployment_id":"${t.deploymentId}","tool_name":"x\\u0000","reserve":true}`), 'tool_name');
    });
  });

  it('well-formed text, astral characters (surrogate pairs) included, is stored as sent', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const metadata = { '🔑': 'emoji 🎉 and ü', nested: { ok: '𝔘𝔫𝔦𝔠𝔬𝔡𝔢' } };
    const res = await h.request({ method: 'POST', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), payload: { tool_name: 'x🎉', metadata } });
    expect(res.statusCode, res.body).toBe(200);
    const rows = await h.deps.db.query<{ metadata: unknown }>('SELECT metadata FROM usage_records WHERE id = $1', [res.json().usage_id]);
    expect(rows[0]?.metadata).toEqual(metadata);
  });

  it('the envelope routes: VALIDATION_ERROR with details.fields, nothing created or changed', async () => {
    const owner = await signUp(h, 'Before');
    const slug = unique('nul').toLowerCase().replace(/[^a-z0-9-]/g, '-');
    expectEnvelope(await raw('POST', '/organizations', bearer(owner.accessToken), `{"name":"Acme\\u0000","slug":"${slug}"}`), 400, 'VALIDATION_ERROR', 'name');
    expect(await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug])).toHaveLength(0);
    expectEnvelope(await raw('PUT', '/auth/me', bearer(owner.accessToken), '{"full_name":"\\ud800"}'), 400, 'VALIDATION_ERROR', 'full_name');
    expect(await h.deps.db.query('SELECT full_name FROM users WHERE id = $1', [owner.userId])).toEqual([{ full_name: 'Before' }]);
    const email = `${unique('nul')}@example.com`.toLowerCase();
    const signup = await raw('POST', '/auth/signup', {}, `{"email":"${email}","password":"correct horse battery staple","full_name":"a\\u0000"}`);
    expectEnvelope(signup, 400, 'VALIDATION_ERROR', 'full_name');
    expect(await h.deps.db.query('SELECT 1 FROM users WHERE email = $1', [email])).toHaveLength(0);
  });
});

describe('NUL in the query, the path and the headers → 400 naming the part and the field', () => {
  it('query: flat and envelope', async () => {
    const owner = await signUp(h);
    invalid(await h.request({ method: 'GET', url: '/api/v1/mcp/resolve-deployment?user_id=%00', headers: serviceHeaders(h) }), 'query.user_id');
    invalid(await h.request({ method: 'GET', url: '/api/v1/admin/deployments?organization_id=a%00', headers: adminHeaders(h) }), 'query.organization_id');
    expectEnvelope(await h.request({ method: 'GET', url: '/organizations?cursor=%00', headers: bearer(owner.accessToken) }), 400, 'VALIDATION_ERROR', 'query.cursor');
  });

  it('path: 400 (not 404) for NUL, on metering, operator and organization routes; nothing written', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const owner = await signUpWithOrganization(h);
    await unchangedBy(t, async () => {
      invalid(await h.request({ method: 'GET', url: '/api/v1/mcp/invocations/a%00b', headers: bearer(t.apiKey) }), 'params.invocation_id');
      invalid(await raw('POST', '/api/v1/mcp/reservations/%00/release', bearer(t.apiKey), '{}'), 'params.invocation_id');
      invalid(await raw('POST', `/api/v1/admin/deployments/${t.deploymentId}%00/credits`, adminHeaders(h), '{"amount":5,"reason":"r"}'), 'params.id');
    });
    const tool = unique('tool');
    invalid(await raw('PUT', `/api/v1/admin/tool-actions/${tool}%00`, adminHeaders(h), '{"action":"rag_query"}'), 'params.tool_name');
    expect(await h.deps.db.query('SELECT 1 FROM tool_actions WHERE tool_name LIKE $1', [`${tool}%`])).toHaveLength(0);
    expectEnvelope(await h.request({ method: 'GET', url: '/organizations/%00', headers: bearer(owner.accessToken) }), 400, 'VALIDATION_ERROR', 'params.id');
    // A path that is not UTF-8 cannot hold a surrogate: the router refuses it, never a 500.
    expectFlat(await h.request({ method: 'GET', url: '/api/v1/mcp/invocations/%ED%A0%80', headers: bearer(t.apiKey) }), 400, 'INVALID_REQUEST');
  });

  it('headers: any header, the Idempotency-Key and User-Agent that would be stored included; nothing written', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 10 });
    const record = (headers: Headers) => raw('POST', '/api/v1/mcp/stdio/record-usage', { ...bearer(t.apiKey), ...headers }, '{"tool_name":"x"}');
    await unchangedBy(t, async () => {
      invalid(await record({ 'idempotency-key': 'k\u0000' }), 'headers.idempotency-key');
      invalid(await record({ 'x-foo': '\ud800' }), 'headers.x-foo');
    });
    const owner = await signUp(h);
    const slug = unique('ua').toLowerCase().replace(/[^a-z0-9-]/g, '-');
    const res = await h.request({ method: 'POST', url: '/organizations', headers: { ...bearer(owner.accessToken), 'user-agent': 'ua\u0000' }, payload: { name: 'UA', slug } });
    expectEnvelope(res, 400, 'VALIDATION_ERROR', 'headers.user-agent');
    expect(await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug])).toHaveLength(0);
  });

  it('a credential holding NUL is a wrong credential: 401 (authentication answers before validation)', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expectFlat(await record401(`${t.apiKey}\u0000`), 401, 'UNAUTHORIZED');
    const res = await h.request({ method: 'GET', url: '/api/v1/ai/quota', headers: { 'x-deployment-id': `${t.deploymentId}\u0000`, 'x-deployment-secret': t.deploymentSecret } });
    expectFlat(res, 401, 'UNAUTHORIZED');
  });
});

function record401(key: string) {
  return raw('POST', '/api/v1/mcp/stdio/record-usage', bearer(key), '{"tool_name":"x"}');
}

describe('ids that must be UUIDs: 400 in a body or query, 404 in a path', () => {
  it('service routes: deployment_id in the query or body that is not a UUID → 400 naming it; the reservation stays', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const held = await h.request({ method: 'POST', url: '/api/v1/mcp/check-entitlement', headers: serviceHeaders(h), payload: { deployment_id: t.deploymentId, tool_name: 'x', reserve: true, invocation_id: 'held' } });
    expect(held.json()).toMatchObject({ allowed: true, invocation_id: 'held' });
    await unchangedBy(t, async () => {
      for (const id of ['-1', 'not-a-uuid', `${t.deploymentId}x`, '']) {
        const query = encodeURIComponent(id);
        invalid(await h.request({ method: 'GET', url: `/api/v1/mcp/invocations/held?deployment_id=${query}`, headers: serviceHeaders(h) }), 'deployment_id');
        invalid(await raw('POST', '/api/v1/mcp/reservations/held/release', serviceHeaders(h), JSON.stringify({ deployment_id: id })), 'deployment_id');
        invalid(await raw('POST', '/api/v1/mcp/check-entitlement', serviceHeaders(h), JSON.stringify({ deployment_id: id, tool_name: 'x', reserve: true })), 'deployment_id');
        invalid(await raw('POST', '/api/v1/mcp/usage', serviceHeaders(h), JSON.stringify({ deployment_id: id, tool_name: 'x' })), 'deployment_id');
      }
    });
    const status = await h.request({ method: 'GET', url: `/api/v1/mcp/invocations/held?deployment_id=${t.deploymentId}`, headers: serviceHeaders(h) });
    expect(status.json()).toMatchObject({ status: 'reserved' });
    invalid(await h.request({ method: 'GET', url: '/api/v1/admin/deployments?organization_id=nope', headers: adminHeaders(h) }), 'organization_id');
  });

  it('a path id that is not a UUID → 404 NOT_FOUND in both shapes, and nothing is granted', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const owner = await signUpWithOrganization(h);
    await unchangedBy(t, async () => {
      for (const id of ['not-a-uuid', '-1', `${t.deploymentId}0`]) {
        expectFlat(await raw('POST', `/api/v1/admin/deployments/${id}/credits`, adminHeaders(h), '{"amount":5,"reason":"r"}'), 404, 'NOT_FOUND');
        expectFlat(await h.request({ method: 'GET', url: `/api/v1/admin/deployments/${id}`, headers: adminHeaders(h) }), 404, 'NOT_FOUND');
        expectFlat(await raw('PUT', `/api/v1/admin/users/${id}/external-id`, adminHeaders(h), '{"external_id":"e"}'), 404, 'NOT_FOUND');
        expectFlat(await raw('POST', `/api/v1/mcp/usage/${id}/refund`, serviceHeaders(h), '{"reason":"r"}'), 404, 'NOT_FOUND');
        expectEnvelope(await h.request({ method: 'GET', url: `/organizations/${id}`, headers: bearer(owner.accessToken) }), 404, 'NOT_FOUND');
        expectEnvelope(await raw('POST', `/organizations/${owner.organizationId}/deployments/${id}/secret`, bearer(owner.accessToken), '{}'), 404, 'NOT_FOUND');
      }
    });
  });
});

describe(`JSON nested deeper than ${MAX_JSON_DEPTH} levels → 400`, () => {
  it('10,000 deep in metadata, in a webhook payload, as the whole body, and on an envelope route: no stack overflow, nothing written', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 10 });
    const owner = await signUp(h);
    await unchangedBy(t, async () => {
      invalid(await raw('POST', '/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), `{"tool_name":"x","metadata":${deep(10_000)}}`), 'metadata');
      invalid(await raw('POST', '/api/v1/mcp/usage', serviceHeaders(h), `{"deployment_id":"${t.deploymentId}","tool_name":"x","metadata":${deep(10_000)}}`), 'metadata');
      const deployment = { 'x-deployment-id': t.deploymentId, 'x-deployment-secret': t.deploymentSecret };
      invalid(await raw('POST', '/api/v1/proxy/webhooks/send', deployment, `{"url":"https://example.com/h","payload":${deep(10_000)}}`), 'payload');
      invalid(await raw('POST', '/api/v1/mcp/stdio/check-entitlement', bearer(t.apiKey), `${'['.repeat(100_000)}${']'.repeat(100_000)}`), 'body');
    });
    const slug = unique('deep').toLowerCase().replace(/[^a-z0-9-]/g, '-');
    expectEnvelope(await raw('POST', '/organizations', bearer(owner.accessToken), `{"name":"D","slug":"${slug}","x":${deep(10_000)}}`), 400, 'VALIDATION_ERROR', 'x');
    expect(await h.deps.db.query('SELECT 1 FROM organizations WHERE slug = $1', [slug])).toHaveLength(0);
  });

  it(`exactly ${MAX_JSON_DEPTH} levels (the body being the first) is accepted and stored; one more is refused`, async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const send = (levels: number) => raw('POST', '/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), `{"tool_name":"x","metadata":${deep(levels)}}`);
    const ok = await send(MAX_JSON_DEPTH - 1);
    expect(ok.statusCode, ok.body).toBe(200);
    const rows = await h.deps.db.query<{ metadata: unknown }>('SELECT metadata FROM usage_records WHERE id = $1', [ok.json().usage_id]);
    expect(rows[0]?.metadata).toEqual(JSON.parse(deep(MAX_JSON_DEPTH - 1)));
    await unchangedBy(t, async () => invalid(await send(MAX_JSON_DEPTH), 'metadata'));
  });
});

describe('defence in depth: what slips past the guard is still not a 500', () => {
  it('a RangeError (stack overflow) is 400', () => {
    expect(toAppError(new RangeError('Maximum call stack size exceeded'))).toMatchObject({ status: 400, code: 'VALIDATION_ERROR' });
  });

  it("the database's own refusals of a value (NUL in text or jsonb, a bad uuid) are 400 without the database's words; a division by zero stays 500", async () => {
    const attempts: Array<[string, unknown]> = [
      ['SELECT $1::text AS v', 'a\u0000b'],
      ['SELECT $1::jsonb AS v', '{"a":"\\u0000"}'],
      ['SELECT $1::jsonb AS v', '{"a":"\\ud800"}'],
      ['SELECT $1::uuid AS v', '-1'],
      // 22009: how both databases read a year past 9999 as toISOString writes it (docs/input.md, Dates).
      ['SELECT $1::timestamptz AS v', '+010000-01-01T00:00:00.000Z'],
    ];
    for (const [sql, value] of attempts) {
      const err = await h.deps.db.query(sql, [value]).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err, sql).not.toBeNull();
      const appError = toAppError(err);
      expect(appError, `${sql}: ${(err as Error).message}`).toMatchObject({ status: 400, code: 'VALIDATION_ERROR' });
      expect(appError.message).not.toMatch(/syntax|uuid|jsonb|byte|escape|sequence/i);
    }
    const divided = await h.deps.db.query('SELECT 1 / 0 AS v').then(
      () => null,
      (e: unknown) => e,
    );
    expect(toAppError(divided).status).toBe(500);
  });
});
