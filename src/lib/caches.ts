import type { Clock } from '../clock.js';
import { MINUTE, SECOND } from '../clock.js';
import type { Bus } from './bus.js';
import { TtlCache } from './cache.js';
import type { DeploymentTerms } from '../modules/credits/terms.js';
import type { Plan } from '../modules/entitlements/tiers.js';

export interface ResolvedDeployment {
  deployment_id: string | null;
  organization_id: string | null;
  tier: string | null;
  mcp_enabled: boolean;
  error: string | null;
}

export interface CostTable {
  costs: Map<string, { credits: number; description: string | null }>;
  toolActions: Map<string, string>;
}

/**
 * The process's caches. Each is dropped on every instance through the bus when what it holds changes;
 * the TTLs bound how long a lost invalidation can matter.
 */
export class Caches {
  /** resolve-deployment answers per user_id (seed: 5 minutes). */
  readonly resolve: TtlCache<ResolvedDeployment>;
  /** The cost table and tool map: read on every metered call, changed only by operators. */
  readonly costs: TtlCache<CostTable>;
  /** Rate-limit terms (tier, overrides) of deployments named by service calls; null = no such deployment. */
  readonly terms: TtlCache<DeploymentTerms | null>;
  /** Plans of organizations and users (highest of their organizations) for the hourly limit. */
  readonly plans: TtlCache<Plan>;
  /** Client IPs that failed authentication on /api/v1 lately: only they are checked against the failure window (http/auth-throttle.ts). */
  readonly authFailures: TtlCache<true>;

  constructor(clock: Clock, bus: Bus) {
    this.resolve = new TtlCache(clock, 5 * MINUTE);
    this.costs = new TtlCache(clock, MINUTE, 1);
    bus.subscribe('resolve-cache', () => this.resolve.clear());
    this.terms = new TtlCache(clock, 30 * SECOND);
    this.plans = new TtlCache(clock, MINUTE);
    // Two windows: the sliding counter still weighs the previous minute's failures.
    this.authFailures = new TtlCache(clock, 2 * MINUTE);
    bus.subscribe('cost-cache', () => this.costs.clear());
    bus.subscribe('terms-cache', () => this.terms.clear());
    bus.subscribe('plan-cache', () => this.plans.clear());
  }
}
