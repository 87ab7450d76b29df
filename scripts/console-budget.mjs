#!/usr/bin/env node
// The console's size budget (docs/console.md, "Budget"): after `vite build`, the JavaScript of
// dist/console, gzipped, must stay under 250 KB counting every chunk (the pages loaded on demand too),
// and the first load (the scripts index.html names, which the overview needs before its first paint)
// under 120 KB. `npm run build:console` runs this and fails the build past either, or when a script,
// style sheet or the page has no precompressed copy for the service to send (console/vite.config.ts).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants, gzipSync } from 'node:zlib';

export const BUDGET_BYTES = 250 * 1024;
export const FIRST_LOAD_BUDGET_BYTES = 120 * 1024;

const brotli = (buf) => brotliCompressSync(buf, { params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT } }).length;

/** Compressed sizes of the built console's scripts: every chunk, and those the page loads first. */
export function measure(dir) {
  const assets = join(dir, 'assets');
  const files = readdirSync(assets).filter((f) => f.endsWith('.js'));
  const html = readFileSync(join(dir, 'index.html'), 'utf8');
  const sizes = files.map((file) => {
    const raw = readFileSync(join(assets, file));
    return { file, raw: raw.length, gzip: gzipSync(raw, { level: 9 }).length, brotli: brotli(raw) };
  });
  // The entry script and any chunk it preloads: what a first visit downloads before the page runs.
  const entry = sizes.filter((s) => html.includes(`assets/${s.file}`));
  const sum = (list, key) => list.reduce((n, s) => n + s[key], 0);
  // What the service would have to send uncompressed: text files without a .gz or .br beside them.
  const text = ['index.html', ...readdirSync(assets).filter((f) => /\.(js|css)$/.test(f)).map((f) => `assets/${f}`)];
  const uncompressed = text.filter((f) => !existsSync(join(dir, `${f}.gz`)) || !existsSync(join(dir, `${f}.br`)));
  return {
    files: sizes,
    totalGzip: sum(sizes, 'gzip'),
    totalRaw: sum(sizes, 'raw'),
    entryGzip: sum(entry, 'gzip'),
    entryBrotli: sum(entry, 'brotli'),
    entryFiles: entry.map((s) => s.file),
    uncompressed,
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dir = fileURLToPath(new URL('../dist/console/', import.meta.url));
  const m = measure(dir);
  const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
  const line =
    `console JS: ${kb(m.totalGzip)} gzipped in ${m.files.length} files (${kb(m.totalRaw)} raw), budget ${kb(BUDGET_BYTES)}; ` +
    `first load ${kb(m.entryGzip)} gzipped (${kb(m.entryBrotli)} brotli), budget ${kb(FIRST_LOAD_BUDGET_BYTES)}`;
  const over = [];
  if (m.totalGzip > BUDGET_BYTES) over.push('all scripts OVER BUDGET');
  if (m.entryGzip > FIRST_LOAD_BUDGET_BYTES) over.push('first load OVER BUDGET');
  if (m.entryFiles.length === 0) over.push('no script named by index.html');
  if (m.uncompressed.length > 0) over.push(`no .gz/.br beside ${m.uncompressed.join(', ')} (the build's precompress step did not run)`);
  if (over.length > 0) {
    process.stderr.write(`${line}: ${over.join('; ')}\n`);
    process.exit(1);
  }
  process.stdout.write(`${line}\n`);
}
