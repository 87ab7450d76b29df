#!/usr/bin/env node
// `npm start` runs this first (prestart): it builds only when a source is newer than the build, so a
// start after `npm install` (whose prepare already built) or after another start costs no build.
// Plain JavaScript on purpose: it runs before anything is compiled, and without dev dependencies.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync, utimesSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What `npm run build` reads (the service, the client SDK and the console), relative to the repository root. */
export const INPUTS = [
  'src',
  'tsconfig.json',
  'tsconfig.build.json',
  'package.json',
  'packages/client/src',
  'packages/client/package.json',
  'packages/client/tsconfig.build.json',
  'console',
];

/** One file each half of the build writes every time; the older of them is when the build last ran. */
export const OUTPUTS = ['dist/cli.js', 'packages/client/dist/index.js', 'dist/console/index.html'];

/** Sources the build compiles: TypeScript, JSON and the console's pages and styles, not the tests beside them. */
const isSource = (name) => /\.(ts|tsx|mts|cts|json|css|html|svg)$/.test(name) && !/\.test\.ts$/.test(name);

/**
 * The newest modification under `path`. A directory counts too: adding, removing or renaming a file
 * changes its directory's time, so a deleted source also makes the build stale.
 */
function newest(path) {
  let stat;
  try {
    stat = statSync(path);
  } catch {
    return null;
  }
  let best = { path, mtimeMs: stat.mtimeMs };
  if (!stat.isDirectory()) return best;
  for (const entry of readdirSync(path, { withFileTypes: true })) {
    if (!entry.isDirectory() && !isSource(entry.name)) continue;
    const found = newest(join(path, entry.name));
    if (found && found.mtimeMs > best.mtimeMs) best = found;
  }
  return best;
}

/** Whether `npm run build` must run in `root`, and why (for the message). */
export function staleness(root) {
  let builtAt = Number.POSITIVE_INFINITY;
  for (const output of OUTPUTS) {
    const found = newest(join(root, output));
    if (!found) return { stale: true, reason: `${output} is missing` };
    builtAt = Math.min(builtAt, found.mtimeMs);
  }
  for (const input of INPUTS) {
    const found = newest(join(root, input));
    if (found && found.mtimeMs > builtAt) return { stale: true, reason: `${relative(root, found.path)} changed since the last build` };
  }
  return { stale: false, reason: 'the build is up to date' };
}

/** Build, and when the build fails make the next start try again (tsc writes its output even then). */
function build(root, reason) {
  process.stderr.write(`creditgate: ${reason}; building (npm run build)…\n`);
  const result = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
  if (result.status === 0) return 0;
  for (const output of OUTPUTS) {
    try {
      utimesSync(join(root, output), 0, 0);
    } catch {
      // Missing: the next start builds anyway.
    }
  }
  return result.status ?? 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const { stale, reason } = staleness(root);
  if (stale) process.exitCode = build(root, reason);
}
