import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, type Harness } from '../../../test/harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

describe('GET /', () => {
  it('sends a browser to the API reference at /docs', async () => {
    const res = await h.request({ method: 'GET', url: '/' });
    expect(res.statusCode).toBe(302);
    expect(res.headers.location).toBe('/docs');
    expect(h.app.routeList).toContainEqual(expect.objectContaining({ method: 'GET', url: '/', hidden: true }));
  });
});
