// The Node flags `npm start` runs the service with (docs/operations-memory.md, "V8's heap"): read
// from package.json's start script, the one place they are written, so the Dockerfile's command, the
// memory benchmark and the embedded crash test run the service as `npm start` does
// (test/serve-node-flags.unit.test.ts holds the Dockerfile to them).
import { readFileSync } from 'node:fs';

/** The flags between `node` and `dist/cli.js` in package.json's start script. */
export function serveNodeFlags(packageJsonPath = new URL('../package.json', import.meta.url)) {
  const start = JSON.parse(readFileSync(packageJsonPath, 'utf8')).scripts.start;
  const words = start.trim().split(/\s+/);
  const cli = words.indexOf('dist/cli.js');
  if (words[0] !== 'node' || cli < 0) throw new Error(`the start script is not "node [flags] dist/cli.js serve": ${start}`);
  return words.slice(1, cli);
}
