import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_DATA } from '../src/http/openapi-events.js';
import { EVENT_TYPES, TEST_EVENT_TYPE } from '../src/modules/webhooks/organization.js';
import { createHarness, type Harness } from './harness.js';

let h: Harness;
let doc: Document;
beforeAll(async () => {
  h = await createHarness();
  const res = await h.request({ method: 'GET', url: '/openapi.json' });
  expect(res.statusCode).toBe(200);
  doc = res.json() as Document;
});
afterAll(async () => {
  await h.close();
});

type Answer = { description?: string; headers?: Record<string, { $ref?: string }> };
type Operation = {
  responses?: Record<string, Answer>;
  summary?: string;
  operationId?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: Array<{ in: string; name: string }>;
};
type Document = {
  openapi: string;
  info: { license?: { name: string }; contact?: unknown; version: string };
  tags: Array<{ name: string; description: string }>;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, unknown>; headers: Record<string, unknown> };
  webhooks: Record<string, { post: { requestBody: unknown } }>;
};

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];
const operations = () =>
  Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => ({ path, method, op: item[method] as Operation })),
  );

describe('GET /openapi.json', () => {
  it('is OpenAPI 3.1 and lists every route with a summary and its error responses', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const routes = h.app.routeList.filter((r) => !r.hidden && !r.url.startsWith('/docs'));
    expect(routes.length).toBeGreaterThan(15);
    for (const route of routes) {
      const path = route.url.replace(/:([A-Za-z_]+)/g, '{$1}');
      const op = doc.paths[path]?.[route.method.toLowerCase()];
      expect(op, `${route.method} ${route.url} missing from the document`).toBeDefined();
      expect(op!.summary, `${route.method} ${route.url} has no summary`).toBeTruthy();
      const statuses = Object.keys(op!.responses ?? {});
      expect(statuses.some((s) => s.startsWith('2')), `${route.method} ${route.url}: no success response`).toBe(true);
      if (route.url.startsWith('/api/')) {
        expect(statuses, `${route.method} ${route.url}: errors not listed`).toEqual(expect.arrayContaining(['500', '503']));
        expect(statuses.some((s) => s.startsWith('4')), `${route.method} ${route.url}: no 4xx listed`).toBe(true);
      }
    }
    expect(doc.components.schemas).toHaveProperty('FlatError');
  });

  it('gives generators what they need: a unique operationId, a declared tag, security and a described answer on every operation', () => {
    const declared = new Set(doc.tags.map((t) => t.name));
    const ids = new Set<string>();
    for (const { path, method, op } of operations()) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(op.operationId, `${where}: no operationId`).toMatch(/^[a-z][A-Za-z]+$/);
      expect(ids.has(op.operationId!), `${where}: operationId ${op.operationId} is taken`).toBe(false);
      ids.add(op.operationId!);
      expect(op.tags?.length, `${where}: no tag`).toBeGreaterThan(0);
      for (const tag of op.tags ?? []) expect(declared.has(tag), `${where}: tag ${tag} is not declared`).toBe(true);
      expect(Array.isArray(op.security), `${where}: no security (public operations say security: [])`).toBe(true);
      for (const [status, answer] of Object.entries(op.responses ?? {})) {
        expect(answer.description, `${where} ${status}: no description`).toBeTruthy();
        expect(answer.description, `${where} ${status}`).not.toBe('Default Response');
      }
    }
    expect(doc.info.license?.name).toBe('Apache-2.0');
    expect(doc.info.contact).toBeDefined();
  });

  it('public operations say so with security: []', () => {
    for (const [path, method] of [
      ['/healthz', 'get'],
      ['/auth/login', 'post'],
      ['/webhooks/stripe', 'post'],
    ] as const) {
      expect(doc.paths[path]?.[method]?.security, `${method} ${path}`).toEqual([]);
    }
    expect(doc.paths['/api/v1/mcp/usage']?.post?.security).toEqual([{ serviceKey: [] }]);
  });

  it('a closed set of strings is an enum, never anyOf of constants', () => {
    const unions: string[] = [];
    const walk = (node: unknown, path: string): void => {
      if (!node || typeof node !== 'object') return;
      const anyOf = (node as { anyOf?: Array<{ const?: unknown }> }).anyOf;
      if (anyOf && anyOf.filter((b) => b.const !== undefined).length > 1) unions.push(path);
      for (const [k, v] of Object.entries(node)) walk(v, `${path}/${k}`);
    };
    walk(doc, '');
    expect(unions).toEqual([]);
    const tier = JSON.stringify(doc).match(/"enum":\["sandbox","trial","launch","growth","enterprise"\]/);
    expect(tier).not.toBeNull();
  });

  it('shapes that recur are named component schemas, referenced where they are used', () => {
    for (const name of ['UsageRecorded', 'Deployment', 'Organization', 'OrganizationEnvelope', 'ApiKey', 'WebhookDelivery', 'CreditBalance', 'PageMeta']) {
      expect(doc.components.schemas, name).toHaveProperty(name);
    }
    const recorded = doc.paths['/api/v1/mcp/usage']?.post?.responses?.['200'] as { content: Record<string, { schema: unknown }> };
    expect(recorded.content['application/json']?.schema).toEqual({ $ref: '#/components/schemas/UsageRecorded' });
  });

  it('declares the headers: Idempotency-Key in, Retry-After, rate limits and Idempotent-Replayed out', () => {
    const usage = doc.paths['/api/v1/mcp/usage']!.post!;
    expect(usage.parameters).toEqual(expect.arrayContaining([expect.objectContaining({ in: 'header', name: 'Idempotency-Key' })]));
    const ok = usage.responses!['200']!.headers!;
    expect(Object.keys(ok)).toEqual(expect.arrayContaining(['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit', 'RateLimit-Policy', 'Idempotent-Replayed']));
    expect(ok['Idempotent-Replayed']).toEqual({ $ref: '#/components/headers/Idempotent-Replayed' });
    expect(usage.responses!['429']!.headers).toHaveProperty('Retry-After');
    expect(doc.components.headers).toHaveProperty('Retry-After');
    // The application API is limited per hour: its answers carry the same headers.
    expect(doc.paths['/organizations']!.get!.responses!['200']!.headers).toHaveProperty('RateLimit');
    // The operator API is not rate limited.
    expect(doc.paths['/api/v1/admin/deployments']!.get!.responses!['200']!.headers).toBeUndefined();
  });

  it('the events organization webhooks receive are the webhooks section', () => {
    // The subscribable events and the test send's webhook.test.
    expect(Object.keys(doc.webhooks).sort()).toEqual([...EVENT_TYPES, TEST_EVENT_TYPE].sort());
    expect(Object.keys(EVENT_DATA).sort()).toEqual([...EVENT_TYPES, TEST_EVENT_TYPE].sort());
    expect(JSON.stringify(doc.webhooks['quota.threshold'])).toContain('#/components/schemas/QuotaThresholdEvent');
    expect(JSON.stringify(doc.components.schemas.QuotaThresholdEvent)).toContain('#/components/schemas/QuotaThresholdData');
  });

  it('renders the document at /docs, under its own name', async () => {
    const res = await h.request({ method: 'GET', url: '/docs/' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('creditgate API');
  });
});
