import type { Clock } from '../clock.js';
import { MINUTE, SECOND } from '../clock.js';
import type { Bus } from './bus.js';
import { TtlCache } from './cache.js';
import type { Principals } from './principals.js';
import type { DeploymentTerms } from './terms.js';
import type { Plan } from './tiers.js';

/**
 * Rows that modules own and these caches hold: each module names its own by adding a member
 * (declaration merging, as for lib/principals.ts), so this file imports no module:
 *   balance  a deployment's balance row (modules/credits/service.ts)
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled in by the modules that own the rows (see above)
export interface CachedRows {}

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

/** A deployment as credentials and gates see it (modules/metering/state.ts loads it): its row and its organization's deletion. */
export interface CachedDeployment {
  row: Principals['deployment'];
  orgDeleted: boolean;
}

/** An API key as cached per instance: the key row and its organization's primary deployment id. */
export interface CachedApiKey {
  apiKeyId: string;
  organizationId: string;
  scopes: string[];
  expiresAt: Date | null;
  lastUsedAt: Date | null;
  deploymentId: string | null;
}

/**
 * The process's caches. Each is dropped on every instance through the bus when what it holds changes;
 * the TTLs bound how long a lost invalidation can matter.
 */
export class Caches {
  /** resolve-deployment answers per user_id (5 minutes: docs/metering.md, Caches). */
  readonly resolve: TtlCache<ResolvedDeployment>;
  /** The cost table and tool map: read on every metered call, changed only by operators. */
  readonly costs: TtlCache<CostTable>;
  /** Rate-limit terms (tier, overrides) of deployments named by service calls; null = no such deployment. */
  readonly terms: TtlCache<DeploymentTerms | null>;
  /** Plans of organizations and users (highest of their organizations) for the hourly limit. */
  readonly plans: TtlCache<Plan>;

  /**
   * Principals (docs/adr/0005-cached-checks.md): API keys by the hash of the key, deployments (with
   * their secret hash, terms, status and flags) by id, null for an unknown id. Dropped on every instance
   * by 'principal-cache' (a key revoked, a secret rotated, flags, a member's power taken back, an
   * organization deleted) and 'terms-cache' (tier, status, overrides). New keys and deployments need no
   * message: nobody can have cached an id that did not exist.
   */
  readonly apiKeys: TtlCache<CachedApiKey>;
  readonly deployments: TtlCache<CachedDeployment | null>;
  /**
   * Balance rows an advisory check may read without a round trip, for at most `balanceTtlMs`; written
   * through by this instance's deductions, dropped on every instance by grants, refunds and adjustments
   * ('balance-cache', message: a deployment id, or empty for all). A check never refuses on a cached row.
   */
  readonly balances: TtlCache<CachedRows['balance']>;

  constructor(clock: Clock, bus: Bus, ttl: { principalTtlMs: number; balanceTtlMs: number } = { principalTtlMs: MINUTE, balanceTtlMs: SECOND }) {
    this.resolve = new TtlCache(clock, 5 * MINUTE);
    this.costs = new TtlCache(clock, MINUTE, 1);
    bus.subscribe('resolve-cache', () => this.resolve.clear());
    this.terms = new TtlCache(clock, 30 * SECOND);
    this.plans = new TtlCache(clock, MINUTE);
    bus.subscribe('cost-cache', () => this.costs.clear());
    this.apiKeys = new TtlCache(clock, ttl.principalTtlMs, 100_000);
    this.deployments = new TtlCache(clock, ttl.principalTtlMs, 100_000);
    this.balances = new TtlCache(clock, ttl.balanceTtlMs, 100_000);
    const dropPrincipals = () => {
      this.apiKeys.clear();
      this.deployments.clear();
    };
    bus.subscribe('principal-cache', dropPrincipals);
    bus.subscribe('terms-cache', () => {
      this.terms.clear();
      dropPrincipals();
      // A tier or override change moves the allocation: cached balances are stale with it.
      this.balances.clear();
    });
    bus.subscribe('balance-cache', (deploymentId) => {
      if (/^[0-9a-f-]{36}$/i.test(deploymentId)) this.balances.delete(deploymentId);
      else this.balances.clear();
    });
    bus.subscribe('plan-cache', () => this.plans.clear());
  }
}
