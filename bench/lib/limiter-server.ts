/**
 * creditgate for the rate-limiter benchmark (bench/limiter.ts): the production start path, like
 * bench/server.ts, with the calls that benchmark needs over IPC:
 *   seed       two enterprise deployments, each with an API key: one unlimited (its minute window is
 *              empty, so the limiter is never called) and one with an api_rate_limit override of 10⁹
 *              (the limiter runs on every request and never refuses). Everything else about them is
 *              the same, so stdio check-entitlement does the same work for both.
 *   decisions  creditgate_rate_limit_decisions_total by backend and outcome: proves which limiter
 *              decided and that the unlimited deployment never reached it.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { systemCtx } from '../../src/context.js';
import { serve } from '../../src/main.js';
import { createApiKey } from '../../src/modules/api-keys/service.js';
import { setOverrides } from '../../src/modules/deployments/service.js';
import { createOrganization } from '../../src/modules/organizations/service.js';
import { serveParent } from './child.js';

/** The parent imports only types from this file: importing it starts a server. */
const LIMITED_RATE = 1_000_000_000;

export interface LimiterTenant {
  deploymentId: string;
  apiKey: string;
}

export interface LimiterSeed {
  /** Enterprise tier, no override: unlimited, no windows, no limiter call. */
  unlimited: LimiterTenant;
  /** Enterprise tier with api_rate_limit = LIMITED_RATE: one minute window, checked on every request. */
  limited: LimiterTenant;
  /** The limited deployment's minute limit (X-RateLimit-Limit on its answers). */
  limit: number;
}

/** Counter values keyed `backend/outcome`, e.g. `redis/allowed`. */
export type Decisions = Record<string, number>;

async function tenant(app: FastifyInstance, slug: string): Promise<LimiterTenant> {
  const ctx = { ...systemCtx(app.deps), actor: { type: 'operator' as const } };
  const { organization, deployment } = await createOrganization(ctx, { name: `Limiter bench ${slug}`, slug, tier: 'enterprise' });
  const { key } = await createApiKey(ctx, { organizationId: organization.id, name: 'bench', scopes: ['read', 'write'] });
  return { deploymentId: deployment.id, apiKey: key };
}

async function seed(app: FastifyInstance): Promise<LimiterSeed> {
  const suffix = Date.now().toString(36);
  const unlimited = await tenant(app, `limiter-unlimited-${suffix}`);
  const limited = await tenant(app, `limiter-limited-${suffix}`);
  const ctx = { ...systemCtx(app.deps), actor: { type: 'operator' as const } };
  await setOverrides(ctx, limited.deploymentId, { api_rate_limit: LIMITED_RATE });
  await app.deps.db.query('ANALYZE');
  return { unlimited, limited, limit: LIMITED_RATE };
}

async function decisions(app: FastifyInstance): Promise<Decisions> {
  const out: Decisions = {};
  for (const v of (await app.deps.metrics.rateLimitDecisions.get()).values) {
    out[`${v.labels.backend}/${v.labels.outcome}`] = v.value;
  }
  return out;
}

const app = await serve(process.env);
serveParent((app.server.address() as AddressInfo).port, {
  seed: () => seed(app),
  decisions: () => decisions(app),
});
