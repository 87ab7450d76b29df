import { type Dirent, readdirSync, readFileSync } from 'node:fs';
import { extname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Code cites what a reader can open (CONTRIBUTING.md, "Citing rules"): a rule is referred to by its
 * place in docs/, never by a section of the contract document that is not in the repository nor by
 * the number of an issue. This test fails on either kind of reference in the source files of src/,
 * packages/, console/ and test/.
 */
const ROOT = join(import.meta.dirname, '..');
const DIRS = ['src', 'packages', 'console', 'test'];
const SOURCE_EXTENSIONS = new Set(['.ts', '.tsx', '.mts', '.cts', '.js', '.mjs', '.cjs', '.py', '.html', '.css']);
/** Build output, dependencies and tool caches: not written by hand. */
const SKIPPED_DIRS = new Set(['node_modules', 'dist', 'build', '__pycache__', '.venv', 'venv', '.pytest_cache', '.mypy_cache', '.ruff_cache']);

/**
 * The two references. Written with escapes and character classes so that this file does not match
 * itself: the section sign is \u00a7, and an issue reference needs a digit after the word.
 */
const CONTRACT_SECTION = /\bSPEC\s*\u00a7/;
const ISSUE_NUMBER = /\bissues?\s*#?\d+/i;

function citationOffences(line: string): boolean {
  return CONTRACT_SECTION.test(line) || ISSUE_NUMBER.test(line);
}

function sourceFiles(dir: string): string[] {
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return SKIPPED_DIRS.has(e.name) || e.name.startsWith('.') ? [] : sourceFiles(path);
    return e.isFile() && SOURCE_EXTENSIONS.has(extname(e.name)) ? [path] : [];
  });
}

describe('code cites docs/, not the contract document or issue numbers', () => {
  it('no source file of src/, packages/, console/ or test/ cites a contract section or an issue number', () => {
    const offenders: string[] = [];
    for (const dir of DIRS) {
      for (const file of sourceFiles(join(ROOT, dir))) {
        const lines = readFileSync(file, 'utf8').split('\n');
        for (const [i, line] of lines.entries()) {
          if (citationOffences(line)) offenders.push(`${relative(ROOT, file)}:${i + 1}: ${line.trim().slice(0, 160)}`);
        }
      }
    }
    expect(offenders).toEqual([]);
  });

  it('the check sees both kinds of reference and leaves ordinary words alone', () => {
    const section = `SPEC ${String.fromCharCode(0xa7)}4`;
    expect(citationOffences(`// Only the platform refunds (${section}).`)).toBe(true);
    expect(citationOffences(`/** ${section.replace(' ', '')}: the reason order */`)).toBe(true);
    expect(citationOffences(`describe('named once (issue ${15})', () => {`)).toBe(true);
    expect(citationOffences(`// Issue ${14} measured record-usage`)).toBe(true);
    expect(citationOffences(`// see issue #${7}`)).toBe(true);
    expect(citationOffences(`// issues ${13} and ${14}`)).toBe(true);

    expect(citationOffences('// docs/metering.md, Refunds: only the platform refunds')).toBe(false);
    expect(citationOffences("it('reissues 2 tokens after a rotation')")).toBe(false);
    expect(citationOffences('// the tokens we issue expire after 15 minutes')).toBe(false);
    expect(citationOffences('// RFC 1035 \u00a74.1: the question section')).toBe(false);
    expect(citationOffences('// a spec of the shape; the seed is printed, FUZZ_SEED replays')).toBe(false);
    expect(citationOffences('https://github.com/fastify/fastify/issues/5000')).toBe(false);
  });
});
