import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { serveNodeFlags } from '../scripts/serve-node-flags.mjs';
import { applyServeV8Flags, SERVE_V8_FLAGS } from '../src/node-flags.js';

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

/**
 * `creditgate serve` started without the start script's flags (`npx creditgate serve`, the installed
 * bin) sets them itself before the service starts (src/node-flags.ts).
 */
describe('creditgate serve without the flags on the command line', () => {
  it('sets the start script\'s flags, and only those the command line did not give', () => {
    expect(SERVE_V8_FLAGS).toEqual(serveNodeFlags());
    const set: string[] = [];
    expect(applyServeV8Flags([], (f) => set.push(f))).toEqual(['--heap-growing-percent=50']);
    expect(set).toEqual(['--heap-growing-percent=50']);
    // An operator's own value wins, in either spelling.
    for (const own of ['--heap-growing-percent=20', '--heap_growing_percent=20']) {
      const none: string[] = [];
      expect(applyServeV8Flags(['--enable-source-maps', own], (f) => none.push(f))).toEqual([]);
      expect(none).toEqual([]);
    }
  });

  it('set at start, the heap setting takes effect as on the command line', () => {
    // Objects that live through a few young collections, then die in the old generation (the load's
    // pattern, docs/operations-memory.md "V8's heap"): the old generation's growth is what the setting
    // bounds. A fixed allocation pattern; the heap's peak, not a time.
    const dir = mkdtempSync(join(tmpdir(), 'cg-v8-flags-'));
    const script = join(dir, 'churn.ts');
    writeFileSync(
      script,
      `import { applyServeV8Flags } from ${JSON.stringify(join(process.cwd(), 'src', 'node-flags.ts'))};
if (process.argv[2] === 'apply') applyServeV8Flags();
let window: object[] = [];
let peak = 0;
for (let i = 0; i < 3_000_000; i++) {
  window.push({ a: i, b: 'x' + i, c: [i, i + 1] });
  if (window.length > 200_000) window = window.slice(100_000);
  if (i % 10_000 === 0) peak = Math.max(peak, process.memoryUsage().heapTotal);
}
process.stdout.write(String(peak));
`,
    );
    const tsx = join(process.cwd(), 'node_modules', '.bin', 'tsx');
    const peakOf = (args: string[]) => {
      const run = spawnSync(tsx, args, { encoding: 'utf8', timeout: 60_000, env: { ...process.env, NODE_OPTIONS: '' } });
      expect(run.status, run.stderr).toBe(0);
      return Number(run.stdout);
    };
    let without: number;
    let applied: number;
    let onCommandLine: number;
    try {
      without = peakOf([script]);
      applied = peakOf([script, 'apply']);
      onCommandLine = peakOf(['--heap-growing-percent=50', script]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // This Node: about 165 MB without, 110 MB either way with it.
    expect(applied).toBeLessThan(without * 0.85);
    expect(onCommandLine).toBeLessThan(without * 0.85);
  });
});
