#!/usr/bin/env node
// The console's size budget (docs/console.md, "Budget"): after `vite build`, the JavaScript
// of dist/console, gzipped, must stay under 250 KB, counting every chunk (the pages loaded on demand
// too), not only the first load. `npm run build:console` runs this and fails the build past it.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

export const BUDGET_BYTES = 250 * 1024;

/** Gzipped sizes of the built console's scripts: every chunk, and the entry the page loads first. */
export function measure(dir) {
  const assets = join(dir, 'assets');
  const files = readdirSync(assets).filter((f) => f.endsWith('.js'));
  const html = readFileSync(join(dir, 'index.html'), 'utf8');
  const sizes = files.map((file) => ({ file, raw: readFileSync(join(assets, file)).length, gzip: gzipSync(readFileSync(join(assets, file)), { level: 9 }).length }));
  const entry = sizes.filter((s) => html.includes(`assets/${s.file}`));
  const sum = (list, key) => list.reduce((n, s) => n + s[key], 0);
  return { files: sizes, totalGzip: sum(sizes, 'gzip'), totalRaw: sum(sizes, 'raw'), entryGzip: sum(entry, 'gzip') };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dir = fileURLToPath(new URL('../dist/console/', import.meta.url));
  const m = measure(dir);
  const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
  const line = `console JS: ${kb(m.totalGzip)} gzipped in ${m.files.length} files (${kb(m.totalRaw)} raw), first load ${kb(m.entryGzip)}; budget ${kb(BUDGET_BYTES)}`;
  if (m.totalGzip > BUDGET_BYTES) {
    process.stderr.write(`${line}: OVER BUDGET\n`);
    process.exit(1);
  }
  process.stdout.write(`${line}\n`);
}
