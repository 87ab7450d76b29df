import { createRequire } from 'node:module';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { collectProcessMetrics, READ_AT_SCRAPE } from './process-metrics.js';

/** The process metrics stay prom-client's defaults, name for name, without leaving handles behind. */
const require = createRequire(import.meta.url);
const namesOf = (module: string) => (require(`prom-client/lib/metrics/${module}`) as { metricNames: string[] }).metricNames;

describe('process metrics', () => {
  it("cover prom-client's default collectors: those read at scrape time, plus the event loop and GC rebuilt here", () => {
    expect([...collectDefaultMetrics.metricsList].sort()).toEqual([...READ_AT_SCRAPE, 'eventLoopLag', 'gc'].sort());
  });

  it('register every name the defaults would, in the registry given, and can be stopped', async () => {
    const registry = new Registry();
    const stop = collectProcessMetrics(registry);
    try {
      const names = (await registry.getMetricsAsJSON()).map((m) => m.name);
      const expected = collectDefaultMetrics.metricsList.flatMap(namesOf);
      // processMaxFileDescriptors reads /proc: on a system without it, it registers nothing (as in prom-client).
      expect(names.sort()).toEqual(expected.filter((n) => n !== 'process_max_fds' || names.includes(n)).sort());
    } finally {
      stop();
    }
    // A second app in the same process: no duplicate-registration error (each app has its own registry).
    const other = new Registry();
    collectProcessMetrics(other)();
  });
});
