import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The layers (ARCHITECTURE.md, "Layers"): `src/lib/` and `src/http/` are below the modules and import
 * none of them, not even a type. A module's shape that a lower layer holds is named there by declaration
 * merging (lib/principals.ts, lib/caches.ts `CachedRows`); pure rules both need live in lib/ (tiers, terms).
 */
const SRC = join(import.meta.dirname, '..', 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [path] : [];
  });
}

/** `from '../modules/x/y.js'` and `import('../modules/…')`, type-only imports included. */
const MODULE_IMPORT = /(?:from\s+|import\s*\(\s*)'((?:\.\.\/)+modules\/[^']+)'/g;

/** `from '../modules/x/y.js'` imports of one file, as `file -> modules/x/y.js`. */
function moduleImportsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(MODULE_IMPORT)].map((match) => `${relative(SRC, file)} -> ${relative(SRC, join(file, '..', match[1]!))}`);
}

describe('layers', () => {
  it('lib/ and http/ import no module', () => {
    const found = ['lib', 'http'].flatMap((layer) => sources(join(SRC, layer)).flatMap(moduleImportsOf));
    expect(found).toEqual([]);
  });

  it('the scan sees imports of modules where they are (a rule that finds nothing proves nothing)', () => {
    expect(moduleImportsOf(join(SRC, 'workers', 'catalog.ts')).length).toBeGreaterThan(3);
  });
});
