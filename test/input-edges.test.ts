import { Writable } from 'node:stream';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, serviceHeaders, signUpWithOrganization, type Tenant } from './harness.js';
import { buildApp } from '../src/app.js';

/**
 * Input at the edges the schemas and the input guard leave to the runtime (docs/input.md): each is a
 * 400 naming what is wrong, answered by the check meant for it (not by the error handler's safety
 * net, which logs "input the input guard should have refused"), with nothing written.
 */
let h: Harness;
let t: Tenant;
let app: FastifyInstance;
/** What the app logged at warn and above. */
const logs = { text: '' };
beforeAll(async () => {
  const stream = new Writable({
    write(chunk, _encoding, done) {
      logs.text += chunk.toString();
      done();
    },
  });
  h = await createHarness();
  // The same service with its warnings written where the test reads them.
  app = await buildApp({ config: { ...h.config, logLevel: 'warn' }, db: h.deps.db, clock: h.clock, logStream: stream });
  await app.ready();
  t = await createTenant(h, { tier: 'growth' });
});
afterAll(async () => {
  await app.close();
  await h.close();
});
const request = (options: InjectOptions) => app.inject(options);

/** The safety net's warning was logged while `fn` ran. */
async function safetyNet(fn: () => Promise<unknown>): Promise<boolean> {
  const at = logs.text.length;
  await fn();
  return /should have refused/.test(logs.text.slice(at));
}

type Fields = { fields?: Array<{ field: string; message: string }>; details?: { fields?: Array<{ field: string; message: string }> }; message?: string };
const fieldsOf = (body: Fields) => body.fields ?? body.details?.fields ?? [];

describe('bodies', () => {
  it('a body over 1 MiB is refused as too large, by the size check', async () => {
    let res: Awaited<ReturnType<typeof request>> | undefined;
    const net = await safetyNet(async () => {
      res = await request({
        method: 'POST',
        url: '/api/v1/admin/organizations',
        headers: { ...adminHeaders(h), 'content-type': 'application/json' },
        payload: JSON.stringify({ a: 'x'.repeat(1024 * 1024) }),
      });
    });
    expect(res!.statusCode).toBe(400);
    expect(json<Fields>(res!)).toMatchObject({ message: 'The request body is larger than 1 MiB' });
    expect(fieldsOf(json<Fields>(res!))).toEqual([{ field: 'body', message: 'is too large' }]);
    expect(net).toBe(false);
  });

  it('a JSON body that is not UTF-8 is refused, not stored with U+FFFD', async () => {
    const owner = await signUpWithOrganization(h, 'utf8');
    const read = async () => json<{ data: { name: string } }>(await request({ method: 'GET', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken) })).data.name;
    const before = await read();
    // {"name":"<bytes>"}: an overlong NUL, a lone Latin-1 byte, an encoded surrogate.
    for (const bad of [[0xc0, 0x80], [0xe9], [0xed, 0xa0, 0x80]]) {
      const payload = Buffer.concat([Buffer.from('{"name":"ab'), Buffer.from(bad), Buffer.from('"}')]);
      const res = await request({ method: 'PUT', url: `/organizations/${owner.organizationId}`, headers: { ...bearer(owner.accessToken), 'content-type': 'application/json' }, payload });
      expect(res.statusCode, res.body).toBe(400);
      expect(fieldsOf(json<Fields>(res))).toEqual([{ field: 'body', message: 'is not valid UTF-8' }]);
    }
    expect(await read()).toBe(before);
    // UTF-8 itself is read as before.
    const ok = await request({ method: 'PUT', url: `/organizations/${owner.organizationId}`, headers: bearer(owner.accessToken), payload: { name: 'Café ✓' } });
    expect(ok.statusCode, ok.body).toBe(200);
    expect(await read()).toBe('Café ✓');
  });

  it('a __proto__ key is refused as such, not as JSON that does not parse', async () => {
    const res = await request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: { ...serviceHeaders(h), 'content-type': 'application/json' },
      payload: `{"deployment_id":"${t.deploymentId}","tool_name":"x","__proto__":{"admin":true}}`,
    });
    expect(res.statusCode).toBe(400);
    expect(json<Fields>(res).message).toMatch(/__proto__/);
    const broken = await request({ method: 'POST', url: '/api/v1/mcp/usage', headers: { ...serviceHeaders(h), 'content-type': 'application/json' }, payload: '{"a":' });
    expect(json<Fields>(broken).message).toBe('The body is not valid JSON');
  });
});

describe('values the runtime or the database cannot hold', () => {
  it('a leap second in a date-time is 400 naming the field, nothing written', async () => {
    const owner = await signUpWithOrganization(h, 'leap');
    const keys = async () => (await h.deps.db.query('SELECT id FROM api_keys WHERE organization_id = $1', [owner.organizationId])).length;
    const before = await keys();
    let res: Awaited<ReturnType<typeof request>> | undefined;
    const net = await safetyNet(async () => {
      res = await request({
        method: 'POST',
        url: `/organizations/${owner.organizationId}/api-keys`,
        headers: bearer(owner.accessToken),
        payload: { name: 'k', expires_at: '2027-12-31T23:59:60Z' },
      });
    });
    expect(res!.statusCode).toBe(400);
    expect(fieldsOf(json<Fields>(res!)).map((f) => f.field)).toEqual(['expires_at']);
    expect(net).toBe(false);
    expect(await keys()).toBe(before);
  });

  it('an api_rate_limit override past a 32-bit integer is refused by the schema, naming it', async () => {
    let res: Awaited<ReturnType<typeof request>> | undefined;
    const net = await safetyNet(async () => {
      res = await request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload: { api_rate_limit: 2_147_483_648 } });
    });
    expect(res!.statusCode).toBe(400);
    expect(fieldsOf(json<Fields>(res!)).map((f) => f.field)).toEqual(['api_rate_limit']);
    expect(net).toBe(false);
    const max = await request({ method: 'PUT', url: `/api/v1/admin/deployments/${t.deploymentId}/overrides`, headers: adminHeaders(h), payload: { api_rate_limit: 2_147_483_647 } });
    expect(max.statusCode, max.body).toBe(200);
  });
});

describe('headers that name one thing', () => {
  it('two Idempotency-Key headers are refused, not joined into one key "a, b"', async () => {
    const res = await request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: { ...serviceHeaders(h), 'idempotency-key': ['in-a', 'in-b'] as unknown as string },
      payload: { deployment_id: t.deploymentId, tool_name: 'x' },
    });
    expect(res.statusCode).toBe(400);
    expect(fieldsOf(json<Fields>(res))).toEqual([{ field: 'Idempotency-Key', message: 'is sent more than once' }]);
    const records = await h.deps.db.query("SELECT id FROM usage_records WHERE deployment_id = $1 AND invocation_id LIKE 'in-%'", [t.deploymentId]);
    expect(records).toHaveLength(0);
  });

  it('two X-End-User-Id headers are refused', async () => {
    const res = await request({
      method: 'POST',
      url: '/api/v1/mcp/usage',
      headers: { ...serviceHeaders(h), 'x-end-user-id': ['ann', 'bob'] as unknown as string },
      payload: { deployment_id: t.deploymentId, tool_name: 'x' },
    });
    expect(res.statusCode).toBe(400);
    expect(fieldsOf(json<Fields>(res))).toEqual([{ field: 'X-End-User-Id', message: 'is sent more than once' }]);
  });
});

describe('the OpenAPI document', () => {
  it('every operation lists a 400: the input guard and the body parser answer every route', async () => {
    const doc = json<{ paths: Record<string, Record<string, { responses?: Record<string, unknown> }>> }>(await request({ method: 'GET', url: '/openapi.json' }));
    const missing: string[] = [];
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (operation.responses && !operation.responses['400']) missing.push(`${method.toUpperCase()} ${path}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
