import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, bearer, createHarness, createTenant, type Harness, json, serviceHeaders, unique } from '../../../test/harness.js';

/** GET /api/v1/mcp/credit-costs: the price list with its tool map and ETag (docs/metering.md, Prices up front). */
let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

interface PriceList {
  costs: Array<{ action: string; credits: number; description: string | null }>;
  tools: Array<{ tool_name: string; action: string }>;
}

const costs = (headers: Record<string, string>) => h.request({ method: 'GET', url: '/api/v1/mcp/credit-costs', headers });

async function admin(method: 'PUT' | 'DELETE', url: string, payload?: Record<string, unknown>): Promise<void> {
  const res = await h.request({ method, url, headers: adminHeaders(h), ...(payload ? { payload } : {}) });
  expect(res.statusCode, `${method} ${url}: ${res.body}`).toBeLessThan(300);
}

const action = (prefix: string) => unique(prefix).toLowerCase();

describe('GET /api/v1/mcp/credit-costs', () => {
  it('lists the tool → action map beside the costs, each in order, with a strong ETag', async () => {
    const tool = unique('priced-tool');
    await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action: 'task_advanced' });
    const res = await costs(serviceHeaders(h));
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers.etag).toMatch(/^"[A-Za-z0-9_-]{16,}"$/);
    const body = json<PriceList>(res);
    expect(Object.keys(body).sort()).toEqual(['costs', 'tools']);
    expect(body.tools).toContainEqual({ tool_name: tool, action: 'task_advanced' });
    for (const entry of body.tools) expect(Object.keys(entry).sort()).toEqual(['action', 'tool_name']);
    const names = body.tools.map((t) => t.tool_name);
    expect(names).toEqual([...names].sort());
    expect(body.costs).toContainEqual({ action: 'platform_basic', credits: 1, description: null });
    // Every mapping names a listed action, so a client can price any tool from this one answer.
    const actions = new Set(body.costs.map((c) => c.action));
    for (const t of body.tools) expect(actions.has(t.action), t.action).toBe(true);
  });

  it('answers an API key with read, and the service key, the same list and ETag; refuses a key without read and no key', async () => {
    const reader = await createTenant(h, { scopes: ['read'] });
    const writer = await createTenant(h, { scopes: ['write'] });
    const byService = await costs(serviceHeaders(h));
    const byKey = await costs(bearer(reader.apiKey));
    expect(byKey.statusCode, byKey.body).toBe(200);
    expect(byKey.headers.etag).toBe(byService.headers.etag);
    expect(json(byKey)).toEqual(json(byService));

    const noRead = await costs(bearer(writer.apiKey));
    expect(noRead.statusCode, noRead.body).toBe(403);
    expect(json(noRead)).toMatchObject({ error: 'forbidden', code: 'INSUFFICIENT_SCOPE' });
    for (const headers of [{}, { 'x-mcp-service-key': 'wrong-service-key-0123456789' }, bearer(`cg_${'A'.repeat(36)}`)]) {
      const res = await costs(headers);
      expect(res.statusCode, res.body).toBe(401);
      expect(res.headers.etag).toBeUndefined();
    }
  });

  it('answers 304 without a body to If-None-Match naming the current ETag, with either credential', async () => {
    const reader = await createTenant(h, { scopes: ['read'] });
    const first = await costs(serviceHeaders(h));
    const etag = String(first.headers.etag);
    for (const headers of [serviceHeaders(h), bearer(reader.apiKey)]) {
      const res = await costs({ ...headers, 'if-none-match': etag });
      expect(res.statusCode, res.body).toBe(304);
      expect(res.body).toBe('');
      expect(res.rawPayload.length).toBe(0);
      expect(res.headers.etag).toBe(etag);
      expect(res.headers['content-length'] ?? '0').toBe('0');
    }
    // A list of tags, a weak form of the tag (a proxy's), and * match too.
    for (const ifNoneMatch of [`"elsewhere", ${etag}`, `W/${etag}`, '*']) {
      expect((await costs({ ...serviceHeaders(h), 'if-none-match': ifNoneMatch })).statusCode, ifNoneMatch).toBe(304);
    }
    // Another tag gets the whole list.
    const other = await costs({ ...serviceHeaders(h), 'if-none-match': '"not-this-one"' });
    expect(other.statusCode).toBe(200);
    expect(json<PriceList>(other).costs.length).toBeGreaterThanOrEqual(10);
  });

  it("the operator's change of a cost, a new mapping and a removed one each give a new ETag; the old one gets the new list", async () => {
    const priced = action('etag');
    const tool = unique('etag-tool');
    const read = async () => {
      const res = await costs(serviceHeaders(h));
      expect(res.statusCode).toBe(200);
      return { etag: String(res.headers.etag), list: json<PriceList>(res) };
    };
    await admin('PUT', `/api/v1/admin/credit-costs/${priced}`, { credits: 4 });
    const before = await read();
    expect((await read()).etag).toBe(before.etag);

    await admin('PUT', `/api/v1/admin/credit-costs/${priced}`, { credits: 6 });
    const changed = await costs({ ...serviceHeaders(h), 'if-none-match': before.etag });
    expect(changed.statusCode, 'the old ETag no longer matches').toBe(200);
    expect(changed.headers.etag).not.toBe(before.etag);
    expect(json<PriceList>(changed).costs).toContainEqual({ action: priced, credits: 6, description: null });
    expect((await costs({ ...serviceHeaders(h), 'if-none-match': String(changed.headers.etag) })).statusCode).toBe(304);

    await admin('PUT', `/api/v1/admin/tool-actions/${tool}`, { action: priced });
    const mapped = await read();
    expect(mapped.list.tools).toContainEqual({ tool_name: tool, action: priced });
    expect(mapped.etag).not.toBe(changed.headers.etag);

    await admin('DELETE', `/api/v1/admin/tool-actions/${tool}`);
    const unmapped = await read();
    expect(unmapped.list.tools.map((t) => t.tool_name)).not.toContain(tool);
    expect(unmapped.etag).not.toBe(mapped.etag);

    // The tag is the content's: setting a cost to what it already is gives the same tag back, unless
    // another test of the run changed the shared table in between (then the lists differ too).
    await admin('PUT', `/api/v1/admin/credit-costs/${priced}`, { credits: 6 });
    const again = await read();
    expect(again.etag === unmapped.etag).toBe(JSON.stringify(again.list) === JSON.stringify(unmapped.list));
    expect(again.etag === changed.headers.etag).toBe(JSON.stringify(again.list) === changed.body);
  });

  it('is in /openapi.json with both credentials, the If-None-Match header, the ETag and the 304', async () => {
    const doc = json<{ paths: Record<string, { get: Record<string, unknown> }>; components: { schemas: Record<string, { properties: Record<string, unknown>; required: string[] }> } }>(
      await h.request({ method: 'GET', url: '/openapi.json' }),
    );
    const op = doc.paths['/api/v1/mcp/credit-costs']!.get as {
      security: Array<Record<string, unknown>>;
      parameters: Array<{ in: string; name: string }>;
      responses: Record<string, { description: string; headers?: Record<string, unknown>; content?: unknown }>;
    };
    expect(op.security).toEqual(expect.arrayContaining([{ apiKey: [] }, { serviceKey: [] }]));
    expect(op.parameters).toContainEqual(expect.objectContaining({ in: 'header', name: 'if-none-match' }));
    expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['200', '304', '401', '403']));
    expect(op.responses['200']!.headers).toHaveProperty('ETag');
    expect(op.responses['304']!.headers).toHaveProperty('ETag');
    expect(op.responses['304']!.content).toBeUndefined();
    const reply = doc.components.schemas.CreditCosts!;
    expect(reply.required).toEqual(expect.arrayContaining(['costs', 'tools']));
  });
});
