import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLIENT_TYPES_PATH, CONSOLE_TYPES_PATH, clientTypesSource, isClientPath } from '../scripts/client-types.js';
import { createHarness, type Harness } from './harness.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(async () => {
  await h.close();
});

/**
 * The client SDK's types are generated from this service's OpenAPI document. A route that changes
 * shape changes the document; this test then fails until `npm run generate:client` is run, after
 * which `tsc` checks the client's code against the new types.
 */
describe('client SDK types (packages/client/src/generated/openapi.ts)', () => {
  it('match what the routes say today', async () => {
    const document = h.app.swagger() as unknown as { paths: Record<string, unknown> };
    const expected = await clientTypesSource(document);
    const committed = await readFile(CLIENT_TYPES_PATH, 'utf8');
    expect(committed === expected, 'the client types are stale: run `npm run generate:client` and fix what tsc reports').toBe(true);
  });

  it("and the console's types (console/src/generated/openapi.ts), every route, match them too", async () => {
    const document = h.app.swagger() as unknown as { paths: Record<string, unknown> };
    const expected = await clientTypesSource(document, () => true);
    const committed = await readFile(CONSOLE_TYPES_PATH, 'utf8');
    expect(committed === expected, 'the console types are stale: run `npm run generate:client` and fix what tsc reports').toBe(true);
  });

  it('cover every versioned route except the operator API, and the budgets and auto top-up of the application API', () => {
    const document = h.app.swagger() as unknown as { paths: Record<string, unknown> };
    const covered = Object.keys(document.paths).filter(isClientPath);
    expect(covered).toEqual(expect.arrayContaining(['/api/v1/mcp/stdio/check-entitlement', '/api/v1/proxy/webhooks/send', '/api/v1/ai/quota']));
    expect(covered.some((p) => p.startsWith('/api/v1/admin'))).toBe(false);
    expect(covered.filter((p) => !p.startsWith('/api/v1/')).sort()).toEqual(['/organizations/{id}/auto-top-up', '/organizations/{id}/budgets', '/organizations/{id}/budgets/{budgetId}']);
  });
});
