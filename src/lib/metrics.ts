import { Counter, Gauge, Registry } from 'prom-client';

/**
 * The process's metrics (Prometheus text at GET /metrics, operator key). One registry per app, so
 * several instances in one test process keep their own counts.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly rateLimitDecisions = new Counter({
    name: 'creditgate_rate_limit_decisions_total',
    help: 'Rate-limit decisions by backend (redis = shared window, local = in-process) and outcome',
    labelNames: ['backend', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly rateLimitFallback = new Gauge({
    name: 'creditgate_rate_limit_fallback',
    help: '1 while Redis is unreachable and rate limits are counted per instance',
    registers: [this.registry],
  });
  readonly rateLimitOutages = new Counter({
    name: 'creditgate_rate_limit_redis_outages_total',
    help: 'Times the shared rate limiter lost Redis and fell back to the in-process window',
    registers: [this.registry],
  });
}
