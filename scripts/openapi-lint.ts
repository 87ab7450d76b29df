/**
 * Lints the service's OpenAPI document with Redocly (`recommended`) and Spectral (`spectral:oas`),
 * using the committed configuration in openapi/. `npm run lint:openapi` prints the findings;
 * test/openapi-lint.test.ts holds the suite to zero errors and zero warnings.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { serviceOpenApiDocument } from './client-types.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const bin = (name: string) => join(root, 'node_modules', '.bin', name);

export interface Finding {
  linter: 'redocly' | 'spectral';
  severity: 'error' | 'warning' | 'info' | 'hint';
  rule: string;
  where: string;
  message: string;
}

/** Both linters' findings for `document` (written to a scratch directory beside the configuration). */
export async function lintOpenApi(document: unknown): Promise<{ findings: Finding[]; ignored: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'creditgate-openapi-'));
  try {
    await writeFile(join(dir, 'openapi.json'), JSON.stringify(document, null, 2));
    for (const file of ['redocly.yaml', '.redocly.lint-ignore.yaml', '.spectral.yaml']) await copyFile(join(root, 'openapi', file), join(dir, file));
    const findings: Finding[] = [];
    // Both exit non-zero when they find something: the JSON on stdout is the answer either way.
    const redocly = await run(bin('redocly'), ['lint', 'openapi.json', '--format=json'], { cwd: dir, maxBuffer: 64 << 20 }).catch((e) => e);
    const r = JSON.parse(redocly.stdout) as {
      totals: { ignored: number };
      problems: Array<{ ruleId: string; severity: string; message: string; location: Array<{ pointer: string }> }>;
    };
    for (const p of r.problems) {
      findings.push({ linter: 'redocly', severity: p.severity as Finding['severity'], rule: p.ruleId, where: p.location[0]?.pointer ?? '', message: p.message });
    }
    const spectral = await run(bin('spectral'), ['lint', 'openapi.json', '--format', 'json', '--quiet'], { cwd: dir, maxBuffer: 64 << 20 }).catch((e) => e);
    const SEVERITY = ['error', 'warning', 'info', 'hint'] as const;
    const s = JSON.parse(spectral.stdout || '[]') as Array<{ code: string; severity: number; message: string; path: string[] }>;
    for (const p of s) findings.push({ linter: 'spectral', severity: SEVERITY[p.severity] ?? 'error', rule: p.code, where: p.path.join('.'), message: p.message });
    return { findings, ignored: r.totals.ignored };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { findings, ignored } = await lintOpenApi(await serviceOpenApiDocument());
  for (const f of findings) console.log(`${f.linter} ${f.severity} ${f.rule} ${f.where}: ${f.message}`);
  console.log(`${findings.length} findings (${ignored} ignored by openapi/.redocly.lint-ignore.yaml)`);
  process.exitCode = findings.length > 0 ? 1 : 0;
}
