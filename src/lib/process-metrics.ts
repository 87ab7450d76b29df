import { createRequire } from 'node:module';
import { monitorEventLoopDelay, PerformanceObserver, constants as perf } from 'node:perf_hooks';
import { Gauge, Histogram, type Registry } from 'prom-client';

/**
 * prom-client's default process metrics, in one app's registry, and gone with it.
 *
 * `collectDefaultMetrics` (prom-client 15) has no timers, but two of its collectors hold a native
 * handle for good: the event-loop-delay monitor is enabled and never disabled (a libuv timer every
 * 10 ms), and the GC observer is never disconnected; there is no stop function
 * (prometheus/client_js#494, #500). Tests build dozens of apps per process, so each would leave both
 * behind. The collectors that only read at scrape time are prom-client's own, called one by one; the
 * two that hold a handle are rebuilt here under the same names and let go by the function returned
 * (Metrics.close(), on app close). process-metrics.unit.test.ts fails if prom-client's list changes.
 */
type Collector = (registry: Registry, config: Record<string, unknown>) => void;

/** prom-client's collectors that read only when scraped (lib/defaultMetrics.js lists them all). */
export const READ_AT_SCRAPE = [
  'processCpuTotal',
  'processStartTime',
  'osMemoryHeap',
  'processOpenFileDescriptors',
  'processMaxFileDescriptors',
  'processResources',
  'processHandles',
  'processRequests',
  'heapSizeAndUsed',
  'heapSpacesSizeAndUsed',
  'version',
] as const;

const GC_KINDS: Record<number, string> = {
  [perf.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [perf.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [perf.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [perf.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

/** Register the process metrics in `registry`; the returned function releases what they hold. */
export function collectProcessMetrics(registry: Registry): () => void {
  const require = createRequire(import.meta.url);
  for (const name of READ_AT_SCRAPE) {
    // processResources needs process.getActiveResourcesInfo (Node ≥ 17); the module checks for itself.
    if (name === 'processResources' && typeof process.getActiveResourcesInfo !== 'function') continue;
    (require(`prom-client/lib/metrics/${name}`) as Collector)(registry, {});
  }

  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const reads: Array<[string, string, () => number]> = [
    ['min', 'The minimum recorded event loop delay.', () => delay.min],
    ['max', 'The maximum recorded event loop delay.', () => delay.max],
    ['mean', 'The mean of the recorded event loop delays.', () => delay.mean],
    ['stddev', 'The standard deviation of the recorded event loop delays.', () => delay.stddev],
    ['p50', 'The 50th percentile of the recorded event loop delays.', () => delay.percentile(50)],
    ['p90', 'The 90th percentile of the recorded event loop delays.', () => delay.percentile(90)],
    ['p99', 'The 99th percentile of the recorded event loop delays.', () => delay.percentile(99)],
  ];
  // As prom-client does: the first gauge's collect sets the others (the registry reads its metrics in
  // order), then the window starts again, so each scrape reports the delays since the one before; the
  // plain lag is a setImmediate round trip, so a scrape shows the one measured by the scrape before.
  const lag = new Gauge({
    name: 'nodejs_eventloop_lag_seconds',
    help: 'Lag of event loop in seconds.',
    registers: [registry],
    collect() {
      const start = process.hrtime.bigint();
      setImmediate(() => lag.set(Number(process.hrtime.bigint() - start) / 1e9));
      for (const [i, [, , read]] of reads.entries()) gauges[i]!.set(read() / 1e9);
      delay.reset();
    },
  });
  const gauges = reads.map(([name, help]) => new Gauge({ name: `nodejs_eventloop_lag_${name}_seconds`, help, registers: [registry] }));

  const gc = new Histogram({
    name: 'nodejs_gc_duration_seconds',
    help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
    labelNames: ['kind'] as const,
    buckets: [0.001, 0.01, 0.1, 1, 2, 5],
    registers: [registry],
  });
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      // A gc entry's detail is { kind, flags } (Node ≥ 16).
      const kind = GC_KINDS[(entry as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'unknown';
      gc.observe({ kind }, entry.duration / 1000);
    }
  });
  observer.observe({ entryTypes: ['gc'] });

  return () => {
    delay.disable();
    observer.disconnect();
  };
}
