import type { Deps } from '../context.js';
import { retryOutbox } from '../lib/mailer.js';
import { reportMeterEvents } from '../modules/billing/meter-events.js';
import { pruneStripeEvents, retryStripeEvents } from '../modules/billing/stripe-events.js';
import { expireAiHolds, expireReservations, pruneAiHolds, pruneInvocations } from '../modules/credits/index.js';
import { dispatchPending } from '../modules/events/outbox.js';
import { lapseDomainClaims } from '../modules/templates/custom-domains.js';
import { provisionDue } from '../modules/templates/provision.js';
import { deliverDue } from '../modules/webhooks/organization.js';

/**
 * Background loops, each declared here (STYLE rule 8): what it claims, how much per run, how often.
 * Claims use FOR UPDATE SKIP LOCKED, so any number of instances may run them.
 */
export interface WorkerDefinition {
  name: string;
  table: string;
  batchSize: number;
  intervalMs: number;
  /** One pass; returns how many rows it handled (a full batch runs again at once). */
  run(deps: Deps): Promise<number>;
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
    name: 'mail-retry',
    table: 'email_outbox',
    batchSize: 20,
    intervalMs: 30_000,
    run: (deps) => retryOutbox(deps, 20),
  },
  {
    name: 'event-dispatch',
    table: 'outbox_events',
    batchSize: 100,
    intervalMs: 2_000,
    run: (deps) => dispatchPending(deps.db, deps.clock.now(), 100),
  },
  {
    name: 'webhook-delivery',
    table: 'webhook_deliveries',
    batchSize: 20,
    intervalMs: 1_000,
    run: (deps) => deliverDue(deps, 20),
  },
  {
    // Stripe events whose handling failed (or whose receiver died): never lost (docs/billing.md, Inbound events).
    name: 'stripe-events',
    table: 'stripe_events',
    batchSize: 20,
    intervalMs: 5_000,
    run: (deps) => retryStripeEvents(deps, 20),
  },
  {
    name: 'stripe-event-retention',
    table: 'stripe_events',
    batchSize: 1000,
    intervalMs: 60 * 60_000,
    run: (deps) => pruneStripeEvents(deps, 1000),
  },
  {
    // Usage to the Stripe meter when STRIPE_METER_EVENT_NAME is set (docs/billing.md, Usage to Stripe meters).
    name: 'meter-events',
    table: 'meter_event_outbox',
    batchSize: 100,
    intervalMs: 5_000,
    run: (deps) => reportMeterEvents(deps, 100),
  },
  {
    // Template deployments due for a provisioning attempt (docs/templates.md).
    name: 'template-provisioning',
    table: 'template_deployments',
    batchSize: 10,
    intervalMs: 2_000,
    run: (deps) => provisionDue(deps, 10),
  },
  {
    // Custom-domain claims unverified after 7 days lapse (docs/templates.md, Custom domains).
    name: 'custom-domain-lapse',
    table: 'template_deployments',
    batchSize: 100,
    intervalMs: 60_000,
    run: (deps) => lapseDomainClaims(deps, 100),
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
