import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness } from './harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

type Operation = { responses?: Record<string, unknown>; summary?: string };

describe('GET /openapi.json', () => {
  it('is OpenAPI 3.1 and lists every route with a summary and its error responses', async () => {
    const res = await h.request({ method: 'GET', url: '/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json() as { openapi: string; paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, unknown> } };
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

  it('renders the document at /docs', async () => {
    const res = await h.request({ method: 'GET', url: '/docs/' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('swagger');
  });
});
