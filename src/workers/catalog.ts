import type { Deps } from '../context.js';
import { MAIL_QUEUE } from '../lib/mailer.js';
import { AUTO_TOP_UP_QUEUE } from '../modules/billing/auto-top-up.js';
import { endBillingOfDeletedOrganizations } from '../modules/billing/deleted-organizations.js';
import { METER_QUEUE } from '../modules/billing/meter-events.js';
import { pruneStripeEvents, STRIPE_EVENTS_QUEUE } from '../modules/billing/stripe-events.js';
import { askDueAutoTopUps, backfillRollupsStep, deleteExpiredUsage, ensureUsagePartitions, expireAiHolds, expireReservations, pruneAiHolds, pruneEachBudgetWindows, pruneInvocations } from '../modules/credits/index.js';
import { EVENTS_QUEUE } from '../modules/events/outbox.js';
import { lapseDomainClaims, releaseUnentitledDomains } from '../modules/templates/custom-domains.js';
import { PROVISION_QUEUE } from '../modules/templates/provision.js';
import { DELIVERY_QUEUE } from '../modules/webhooks/organization.js';
import { type JobQueue, runJobs } from './jobs.js';

/**
 * Background loops, each declared here (STYLE rule 8): what it claims, how much per run, how often.
 * Claims use FOR UPDATE SKIP LOCKED, so any number of instances may run them. The job queues run
 * through the job runner (src/workers/jobs.ts, docs/jobs.md): their table and batch come from the
 * queue's declaration, only the interval is set here.
 */
export interface WorkerDefinition {
  name: string;
  table: string;
  batchSize: number;
  intervalMs: number;
  /** One pass; returns how many rows it handled (a full batch runs again at once). */
  run(deps: Deps): Promise<number>;
}

/** A job queue's worker: one pass is one `runJobs` with the queue's policy. */
function jobWorker<Row, Setup>(queue: JobQueue<Row, Deps, Setup>, intervalMs: number): WorkerDefinition {
  return { name: queue.name, table: queue.table, batchSize: queue.policy.batchSize, intervalMs, run: (deps) => runJobs(deps, queue) };
}

export const WORKERS: WorkerDefinition[] = [
  {
    name: 'reservation-expiry',
    table: 'invocations',
    batchSize: 500,
    intervalMs: 15_000,
    run: (deps) => expireReservations(deps.db, deps.clock.now()),
  },
  {
    name: 'invocation-retention',
    table: 'invocations',
    batchSize: 1000,
    intervalMs: 10 * 60_000,
    run: (deps) => pruneInvocations(deps.db, deps.clock.now(), 1000),
  },
  {
    // AI calls whose process died mid-call: their holds go back (docs/ai-proxy.md).
    name: 'ai-hold-expiry',
    table: 'ai_reservations',
    batchSize: 500,
    intervalMs: 15_000,
    run: (deps) => expireAiHolds(deps.db, deps.clock.now(), 500),
  },
  {
    name: 'ai-hold-retention',
    table: 'ai_reservations',
    batchSize: 1000,
    intervalMs: 10 * 60_000,
    run: (deps) => pruneAiHolds(deps.db, deps.clock.now(), 1000),
  },
  {
    // Ended windows of "*" budgets: per end user or tool, kept only while in progress (docs/budgets.md).
    name: 'budget-window-retention',
    table: 'budget_windows',
    batchSize: 1000,
    intervalMs: 10 * 60_000,
    run: (deps) => pruneEachBudgetWindows(deps.db, deps.clock.now(), 1000),
  },
  {
    // Records older than the rollups, counted a few pages at a time until none is left (docs/usage-analytics.md, Rollups).
    name: 'usage-rollup-backfill',
    table: 'usage_records',
    batchSize: 1,
    intervalMs: 60_000,
    run: (deps) => backfillRollupsStep(deps.db, deps.clock.now()),
  },
  {
    // This month's and the next month's partition of usage_records (docs/usage-analytics.md, Partitions).
    name: 'usage-partitions',
    table: 'usage_records',
    batchSize: 2,
    intervalMs: 60 * 60_000,
    run: async (deps) => {
      await ensureUsagePartitions(deps.db, deps.clock.now());
      return 0;
    },
  },
  {
    // Usage records past USAGE_RETENTION_DAYS (docs/usage-analytics.md, Retention); nothing when unset.
    name: 'usage-retention',
    table: 'usage_records',
    batchSize: 5000,
    intervalMs: 10 * 60_000,
    run: (deps) => (deps.config.usageRetentionDays === null ? Promise.resolve(0) : deleteExpiredUsage(deps.db, deps.clock.now(), deps.config.usageRetentionDays, 5000)),
  },
  jobWorker(MAIL_QUEUE, 30_000),
  jobWorker(EVENTS_QUEUE, 2_000),
  jobWorker(DELIVERY_QUEUE, 1_000),
  // Stripe events whose handling failed (or whose receiver died): never lost (docs/billing.md, Inbound events).
  jobWorker(STRIPE_EVENTS_QUEUE, 5_000),
  {
    name: 'stripe-event-retention',
    table: 'stripe_events',
    batchSize: 1000,
    intervalMs: 60 * 60_000,
    run: (deps) => pruneStripeEvents(deps, 1000),
  },
  {
    // Deployments below the auto top-up line whose row is due: one with nothing left makes no deduction
    // that could ask (docs/billing.md, "Auto top-up").
    name: 'auto-top-up-due',
    table: 'credit_balances',
    batchSize: 500,
    intervalMs: 60_000,
    run: (deps) => askDueAutoTopUps(deps.db, deps.clock.now(), 500),
  },
  // Auto top-ups asked by a deduction that crossed the line: one off-session PaymentIntent each (docs/billing.md, "Auto top-up").
  jobWorker(AUTO_TOP_UP_QUEUE, 2_000),
  // Usage to the Stripe meter when STRIPE_METER_EVENT_NAME is set (docs/billing.md, Usage to Stripe meters).
  jobWorker(METER_QUEUE, 5_000),
  // Template deployments due for a provisioning attempt (docs/templates.md).
  jobWorker(PROVISION_QUEUE, 2_000),
  {
    // Custom-domain claims unverified after 7 days lapse (docs/templates.md, Custom domains).
    name: 'custom-domain-lapse',
    table: 'template_deployments',
    batchSize: 100,
    intervalMs: 60_000,
    run: (deps) => lapseDomainClaims(deps, 100),
  },
  {
    // Verified custom domains of organizations that lost the custom_domain flag are released (docs/templates.md, Custom domains).
    name: 'custom-domain-entitlement',
    table: 'template_deployments',
    batchSize: 100,
    intervalMs: 60_000,
    run: (deps) => releaseUnentitledDomains(deps, 100),
  },
  {
    // Subscriptions of deleted organizations are canceled, packs paid after the delete refunded (docs/billing.md, Subscriptions).
    name: 'deleted-organization-billing',
    table: 'subscriptions',
    batchSize: 20,
    intervalMs: 60_000,
    run: (deps) => endBillingOfDeletedOrganizations(deps, 20),
  },
];

export interface RunningWorkers {
  stop(): Promise<void>;
}

/** Start every worker; stop() waits for the passes in flight to finish. */
export function startWorkers(deps: Deps, workers: WorkerDefinition[] = WORKERS): RunningWorkers {
  let stopped = false;
  const timers = new Set<NodeJS.Timeout>();
  const inFlight = new Set<Promise<void>>();

  const schedule = (worker: WorkerDefinition, delay: number) => {
    if (stopped) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      const pass = (async () => {
        let handled = 0;
        try {
          handled = await worker.run(deps);
        } catch (err) {
          deps.log.warn({ err, worker: worker.name }, 'worker pass failed');
        }
        schedule(worker, handled >= worker.batchSize ? 0 : worker.intervalMs);
      })();
      inFlight.add(pass);
      void pass.finally(() => inFlight.delete(pass));
    }, delay);
    timer.unref();
    timers.add(timer);
  };

  for (const worker of workers) schedule(worker, worker.intervalMs);
  return {
    async stop() {
      stopped = true;
      for (const timer of timers) clearTimeout(timer);
      await Promise.all([...inFlight]);
    },
  };
}
