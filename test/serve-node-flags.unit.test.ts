import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { serveNodeFlags } from '../scripts/serve-node-flags.mjs';

/**
 * The Node flags the service runs with (docs/operations-memory.md, "V8's heap"): written once, in
 * package.json's start script; the Dockerfile's command must give the same, and this Node must take
 * them (an unknown V8 flag stops `node` before the service starts).
 */
describe('the flags `npm start` gives Node', () => {
  const flags = serveNodeFlags();

  it('include the heap growing setting that keeps the embedded default under its memory goal', () => {
    expect(flags).toContain('--heap-growing-percent=50');
  });

  it('are the Dockerfile command’s too', () => {
    const cmd = /^CMD (\[.*\])$/m.exec(readFileSync('Dockerfile', 'utf8'));
    expect(cmd).not.toBeNull();
    const words = JSON.parse(cmd![1]!) as string[];
    expect(words[0]).toBe('node');
    expect(words.slice(1, words.indexOf('dist/cli.js'))).toEqual(flags);
    expect(words.slice(words.indexOf('dist/cli.js'))).toEqual(['dist/cli.js', 'serve']);
  });

  it('are taken by this Node', () => {
    const run = spawnSync(process.execPath, [...flags, '-e', 'process.exit(0)'], { encoding: 'utf8', timeout: 30_000 });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
  });
});
