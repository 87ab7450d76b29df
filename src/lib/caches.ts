import type { Clock } from '../clock.js';
import { MINUTE } from '../clock.js';
import type { Bus } from './bus.js';
import { AttemptLimiter } from './attempt-limiter.js';
import { TtlCache } from './cache.js';

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
  /** SPEC §6: login attempts per (IP, email), 10 per 15 minutes. */
  readonly loginAttempts: AttemptLimiter;

  constructor(clock: Clock, bus: Bus) {
    this.loginAttempts = new AttemptLimiter(clock, 10, 15 * MINUTE);
    this.resolve = new TtlCache(clock, 5 * MINUTE);
    this.costs = new TtlCache(clock, MINUTE, 1);
    bus.subscribe('resolve-cache', () => this.resolve.clear());
    bus.subscribe('cost-cache', () => this.costs.clear());
  }
}
