import { describe, expect, it } from 'vitest';
import { serviceOpenApiDocument } from '../scripts/client-types.js';
import { lintOpenApi } from '../scripts/openapi-lint.js';

/**
 * docs/openapi.md, Lint: the document lints clean with tools nobody here wrote — Redocly `recommended` and Spectral
 * `spectral:oas` — under the committed configuration in openapi/ (each rule turned off or finding
 * ignored there says why).
 */
describe('the OpenAPI document under Redocly and Spectral', () => {
  it('has zero errors and zero warnings', async () => {
    const { findings, ignored } = await lintOpenApi(await serviceOpenApiDocument());
    expect(findings.map((f) => `${f.linter} ${f.severity} ${f.rule} ${f.where}: ${f.message}`)).toEqual([]);
    // openapi/.redocly.lint-ignore.yaml ignores nothing now: every operation lists its 400 (docs/input.md).
    expect(ignored).toBe(0);
  }, 120_000);

  it('the linters do find problems (an operation without an operationId, under an undeclared tag)', async () => {
    const document = {
      openapi: '3.1.0',
      info: { title: 'x', version: '1', license: { name: 'Apache-2.0', identifier: 'Apache-2.0' } },
      servers: [{ url: 'http://127.0.0.1' }],
      paths: { '/x': { get: { tags: ['Undeclared'], summary: 'x', security: [], responses: { '200': { description: 'ok' }, '400': { description: 'no' } } } } },
    };
    const rules = (await lintOpenApi(document)).findings.map((f) => `${f.linter} ${f.rule}`);
    expect(rules).toEqual(expect.arrayContaining(['redocly operation-operationId', 'spectral operation-operationId', 'spectral operation-tag-defined']));
  }, 120_000);
});
