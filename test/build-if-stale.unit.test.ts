import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { INPUTS, OUTPUTS, staleness } from '../scripts/build-if-stale.mjs';

/** A repository shaped like ours in a temporary directory, every file and directory dated `at` (seconds). */
function checkout(at: number): { root: string; touch: (path: string, when: number) => void } {
  const root = mkdtempSync(join(tmpdir(), 'cg-build-if-stale-'));
  const touch = (path: string, when: number) => {
    const file = join(root, path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, '');
    utimesSync(file, when, when);
  };
  for (const file of ['src/cli.ts', 'src/modules/a/service.ts', 'src/modules/a/service.test.ts', 'src/README.md', 'packages/client/src/index.ts']) touch(file, at);
  for (const input of INPUTS.filter((i) => !i.endsWith('src'))) touch(input, at);
  for (const dir of ['src/modules/a', 'src/modules', 'src', 'packages/client/src']) utimesSync(join(root, dir), at, at);
  return { root, touch };
}

describe('build-if-stale (npm start builds only when a source is newer than the build)', () => {
  it('a build newer than every source is fresh; a missing output or a newer source, config or deletion is stale', () => {
    const { root, touch } = checkout(1_000);
    expect(staleness(root)).toMatchObject({ stale: true, reason: `${OUTPUTS[0]} is missing` });
    for (const output of OUTPUTS) touch(output, 2_000);
    expect(staleness(root)).toEqual({ stale: false, reason: 'the build is up to date' });

    // Tests and other files beside the sources are not built.
    touch('src/modules/a/service.test.ts', 3_000);
    touch('src/README.md', 3_000);
    utimesSync(join(root, 'src/modules/a'), 1_000, 1_000);
    utimesSync(join(root, 'src'), 1_000, 1_000);
    expect(staleness(root).stale).toBe(false);

    touch('src/modules/a/service.ts', 3_000);
    expect(staleness(root)).toEqual({ stale: true, reason: 'src/modules/a/service.ts changed since the last build' });
    for (const output of OUTPUTS) touch(output, 4_000);
    expect(staleness(root).stale).toBe(false);

    touch('tsconfig.build.json', 5_000);
    expect(staleness(root)).toMatchObject({ stale: true, reason: 'tsconfig.build.json changed since the last build' });
    for (const output of OUTPUTS) touch(output, 6_000);

    // One half of the build older than a client source: stale, though the service's output is newer.
    touch('packages/client/src/index.ts', 7_000);
    touch(OUTPUTS[0]!, 8_000);
    expect(staleness(root)).toMatchObject({ stale: true, reason: 'packages/client/src/index.ts changed since the last build' });
    touch(OUTPUTS[1]!, 8_000);

    // A deleted source changes its directory's time.
    rmSync(join(root, 'src/cli.ts'));
    utimesSync(join(root, 'src'), 9_000, 9_000);
    expect(staleness(root)).toEqual({ stale: true, reason: 'src changed since the last build' });
    rmSync(root, { recursive: true });
  });
});
