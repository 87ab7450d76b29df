import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createHarness, createTenant, type Harness, json, serviceHeaders, type Tenant } from '../../../test/harness.js';
import { findLedgerMismatches } from '../credits/ledger.js';

/** Limits on input (docs/input.md) on the metering routes: sizes, unknown fields, types without coercion, malformed bodies. Never a 500. */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Headers = Record<string, string>;

const KIB = 1024;
const MIB = 1024 * KIB;

/** A metadata object whose JSON serialization is exactly `bytes` bytes long (ASCII). */
function metadataOfSize(bytes: number): Record<string, string> {
  const overhead = JSON.stringify({ k: '' }).length;
  const value = { k: 'x'.repeat(bytes - overhead) };
  expect(Buffer.byteLength(JSON.stringify(value))).toBe(bytes);
  return value;
}

function send(url: string, headers: Headers, payload: unknown, method: 'POST' | 'GET' = 'POST') {
  return h.request({ method, url, headers, payload: payload as object });
}

function expectInvalid(res: { statusCode: number; body: string }, what: string): Record<string, unknown> {
  expect(res.statusCode, `${what}: ${res.body.slice(0, 300)}`).toBe(400);
  const body = JSON.parse(res.body) as Record<string, unknown>;
  expect(body, what).toMatchObject({ error: 'invalid_request', code: 'INVALID_REQUEST' });
  expect(typeof body.message, what).toBe('string');
  return body;
}

/** Nothing of this tenant was metered: no usage record, no deduction, no hold, no invocation. */
async function expectUntouched(t: Tenant): Promise<void> {
  const db = h.deps.db;
  expect(await db.query('SELECT 1 FROM usage_records WHERE deployment_id = $1', [t.deploymentId])).toHaveLength(0);
  expect(await db.query('SELECT 1 FROM invocations WHERE deployment_id = $1', [t.deploymentId])).toHaveLength(0);
  expect(await db.query("SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind <> 'period_reset'", [t.deploymentId])).toHaveLength(
    0,
  );
  const balance = await db.query('SELECT monthly_used, purchased_balance, reserved FROM credit_balances WHERE deployment_id = $1', [
    t.deploymentId,
  ]);
  expect(balance).toEqual([{ monthly_used: 0, purchased_balance: 0, reserved: 0 }]);
}

/** The two record routes, each with the headers and the body fields it needs. */
function recordRoutes(t: Tenant) {
  return [
    { name: 'stdio record-usage', url: '/api/v1/mcp/stdio/record-usage', headers: bearer(t.apiKey), base: {} as Record<string, unknown> },
    { name: 'service usage', url: '/api/v1/mcp/usage', headers: serviceHeaders(h), base: { deployment_id: t.deploymentId } },
  ];
}

/** Every metering route with a JSON body, with a valid body for it. */
function bodyRoutes(t: Tenant) {
  return [
    ...recordRoutes(t).map((r) => ({ ...r, body: { ...r.base, tool_name: 'x' } })),
    { name: 'stdio check', url: '/api/v1/mcp/stdio/check-entitlement', headers: bearer(t.apiKey), body: { tool_name: 'x' } },
    {
      name: 'service check',
      url: '/api/v1/mcp/check-entitlement',
      headers: serviceHeaders(h),
      body: { deployment_id: t.deploymentId, tool_name: 'x' } as Record<string, unknown>,
    },
  ];
}

describe('metadata ≤ 16 KiB serialized', () => {
  it('over 16 KiB → 400 INVALID_REQUEST naming metadata, and nothing is recorded', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const route of recordRoutes(t)) {
      for (const metadata of [metadataOfSize(16 * KIB + 1), metadataOfSize(64 * KIB), { nested: { deep: metadataOfSize(20 * KIB) } }]) {
        const res = await send(route.url, route.headers, { ...route.base, tool_name: 'x', metadata, invocation_id: 'too-big' });
        const body = expectInvalid(res, route.name);
        const named = JSON.stringify(body.fields ?? []).includes('metadata') || String(body.message).includes('metadata');
        expect(named, `${route.name}: ${res.body}`).toBe(true);
      }
    }
    await expectUntouched(t);
  });

  it('counts bytes, not characters: 8,200 two-byte characters are over the limit', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const metadata = { k: 'é'.repeat(8200) };
    expect(JSON.stringify(metadata).length).toBeLessThan(16 * KIB);
    for (const route of recordRoutes(t)) {
      expectInvalid(await send(route.url, route.headers, { ...route.base, tool_name: 'x', metadata }), route.name);
    }
    await expectUntouched(t);
  });

  it('exactly 16 KiB is accepted and stored as sent', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const metadata = metadataOfSize(16 * KIB);
    for (const route of recordRoutes(t)) {
      const res = await send(route.url, route.headers, { ...route.base, tool_name: 'x', metadata });
      expect(res.statusCode, route.name).toBe(200);
      expect(json(res).success).toBe(true);
      const rows = await h.deps.db.query<{ metadata: unknown }>('SELECT metadata FROM usage_records WHERE id = $1', [json(res).usage_id]);
      expect(rows[0]!.metadata).toEqual(metadata);
    }
  });

  it('arbitrary keys and values inside metadata are fine', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const metadata = {
      'any key': 1,
      tool_name: 'not the field',
      deployment_id: 'neither',
      'ключ': ['ü', null, true, 1.5, { deeper: { deepest: [] } }],
      '': 'empty key',
      $ref: '#/not/a/schema',
    };
    for (const route of recordRoutes(t)) {
      const res = await send(route.url, route.headers, { ...route.base, tool_name: 'x', metadata });
      expect(res.statusCode, `${route.name}: ${res.body}`).toBe(200);
      const rows = await h.deps.db.query<{ metadata: unknown }>('SELECT metadata FROM usage_records WHERE id = $1', [json(res).usage_id]);
      expect(rows[0]!.metadata).toEqual(metadata);
    }
    expect(await findLedgerMismatches(h.deps.db, t.organizationId)).toEqual([]);
  });
});

describe('body ≤ 1 MiB', () => {
  it('a body over 1 MiB → 400 (not 413, not 500) on every route, and nothing is recorded', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const route of bodyRoutes(t)) {
      const payload = JSON.stringify({ ...route.body, metadata: { blob: 'x'.repeat(MIB + 10) } });
      const res = await h.request({
        method: 'POST',
        url: route.url,
        headers: { ...route.headers, 'content-type': 'application/json' },
        payload,
      });
      expectInvalid(res, route.name);
    }
    await expectUntouched(t);
  });
});

describe('unknown fields', () => {
  it('are rejected with 400 naming the field, on every route', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const route of bodyRoutes(t)) {
      for (const extra of [{ extra: 1 }, { toolName: 'x' }, { credits: 0 }, { organization_id: t.organizationId }]) {
        const res = await send(route.url, route.headers, { ...route.body, ...extra });
        const body = expectInvalid(res, `${route.name} ${JSON.stringify(extra)}`);
        expect(JSON.stringify(body), route.name).toContain(Object.keys(extra)[0]!);
      }
    }
    // stdio has no deployment_id and no mcp_user_id.
    for (const extra of [{ deployment_id: t.deploymentId }, { mcp_user_id: 'u' }]) {
      expectInvalid(await send('/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), { tool_name: 'x', ...extra }), JSON.stringify(extra));
    }
    // The check takes no metadata.
    expectInvalid(
      await send('/api/v1/mcp/check-entitlement', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'x', metadata: {} }),
      'check with metadata',
    );
    await expectUntouched(t);
  });

  it('are rejected on release, refund, invocation status and resolve too', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const used = json(await send('/api/v1/mcp/usage', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'x' }));
    expectInvalid(await send('/api/v1/mcp/reservations/any/release', bearer(t.apiKey), { force: true }), 'release');
    expectInvalid(
      await send(`/api/v1/mcp/usage/${used.usage_id}/refund`, serviceHeaders(h), { reason: 'r', amount: 1, credits: 1 }),
      'refund',
    );
    expectInvalid(await h.request({ method: 'GET', url: '/api/v1/mcp/invocations/any?verbose=1', headers: bearer(t.apiKey) }), 'invocation');
    expectInvalid(
      await h.request({ method: 'GET', url: `/api/v1/mcp/resolve-deployment?user_id=${t.userId}&extra=1`, headers: serviceHeaders(h) }),
      'resolve',
    );
    const rows = await h.deps.db.query<{ refunded: number }>('SELECT refunded FROM usage_records WHERE id = $1', [used.usage_id]);
    expect(rows).toEqual([{ refunded: 0 }]);
  });
});

describe('types, without coercion', () => {
  it('wrong types → 400 on the record routes, and nothing is recorded', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const cases: Array<Record<string, unknown>> = [
      { tool_name: 5 },
      { tool_name: null },
      { tool_name: true },
      { tool_name: ['x'] },
      { tool_name: { name: 'x' } },
      { tool_name: '' },
      { tool_name: 'x'.repeat(201) },
      { tool_name: 'x', metadata: [] },
      { tool_name: 'x', metadata: [1, 2] },
      { tool_name: 'x', metadata: 'a string' },
      { tool_name: 'x', metadata: 5 },
      { tool_name: 'x', metadata: true },
      { tool_name: 'x', invocation_id: 5 },
      { tool_name: 'x', invocation_id: null },
      { tool_name: 'x', invocation_id: '' },
      {},
    ];
    for (const route of recordRoutes(t)) {
      for (const body of cases) expectInvalid(await send(route.url, route.headers, { ...route.base, ...body }), `${route.name} ${JSON.stringify(body)}`);
    }
    const serviceOnly: Array<Record<string, unknown>> = [
      { tool_name: 'x', deployment_id: 5 },
      { tool_name: 'x', deployment_id: null },
      { tool_name: 'x', deployment_id: 'd'.repeat(101) },
      { tool_name: 'x' }, // deployment_id missing
      { tool_name: 'x', deployment_id: t.deploymentId, mcp_user_id: 42 },
      { tool_name: 'x', deployment_id: t.deploymentId, mcp_user_id: 'u'.repeat(201) },
      { tool_name: 'x', deployment_id: t.deploymentId, mcp_user_id: { id: 'u' } },
    ];
    for (const body of serviceOnly) expectInvalid(await send('/api/v1/mcp/usage', serviceHeaders(h), body), JSON.stringify(body));
    await expectUntouched(t);
  });

  it('reserve must be a boolean ("true" and 1 are not), and no hold is made', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const reserve of ['true', 1, 'yes', null]) {
      expectInvalid(
        await send('/api/v1/mcp/check-entitlement', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'x', reserve }),
        `service reserve=${JSON.stringify(reserve)}`,
      );
      expectInvalid(
        await send('/api/v1/mcp/stdio/check-entitlement', bearer(t.apiKey), { tool_name: 'x', reserve }),
        `stdio reserve=${JSON.stringify(reserve)}`,
      );
    }
    await expectUntouched(t);
  });

  it('a refund amount must be a positive integer: "5", 1.5, 0, -1 and null are refused and refund nothing', async () => {
    const t = await createTenant(h, { tier: 'launch', purchased: 10 });
    await h.request({ method: 'PUT', url: '/api/v1/admin/tool-actions/input-limits-crew', headers: { 'x-admin-key': h.config.adminApiKey }, payload: { action: 'crew_execute' } });
    const used = json(await send('/api/v1/mcp/usage', serviceHeaders(h), { deployment_id: t.deploymentId, tool_name: 'input-limits-crew' }));
    expect(used).toMatchObject({ success: true, credits_used: 5 });
    const url = `/api/v1/mcp/usage/${used.usage_id}/refund`;
    for (const amount of ['5', '1', 1.5, 0, -1, null, true, [1]]) {
      const body = expectInvalid(await send(url, serviceHeaders(h), { amount, reason: 'r' }), `amount=${JSON.stringify(amount)}`);
      expect(JSON.stringify(body)).toContain('amount');
    }
    for (const body of [{ amount: 1 }, { amount: 1, reason: '' }, { amount: 1, reason: 5 }, { amount: 1, reason: 'r'.repeat(501) }]) {
      expectInvalid(await send(url, serviceHeaders(h), body), JSON.stringify(body).slice(0, 60));
    }
    expectInvalid(await send(url, serviceHeaders(h), { amount: 1, reason: 'r', idempotency_key: 7 }), 'idempotency_key number');
    // docs/input.md: a path id that is not a UUID is 404, like a missing row.
    expect((await send('/api/v1/mcp/usage/not-a-uuid/refund', serviceHeaders(h), { reason: 'r' })).statusCode).toBe(404);
    const rows = await h.deps.db.query<{ refunded: number }>('SELECT refunded FROM usage_records WHERE id = $1', [used.usage_id]);
    expect(rows).toEqual([{ refunded: 0 }]);
    expect(await h.deps.db.query("SELECT 1 FROM credit_ledger WHERE deployment_id = $1 AND kind = 'refund'", [t.deploymentId])).toHaveLength(0);
    // The integer itself is accepted.
    expect((await send(url, serviceHeaders(h), { amount: 5, reason: 'r' })).statusCode).toBe(200);
  });
});

describe('invocation ids', () => {
  it('an invocation_id over 200 characters → 400; 200 is accepted', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const route of recordRoutes(t)) {
      expectInvalid(await send(route.url, route.headers, { ...route.base, tool_name: 'x', invocation_id: 'i'.repeat(201) }), route.name);
    }
    expectInvalid(
      await send('/api/v1/mcp/check-entitlement', serviceHeaders(h), {
        deployment_id: t.deploymentId,
        tool_name: 'x',
        reserve: true,
        invocation_id: 'i'.repeat(201),
      }),
      'check',
    );
    expectInvalid(await send('/api/v1/mcp/stdio/record-usage', { ...bearer(t.apiKey), 'idempotency-key': 'k'.repeat(201) }, { tool_name: 'x' }), 'header');
    await expectUntouched(t);
    const ok = await send('/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), { tool_name: 'x', invocation_id: 'i'.repeat(200) });
    expect(ok.statusCode).toBe(200);
    expect(json(ok)).toMatchObject({ success: true, invocation_id: 'i'.repeat(200) });
  });

  it('an invocation_id over 200 characters in the path → 400 INVALID_REQUEST with the flat body', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    expectInvalid(await h.request({ method: 'GET', url: `/api/v1/mcp/invocations/${'i'.repeat(201)}`, headers: bearer(t.apiKey) }), 'status');
    expectInvalid(await send(`/api/v1/mcp/reservations/${'i'.repeat(201)}/release`, bearer(t.apiKey), {}), 'release');
  });

  it('every invocation_id the body accepts (up to 200 characters) can be read and released by path', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const length of [100, 101, 150, 200]) {
      const reserved = 'r'.repeat(length);
      const held = await send('/api/v1/mcp/stdio/check-entitlement', bearer(t.apiKey), { tool_name: 'x', reserve: true, invocation_id: reserved });
      expect(json(held), `reserve ${length}`).toMatchObject({ allowed: true, invocation_id: reserved });
      const status = await h.request({ method: 'GET', url: `/api/v1/mcp/invocations/${reserved}`, headers: bearer(t.apiKey) });
      expect(status.statusCode, `status ${length}: ${status.body.slice(0, 120)}`).toBe(200);
      expect(json(status)).toMatchObject({ invocation_id: reserved, status: 'reserved' });
      const release = await send(`/api/v1/mcp/reservations/${reserved}/release`, bearer(t.apiKey), {});
      expect(release.statusCode, `release ${length}: ${release.body.slice(0, 120)}`).toBe(200);
      expect(json(release)).toMatchObject({ invocation_id: reserved, status: 'released', released_credits: 1 });
    }
  });

  it('an Idempotency-Key header differing from the body invocation_id → 400; the same value is fine', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const routes = [
      ...recordRoutes(t).map((r) => ({ ...r, body: { ...r.base, tool_name: 'x' } as Record<string, unknown> })),
      {
        name: 'service check with reserve',
        url: '/api/v1/mcp/check-entitlement',
        headers: serviceHeaders(h),
        body: { deployment_id: t.deploymentId, tool_name: 'x', reserve: true } as Record<string, unknown>,
      },
      {
        name: 'stdio check with reserve',
        url: '/api/v1/mcp/stdio/check-entitlement',
        headers: bearer(t.apiKey),
        body: { tool_name: 'x', reserve: true } as Record<string, unknown>,
      },
    ];
    for (const route of routes) {
      const res = await send(route.url, { ...route.headers, 'idempotency-key': 'header-id' }, { ...route.body, invocation_id: 'body-id' });
      const body = expectInvalid(res, route.name);
      expect(JSON.stringify(body)).toMatch(/invocation_id|Idempotency-Key/i);
    }
    await expectUntouched(t);
    const same = await send('/api/v1/mcp/usage', { ...serviceHeaders(h), 'idempotency-key': 'same-id' }, {
      deployment_id: t.deploymentId,
      tool_name: 'x',
      invocation_id: 'same-id',
    });
    expect(same.statusCode).toBe(200);
    expect(json(same)).toMatchObject({ success: true, invocation_id: 'same-id' });
  });
});

describe('malformed bodies', () => {
  it('malformed JSON, an empty JSON body and a JSON non-object → 400 with the flat body', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    for (const route of bodyRoutes(t)) {
      for (const payload of ['{"tool_name":', '{tool_name: "x"}', "{'tool_name':'x'}", '', 'null', '[]', '"x"', '42', '{"a":1}{"b":2}']) {
        const res = await h.request({
          method: 'POST',
          url: route.url,
          headers: { ...route.headers, 'content-type': 'application/json' },
          payload,
        });
        expectInvalid(res, `${route.name} ${JSON.stringify(payload)}`);
      }
    }
    await expectUntouched(t);
  });

  it('a wrong content type → 400 or 415 with the flat body, never 500', async () => {
    const t = await createTenant(h, { tier: 'launch' });
    const cases: Array<[string, string]> = [
      ['text/plain', JSON.stringify({ tool_name: 'x' })],
      ['application/x-www-form-urlencoded', 'tool_name=x'],
      ['multipart/form-data; boundary=zzz', '--zzz\r\nContent-Disposition: form-data; name="tool_name"\r\n\r\nx\r\n--zzz--\r\n'],
      ['application/xml', '<tool_name>x</tool_name>'],
      ['application/octet-stream', 'tool_name'],
    ];
    for (const route of bodyRoutes(t)) {
      for (const [contentType, payload] of cases) {
        const res = await h.request({ method: 'POST', url: route.url, headers: { ...route.headers, 'content-type': contentType }, payload });
        expect([400, 415], `${route.name} ${contentType}: ${res.statusCode} ${res.body}`).toContain(res.statusCode);
        const body = json(res);
        expect(typeof body.error).toBe('string');
        expect(typeof body.code).toBe('string');
        expect(typeof body.message).toBe('string');
        expect(body).not.toHaveProperty('success');
      }
    }
    await expectUntouched(t);
  });
});
