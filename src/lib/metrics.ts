import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { collectProcessMetrics } from './process-metrics.js';

/**
 * The app's metrics (Prometheus text at GET /metrics; docs/operations-metrics.md lists every series).
 * One registry per app, so several instances in one test process keep their own counts; reached
 * through `deps.metrics`, never a module-level registry. Labels are bounded sets: route patterns,
 * methods, status codes, reasons and outcomes, never tenant ids.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly stopProcessMetrics = collectProcessMetrics(this.registry);
  private readonly scrapeCollectors: Array<{ name: string; collect: () => Promise<void>; reset: () => void; running?: Promise<void> }> = [];

  readonly httpRequestDuration = new Histogram({
    name: 'creditgate_http_request_duration_seconds',
    help: 'HTTP requests by route pattern (unmatched: "unmatched"), method and status code, from arrival to the last byte sent',
    labelNames: ['route', 'method', 'status_code'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
    registers: [this.registry],
  });

  readonly deductions = new Counter({
    name: 'creditgate_deductions_total',
    help: 'Deductions applied (credits taken), by source: mcp = record-usage, webhook = a proxy send',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });
  readonly deductionRefusals = new Counter({
    name: 'creditgate_deduction_refusals_total',
    help: 'Deductions refused, by source (mcp, webhook, ai) and reason (insufficient_credits, budget_exceeded, sandbox_tier, mcp_disabled, deployment_not_found, no_deployment_found)',
    labelNames: ['source', 'reason'] as const,
    registers: [this.registry],
  });
  readonly creditsDeducted = new Counter({
    name: 'creditgate_credits_deducted_total',
    help: 'Credits taken by applied deductions, by source',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });
  readonly deductionBatchSize = new Histogram({
    name: 'creditgate_deduction_batch_size',
    help: 'Requests per committed group-commit batch (deductions, holds, releases and money ops; docs/adr/0004-group-commit.md)',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    registers: [this.registry],
  });
  readonly deductionBatchWait = new Histogram({
    name: 'creditgate_deduction_batch_wait_seconds',
    help: 'Per request, from its arrival at the group-commit batcher to the start of the batch that carries it (waiting for the batch in flight)',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    registers: [this.registry],
  });
  readonly deductionBatchDuration = new Histogram({
    name: 'creditgate_deduction_batch_duration_seconds',
    help: 'Per batch, from its start to its commit (a batch that failed: to the end of its one-by-one fallback)',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    registers: [this.registry],
  });
  readonly deductionBatchFallbacks = new Counter({
    name: 'creditgate_deduction_batch_fallbacks_total',
    help: 'Batches whose statements failed and whose requests ran one by one',
    registers: [this.registry],
  });
  readonly deductionBatchRemembered = new Counter({
    name: 'creditgate_deduction_batch_remembered_total',
    help: 'Batches sent in one round trip on remembered balance rows, by outcome: committed, or stale (a row or id changed; the batch took the locking path)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly balanceReadBatchSize = new Histogram({
    name: 'creditgate_balance_read_batch_size',
    help: 'Balance reads of advisory checks per gathered statement (a check whose cached balance expired, or that would refuse; docs/adr/0005-cached-checks.md)',
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    registers: [this.registry],
  });
  readonly aiCreditsOwed = new Counter({
    name: 'creditgate_ai_credits_owed_total',
    help: 'Credits AI calls were due but could not be charged (the provider reported more than was held and the deployment had nothing left); each became credits_owed',
    registers: [this.registry],
  });
  readonly reservations = new Counter({
    name: 'creditgate_reservations_total',
    help: 'Reservations (check-entitlement with reserve: true) by outcome: held, refused (not enough credits), released',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly webhookDeliveries = new Counter({
    name: 'creditgate_webhook_deliveries_total',
    help: 'Webhook delivery attempts that ended, by kind (proxy = a send, organization = an event) and outcome (delivered, retry_scheduled, failed)',
    labelNames: ['kind', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly jobsClaimed = new Counter({
    name: 'creditgate_jobs_claimed_total',
    help: 'Jobs claimed by the job runner (docs/jobs.md), by queue (the worker name: mail-retry, webhook-delivery …)',
    labelNames: ['queue'] as const,
    registers: [this.registry],
  });
  readonly jobsFinished = new Counter({
    name: 'creditgate_jobs_finished_total',
    help: 'Claimed jobs handled, by queue and outcome: done, retry (scheduled again), failed (given up), skipped, error (threw; due again when its lease ends)',
    labelNames: ['queue', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly jobDuration = new Histogram({
    name: 'creditgate_jobs_duration_seconds',
    help: 'Per claimed job, the time its handler took (the send, the provisioner call, the recording), by queue',
    labelNames: ['queue'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly upstreamRequests = new Counter({
    name: 'creditgate_upstream_requests_total',
    help: 'Calls to Stripe and to the AI provider, each attempt, by outcome (ok, client_error, rate_limited, server_error, timeout, connection_error, aborted)',
    labelNames: ['upstream', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly upstreamDuration = new Histogram({
    name: 'creditgate_upstream_request_duration_seconds',
    help: 'Time to the answer’s status line (AI streams: to the first byte), by upstream',
    labelNames: ['upstream'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly outboxDepth = new Gauge({
    name: 'creditgate_outbox_depth',
    help: `Items waiting, read at scrape time (at most ${OUTBOX_DEPTH_LIMIT}): events not yet fanned out, webhook deliveries and meter events pending`,
    labelNames: ['outbox'] as const,
    registers: [this.registry],
  });
  readonly outboxAge = new Gauge({
    name: 'creditgate_outbox_oldest_age_seconds',
    help: 'Read at scrape time: age of the oldest event not yet fanned out; for deliveries and meter events, how long the most overdue one has been due',
    labelNames: ['outbox'] as const,
    registers: [this.registry],
  });
  readonly collectorSuccess = new Gauge({
    name: 'creditgate_scrape_collector_success',
    help: '1 when the collector read at the last scrape answered, 0 when it failed or timed out (its series are then left out)',
    labelNames: ['collector'] as const,
    registers: [this.registry],
  });

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

  /**
   * Read something at scrape time (a database query). A collector that fails or takes longer than
   * `SCRAPE_COLLECT_TIMEOUT_MS` does not fail the scrape: `reset` clears its series and
   * creditgate_scrape_collector_success{collector} says 0.
   */
  atScrape(name: string, collect: () => Promise<void>, reset: () => void): void {
    this.scrapeCollectors.push({ name, collect, reset });
  }

  /** The exposition text: the scrape-time collectors first (in parallel, each bounded), then the registry. */
  async scrape(): Promise<string> {
    await Promise.all(
      this.scrapeCollectors.map(async (c) => {
        let ok = true;
        try {
          // A read that outlived its scrape is still running: the next scrape waits for it (bounded)
          // instead of starting another, so a slow database never piles up scrape queries.
          c.running ??= c.collect().finally(() => {
            c.running = undefined;
          });
          await withTimeout(c.running, SCRAPE_COLLECT_TIMEOUT_MS);
        } catch {
          ok = false;
          c.reset();
        }
        this.collectorSuccess.set({ collector: c.name }, ok ? 1 : 0);
      }),
    );
    return this.registry.metrics();
  }

  /** Let go of what the process metrics hold (app close). */
  close(): void {
    this.stopProcessMetrics();
  }

  /** Count one call to an upstream and time it; `statusOf` reads the answer's status. */
  async observeUpstream<T>(upstream: 'stripe' | 'ai', call: () => Promise<T>, statusOf: (answer: T) => number, signal?: AbortSignal): Promise<T> {
    const stop = this.upstreamDuration.startTimer({ upstream });
    try {
      const answer = await call();
      stop();
      this.upstreamRequests.inc({ upstream, outcome: outcomeOfStatus(statusOf(answer)) });
      return answer;
    } catch (err) {
      this.upstreamRequests.inc({ upstream, outcome: signal?.aborted ? 'aborted' : outcomeOfError(err) });
      throw err;
    }
  }
}

/** Bound of the outbox depth query: a backlog past it reads as this many. */
export const OUTBOX_DEPTH_LIMIT = 10_000;
/** How long a scrape waits for a scrape-time collector. */
export const SCRAPE_COLLECT_TIMEOUT_MS = 2_000;

function outcomeOfStatus(status: number): string {
  if (status === 429) return 'rate_limited';
  if (status >= 500) return 'server_error';
  if (status >= 400) return 'client_error';
  return 'ok';
}

function outcomeOfError(err: unknown): string {
  const code = (err as { code?: string } | null)?.code;
  return code === 'ETIMEDOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' ? 'timeout' : 'connection_error';
}

async function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
