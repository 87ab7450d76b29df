import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from './clock.js';
import type { Config } from './config.js';
import type { Database } from './db/client.js';
import type { Bus } from './lib/bus.js';
import type { Caches } from './lib/caches.js';
import type { Metrics } from './lib/metrics.js';
import type { BalanceReads, DeductionBatcher } from './modules/credits/index.js';
import type { RateLimiter } from './lib/rate-limiter.js';
import type { OutboundHttp } from './modules/webhooks/deliver.js';

/** What every service verb may use; built once per process. */
export interface Deps {
  config: Config;
  db: Database;
  clock: Clock;
  bus: Bus;
  caches: Caches;
  limiter: RateLimiter;
  metrics: Metrics;
  /** Outbound HTTP for webhooks, with the SSRF guard (docs/webhooks.md, The proxy). */
  outbound: OutboundHttp;
  /**
   * Outbound HTTP for the template provisioner: `outbound` itself, or a client that may reach private
   * addresses when TEMPLATE_PROVISIONER_ALLOW_PRIVATE is set and tenants' webhooks may not (docs/templates.md).
   */
  provisionerOutbound: OutboundHttp;
  /** Group commit of deductions: every deduction of the hot paths goes through it (credits/engine/queue.ts). */
  deductions: DeductionBatcher;
  /** Balance reads of advisory checks, gathered into one statement (credits/balance-reads.ts). */
  balanceReads: BalanceReads;
  log: FastifyBaseLogger;
}

export type Actor =
  | { type: 'operator' }
  | { type: 'service' }
  | { type: 'system' }
  | { type: 'api_key'; apiKeyId: string; organizationId: string }
  | { type: 'deployment'; deploymentId: string; organizationId: string }
  | { type: 'user'; userId: string };

/** A service verb's first argument (STYLE rule 2): who acts, from where, with what. */
export interface Ctx extends Deps {
  actor: Actor;
  ip?: string | undefined;
  userAgent?: string | undefined;
}

export function actorLabel(actor: Actor): string {
  switch (actor.type) {
    case 'api_key':
      return `api_key:${actor.apiKeyId}`;
    case 'deployment':
      return `deployment:${actor.deploymentId}`;
    case 'user':
      return `user:${actor.userId}`;
    default:
      return actor.type;
  }
}

/**
 * A context for `actor` over `deps`. Written out field by field: spreading `deps` and adding the
 * actor's fields takes V8's slow path (about 2 µs on Node 20), once per request. A field added to Deps
 * and not here fails to compile.
 */
export function actingAs(deps: Deps, actor: Actor, ip?: string, userAgent?: string): Ctx {
  return {
    config: deps.config,
    db: deps.db,
    clock: deps.clock,
    bus: deps.bus,
    caches: deps.caches,
    limiter: deps.limiter,
    metrics: deps.metrics,
    outbound: deps.outbound,
    provisionerOutbound: deps.provisionerOutbound,
    deductions: deps.deductions,
    balanceReads: deps.balanceReads,
    log: deps.log,
    actor,
    ip,
    userAgent,
  };
}

export function systemCtx(deps: Deps): Ctx {
  return actingAs(deps, { type: 'system' });
}
