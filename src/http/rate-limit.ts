import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { HOUR, MINUTE } from '../clock.js';
import type { Deps } from '../context.js';
import { Type } from 'typebox';
import { AppError } from '../errors.js';
import { isUuid } from '../lib/ids.js';
import type { Decision, WindowSpec } from '../lib/rate-limiter.js';
import { PLAN_HOURLY_LIMIT, PLANS, type Plan, TIER_TABLE } from '../lib/tiers.js';
import { type DeploymentTerms, effectiveTerms } from '../lib/terms.js';
import { isApiPath, isIntegrationApi, isOperatorApi, usesFlatShape } from './route-prefixes.js';

/**
 * Rate limits at the HTTP edge (docs/limits.md).
 *   tier  every /api/v1/* route but the operator API: requests per sliding minute of the deployment
 *         the call acts for (deployment headers, the API key's deployment, the service call's
 *         deployment_id); the tier's limit or the deployment's override.
 *   plan  the application API: requests per sliding hour of the API key's organization, the
 *         signed-in user (the highest plan among their organizations) or the client IP.
 * Unlimited subjects get no headers. Routes that learn their deployment only in the handler (the
 * entitlement check, whose credentials are in the body) declare `config.rateLimit: 'handler'` and call
 * `limitDeployment` once the credentials are proven, so nobody can spend another deployment's window.
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    rateLimit?: 'handler' | 'none';
  }
}

export type LimitClass = 'tier' | 'plan' | 'none';

export function limitClassOf(url: string): LimitClass {
  if (isOperatorApi(url)) return 'none';
  if (isIntegrationApi(url)) return 'tier';
  if (isApiPath(url)) return 'plan';
  return 'none';
}

/** The minute window of a deployment, or none when its tier (or override) is unlimited. */
export function deploymentWindows(deploymentId: string, terms: DeploymentTerms, now: Date): WindowSpec[] {
  const limit = effectiveTerms(terms, now).apiRateLimit;
  return limit === null ? [] : [{ subject: `dep:${deploymentId}`, name: 'minute', limit, windowMs: MINUTE }];
}

function planWindow(subject: string, plan: Plan): WindowSpec[] {
  return [{ subject, name: 'hour', limit: PLAN_HOURLY_LIMIT[plan], windowMs: HOUR }];
}

/** An organization key without a deployment has no tier: it gets the smallest tier's minute limit. */
const NO_DEPLOYMENT_LIMIT = TIER_TABLE.sandbox.apiRateLimit!;

/** A deployment's terms, cached; a read that raced a tier or override change is answered but not kept (TtlCache.load). */
function termsOf(deps: Deps, deploymentId: string): Promise<DeploymentTerms | null> {
  return deps.caches.terms.load(deploymentId, async () => {
    const rows = await deps.db.query<DeploymentTerms>(
      `SELECT tier, billing_anchor, override_monthly_credits, override_api_rate_limit, override_ai_tokens_limit, override_expires_at
       FROM deployments WHERE id = $1`,
      [deploymentId],
      'rate_limit_terms',
    );
    return rows[0] ?? null;
  });
}

const rank = (plan: Plan) => PLANS.indexOf(plan);

async function planOf(deps: Deps, kind: 'org' | 'user', id: string): Promise<Plan> {
  const key = `${kind}:${id}`;
  const cached = deps.caches.plans.get(key);
  if (cached !== undefined) return cached;
  const rows = await deps.db.query<{ plan: string }>(
    kind === 'org'
      ? 'SELECT plan FROM organizations WHERE id = $1'
      : `SELECT o.plan FROM organization_members m JOIN organizations o ON o.id = m.organization_id
         WHERE m.user_id = $1 AND o.deleted_at IS NULL`,
    [id],
    kind === 'org' ? 'rate_limit_org_plan' : 'rate_limit_user_plans',
  );
  const plans = rows.map((r) => r.plan).filter((p): p is Plan => (PLANS as readonly string[]).includes(p));
  const plan = plans.reduce<Plan>((best, p) => (rank(p) > rank(best) ? p : best), 'free');
  deps.caches.plans.set(key, plan);
  return plan;
}

function field(source: unknown, name: string): string | undefined {
  const value = (source as Record<string, unknown> | null | undefined)?.[name];
  return typeof value === 'string' ? value : undefined;
}

async function tierWindows(request: FastifyRequest): Promise<WindowSpec[]> {
  const deps = request.server.deps;
  const now = deps.clock.now();
  const auth = request.authResult;
  switch (auth?.kind) {
    case 'deployment':
      return deploymentWindows(auth.deployment.id, auth.deployment, now);
    case 'apiKey': {
      const d = auth.principal.deployment;
      if (d) return deploymentWindows(d.deployment_id, d, now);
      return [{ subject: `org:${auth.principal.organizationId}`, name: 'minute', limit: NO_DEPLOYMENT_LIMIT, windowMs: MINUTE }];
    }
    case 'service': {
      // The service key acts for the deployment its call names; without one it is treated as enterprise (unlimited).
      const id = field(request.body, 'deployment_id') ?? field(request.query, 'deployment_id');
      if (id === undefined || !isUuid(id)) return [];
      const terms = await termsOf(deps, id);
      return terms ? deploymentWindows(id, terms, now) : [];
    }
    default:
      return [];
  }
}

async function planWindows(request: FastifyRequest): Promise<WindowSpec[]> {
  const deps = request.server.deps;
  const auth = request.authResult;
  switch (auth?.kind) {
    case 'apiKey':
      return planWindow(`org:${auth.principal.organizationId}`, await planOf(deps, 'org', auth.principal.organizationId));
    case 'user':
      return planWindow(`user:${auth.userId}`, await planOf(deps, 'user', auth.userId));
    default:
      return planWindow(`ip:${request.ip}`, 'free');
  }
}

/** X-RateLimit-* of the window closest to refusing, and the IETF fields (draft-ietf-httpapi-ratelimit-headers) of every window. */
export function rateLimitHeaders(decision: Decision): Record<string, string> {
  const tightest = decision.windows.reduce((a, b) => (b.remaining < a.remaining ? b : a));
  const waitMs = tightest.remaining === 0 ? Math.max(tightest.retryMs, 1) : tightest.bucketEndsMs;
  const resetEpoch = Math.ceil((decision.nowMs + waitMs) / 1000);
  return {
    'x-ratelimit-limit': String(tightest.limit),
    'x-ratelimit-remaining': String(tightest.remaining),
    'x-ratelimit-reset': String(resetEpoch),
    'ratelimit-policy': decision.windows.map((w) => `"${w.name}";q=${w.limit};w=${w.windowMs / 1000}`).join(', '),
    ratelimit: decision.windows
      .map((w) => `"${w.name}";r=${w.remaining};t=${Math.ceil((w.remaining === 0 ? Math.max(w.retryMs, 1) : w.bucketEndsMs) / 1000)}`)
      .join(', '),
  };
}

/** Count the request against its windows; headers on the reply; 429 when a window is full. */
export async function enforce(request: FastifyRequest, reply: FastifyReply, windows: WindowSpec[]): Promise<void> {
  if (windows.length === 0) return;
  const deps = request.server.deps;
  const decision = await deps.limiter.hit(windows);
  const headers = rateLimitHeaders(decision);
  reply.headers(headers);
  deps.metrics.rateLimitDecisions.inc({ backend: decision.backend, outcome: decision.allowed ? 'allowed' : 'refused' });
  if (!decision.allowed) {
    const seconds = Math.max(1, Math.ceil(decision.retryMs / 1000));
    throw new AppError(
      'RATE_LIMITED',
      `Rate limit exceeded. Retry in ${seconds} seconds.`,
      {},
      { ...headers, 'x-ratelimit-remaining': '0', 'retry-after': String(seconds) },
    );
  }
}

/** For 'handler' routes: limit by a deployment once its credentials are proven. */
export async function limitDeployment(
  request: FastifyRequest,
  reply: FastifyReply,
  deployment: DeploymentTerms & { id: string },
): Promise<void> {
  await enforce(request, reply, deploymentWindows(deployment.id, deployment, request.server.deps.clock.now()));
}

/** Runs after authentication (onRequest) and body parsing, before validation: bad requests count too. */
export function registerRateLimits(app: FastifyInstance): void {
  // Every limited route documents its 429 (and the OpenAPI completeness test holds us to it).
  app.addHook('onRoute', (route) => {
    // The operator API is not rate limited, but every /api/v1 path may answer 429 to an IP throttled for failed authentication (http/auth-throttle.ts).
    const throttledForFailures = isIntegrationApi(route.url);
    if (!throttledForFailures && (route.config?.rateLimit === 'none' || limitClassOf(route.url) === 'none')) return;
    route.schema ??= {};
    const schema = route.schema as { response?: Record<string, unknown> };
    schema.response ??= {};
    schema.response[429] ??= Type.Ref(usesFlatShape(route.url) ? 'FlatError' : 'EnvelopeError', {
      description: 'RATE_LIMITED: the rate limit is reached; Retry-After says when to come back',
    });
  });
  app.addHook('preValidation', async (request, reply) => {
    const mode = request.routeOptions.config?.rateLimit;
    if (mode === 'handler' || mode === 'none') return;
    const cls = limitClassOf(request.routeOptions.url ?? '');
    if (cls === 'none') return;
    await enforce(request, reply, cls === 'tier' ? await tierWindows(request) : await planWindows(request));
  });
}
