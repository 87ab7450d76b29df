import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * One suite, three projects: pure unit tests once; every database test on the embedded PGlite and
 * on the PostgreSQL server (a fresh database per run, made by test/global-setup-postgres.ts).
 */
/**
 * Tests that need no database but start processes: the CLI and the served binary, the TypeScript
 * compiler over generated types, Redocly and Spectral. Their own project keeps `npm run test:unit`
 * (pure functions only) a loop of seconds; `npm test` runs every project (CONTRIBUTING.md).
 */
const SPAWNING = [
  'test/cli.unit.test.ts',
  'test/cli-demo.unit.test.ts',
  'test/cli-commands.unit.test.ts',
  'test/embedded-crash.unit.test.ts',
  'test/serve-lifecycle.unit.test.ts',
  'test/openapi-generator.unit.test.ts',
  'test/openapi-lint.unit.test.ts',
  'src/db/data-dir-permissions.unit.test.ts',
  'test/serve-node-flags.unit.test.ts',
];

export default defineConfig({
  // The client SDK's tests run against its source, not its build.
  resolve: {
    alias: {
      '@creditgate/client/mcp': fileURLToPath(new URL('./packages/client/src/mcp/index.ts', import.meta.url)),
      '@creditgate/client': fileURLToPath(new URL('./packages/client/src/index.ts', import.meta.url)),
    },
  },
  test: {
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // expect.poll's own default is 1 s. A console page loaded in a fresh browser context takes 0.7–0.8 s
    // to show its rows on this machine with its cores busy, so 1 s failed under CI's load; a poll that
    // waits for what never comes still fails, later.
    expect: { poll: { timeout: 15_000 } },
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          // Pure functions, no module state to reset between files (no vi.mock, no stubbed globals): the
          // files of a worker share its module graph, as the database projects do. 25 s → 10 s here.
          isolate: false,
          include: ['src/**/*.unit.test.ts', 'test/**/*.unit.test.ts', 'packages/*/test/**/*.unit.test.ts', 'console/src/**/*.unit.test.ts'],
          exclude: [...SPAWNING, '**/node_modules/**'],
        },
      },
      {
        extends: true,
        test: { name: 'spawn', include: SPAWNING },
      },
      {
        extends: true,
        test: {
          name: 'pglite',
          // Files of one worker share its module graph, so they share its one PGlite (harness.ts): starting
          // PGlite (seconds each) once per worker instead of once per file. Tests isolate by tenant.
          isolate: false,
          // The client SDK's suites (packages/) need a live service but test the client, not the database: PGlite only.
          include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
          exclude: ['**/*.unit.test.ts', '**/node_modules/**'],
          env: { CG_TEST_DB: 'pglite' },
        },
      },
      {
        extends: true,
        test: {
          name: 'postgres',
          isolate: false,
          include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
          // The examples' end-to-end test exercises the SDK and the examples, not the database.
          // The console's browser tests exercise the pages against the embedded default, like the examples.
          exclude: ['**/*.unit.test.ts', '**/node_modules/**', 'test/examples.test.ts', 'test/console/**'],
          env: { CG_TEST_DB: 'postgres' },
          globalSetup: ['./test/global-setup-postgres.ts'],
        },
      },
    ],
  },
});
