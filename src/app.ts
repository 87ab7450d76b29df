import Fastify, { type FastifyInstance } from 'fastify';
import { buildSerializer } from './http/serializers.js';
import type { Clock } from './clock.js';
import type { Config } from './config.js';
import type { Deps } from './context.js';
import type { Database } from './db/client.js';
import { registerAuth } from './http/auth.js';
import { registerErrorHandling, sendError, toAppError } from './http/error-handler.js';
import { registerInputGuard } from './http/input-guard.js';
import { registerJsonBody } from './http/json-body.js';
import { registerUuidCase } from './http/uuid-case.js';
import { registerIdempotencyKeyCheck } from './http/idempotency-key.js';
import { registerMetricsListener } from './http/metrics-listener.js';
import { registerOpenApi } from './http/openapi.js';
import { validatorCompiler } from './http/validation.js';
import { type Bus, LocalBus, RedisBus } from './lib/bus.js';
import { Caches } from './lib/caches.js';
import { errorSerializer, requestSerializer, SecretRoutes } from './lib/log-redaction.js';
import { lazyChildLoggerFactory, logDestination, OneLinePerRequest } from './lib/logger.js';
import { Metrics } from './lib/metrics.js';
import { LocalRateLimiter, type RateLimiter, RedisRateLimiter } from './lib/rate-limiter.js';
import { registerRateLimits } from './http/rate-limit.js';
import { registerRequestMetrics } from './http/request-metrics.js';
import { aiRoutes } from './modules/ai/routes.js';
import { BalanceReads, DeductionBatcher } from './modules/credits/index.js';
import { apiKeyRoutes } from './modules/api-keys/routes.js';
import { auditRoutes } from './modules/audit/routes.js';
import { billingProxyRoutes } from './modules/billing/proxy-routes.js';
import { adminBudgetRoutes, budgetRoutes } from './modules/budgets/routes.js';
import { adminAutoTopUpRoutes, autoTopUpRoutes } from './modules/billing/auto-top-up-routes.js';
import { billingRoutes } from './modules/billing/routes.js';
import { stripeWebhookRoutes } from './modules/billing/stripe-routes.js';
import { deploymentRoutes } from './modules/deployments/routes.js';
import { authenticateDeployment } from './modules/deployments/service.js';
import { memberRoutes } from './modules/members/routes.js';
import { selfHostedRoutes } from './modules/self-hosted/routes.js';
import { adminOrganizationRoutes } from './modules/admin/organization-routes.js';
import { adminCostRoutes } from './modules/admin/cost-routes.js';
import { adminMailboxRoutes } from './modules/admin/mailbox-routes.js';
import { adminRoutes } from './modules/admin/routes.js';
import { adminTemplateRoutes } from './modules/admin/template-routes.js';
import { authRoutes } from './modules/auth/routes.js';
import { authenticateAccessToken } from './modules/auth/service.js';
import { entitlementRoutes } from './modules/entitlements/routes.js';
import { watchOutboxBacklog } from './modules/events/backlog.js';
import { healthRoutes } from './modules/health/routes.js';
import { homeRoutes } from './modules/home/routes.js';
import { CONSOLE_DIR, consoleIsBuilt, consoleRoutes } from './modules/console/routes.js';
import { meteringRoutes } from './modules/metering/routes.js';
import { loadApiKeyPrincipal } from './modules/metering/state.js';
import { organizationRoutes } from './modules/organizations/routes.js';
import { templateRoutes } from './modules/templates/routes.js';
import { balanceHistoryRoutes } from './modules/usage/balance-history.js';
import { usageRoutes } from './modules/usage/routes.js';
import { OutboundHttp } from './modules/webhooks/deliver.js';
import { organizationWebhookRoutes } from './modules/webhooks/organization-routes.js';
import { webhookProxyRoutes } from './modules/webhooks/routes.js';

declare module 'fastify' {
  interface FastifyInstance {
    routeList: Array<{ method: string; url: string; auth: string; hidden: boolean }>;
    /** Whether the console is built and served at /console (links for browsers go there). */
    consoleBuilt: boolean;
  }
}

export interface BuildOptions {
  config: Config;
  db: Database;
  clock: Clock;
  bus?: Bus;
  /** Where logs go (tests capture them); stdout when left out. */
  logStream?: NodeJS.WritableStream;
  /** Where the built console is; dist/console when left out (src/modules/console/routes.ts). */
  consoleRoot?: string;
}

/** Secrets never reach the logs: every header that carries one is redacted wherever headers are logged. */
const SECRET_HEADERS = ['authorization', '["x-api-key"]', '["x-mcp-service-key"]', '["x-admin-key"]', '["x-deployment-secret"]', 'cookie'];
export const REDACT_PATHS = SECRET_HEADERS.flatMap((h) => {
  const key = h.startsWith('[') ? h : `.${h}`;
  return [`headers${key}`, `req.headers${key}`, `*.headers${key}`];
});

/** The app without listening: plugins in a fixed order, then routes (used by main.ts and the tests). */
export async function buildApp(options: BuildOptions): Promise<FastifyInstance> {
  const { config, db, clock } = options;
  // Filled by the onRoute hook below from each route's config.secretParams; read by the req serializer.
  const secretRoutes = new SecretRoutes();
  const app = Fastify({
    logger: {
      level: config.logLevel,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      // Every logged request (Fastify's "incoming request", `{req}` in any log line) without secrets in its URL;
      // every logged error without the statement and values a database error carries.
      serializers: { req: requestSerializer(secretRoutes), err: errorSerializer },
      // JSON, or one pretty line per request (LOG_FORMAT; src/lib/logger.ts).
      ...logDestination(config.logFormat, options.logStream),
    },
    ...(config.logFormat === 'pretty' ? { logController: new OneLinePerRequest(secretRoutes) } : {}),
    // A request's logger is made when it first logs (src/lib/logger.ts).
    childLoggerFactory: lazyChildLoggerFactory,
    bodyLimit: 1024 * 1024,
    // Path ids may be as long as the bodies allow (invocation ids: 200); longer ones reach the schema and get a 400.
    routerOptions: { maxParamLength: 512 },
    // Errors the router raises before any route (bad URL encoding, over-long params) take the same shapes.
    frameworkErrors: (err, request, reply) => {
      sendError(reply, request, toAppError(err), clock);
    },
    trustProxy:
      typeof config.trustProxy === 'number'
        ? (_address: string, hop: number) => hop < (config.trustProxy as number)
        : config.trustProxy,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false } },
    // Response serializers built once per schema in a process (http/serializers.ts).
    schemaController: { compilersFactory: { buildSerializer } },
  });
  registerJsonBody(app); // UTF-8 checked before Fastify's own JSON parser (docs/input.md)
  const bus =
    options.bus ??
    (config.redisUrl
      ? new RedisBus(config.redisUrl, `${config.redisPrefix}bus:`, (err) => app.log.warn({ err: err.message }, 'redis bus error'))
      : new LocalBus());
  const metrics = new Metrics();
  const limiter = createLimiter(config, clock, app, metrics);
  const outbound = new OutboundHttp(config.webhookAllowPrivateNetworks, config.webhookAttemptTimeoutMs);
  // The provisioner's URL is the operator's: it may be private without opening tenants' webhooks (docs/templates.md).
  const provisionerOutbound =
    config.templateProvisionerAllowPrivate && !config.webhookAllowPrivateNetworks ? new OutboundHttp(true, config.webhookAttemptTimeoutMs) : outbound;
  const caches = new Caches(clock, bus, { principalTtlMs: config.principalCacheMs, balanceTtlMs: config.balanceCacheMs });
  const deductions = new DeductionBatcher(
    { db, config, caches, metrics },
    {
      windowMs: config.deductBatchWindowMs,
      maxBatch: config.deductBatchMax,
      // PGlite has one connection: batches would only queue behind each other.
      maxInFlight: db.kind === 'pglite' ? 1 : config.deductBatchInFlight,
      rememberMs: config.deductBatchRememberMs,
    },
    (err, size) => app.log.warn({ err, size }, 'deduction batch failed; its requests run one by one'),
  );
  const balanceReads = new BalanceReads(db, undefined, metrics);
  const deps: Deps = { config, db, clock, bus, caches, limiter, metrics, outbound, provisionerOutbound, deductions, balanceReads, log: app.log };
  app.decorate('deps', deps);
  registerRequestMetrics(app);
  registerMetricsListener(app);
  watchOutboxBacklog(deps);
  // Every route registered, so a test can prove the OpenAPI document lists them all.
  const routeList: Array<{ method: string; url: string; auth: string; hidden: boolean }> = [];
  app.decorate('routeList', routeList);
  app.addHook('onRoute', (route) => secretRoutes.add(route));
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (method === 'HEAD') continue;
      const auth = (route.config as { auth?: string } | undefined)?.auth ?? 'public';
      routeList.push({ method, url: route.url, auth, hidden: (route.schema as { hide?: boolean } | undefined)?.hide === true });
    }
  });
  app.setValidatorCompiler(validatorCompiler);
  registerErrorHandling(app, clock);
  // The modules that own the credentials check them; http/ only asks (ARCHITECTURE.md, Layers).
  registerAuth(app, { accessToken: authenticateAccessToken, apiKey: loadApiKeyPrincipal, deployment: authenticateDeployment });
  registerRateLimits(app);
  registerInputGuard(app); // after auth and the rate limit, before validation and handlers: docs/input.md
  registerUuidCase(app); // after the guard: ids compare in lower case (docs/input.md, UUID ids)
  registerIdempotencyKeyCheck(app);
  await registerOpenApi(app, config.publicBaseUrl);

  const consoleRoot = options.consoleRoot ?? CONSOLE_DIR;
  app.decorate('consoleBuilt', consoleIsBuilt(consoleRoot));
  await app.register(homeRoutes, { consoleRoot });
  await app.register(consoleRoutes, { root: consoleRoot });
  await app.register(healthRoutes);
  await app.register(meteringRoutes);
  await app.register(entitlementRoutes);
  await app.register(aiRoutes);
  await app.register(adminRoutes);
  await app.register(adminCostRoutes);
  await app.register(adminOrganizationRoutes);
  await app.register(adminTemplateRoutes);
  await app.register(adminMailboxRoutes);
  await app.register(adminBudgetRoutes);
  await app.register(adminAutoTopUpRoutes);
  await app.register(authRoutes);
  await app.register(organizationRoutes);
  await app.register(memberRoutes);
  await app.register(apiKeyRoutes);
  await app.register(deploymentRoutes);
  await app.register(auditRoutes);
  await app.register(billingRoutes);
  await app.register(billingProxyRoutes);
  await app.register(stripeWebhookRoutes);
  await app.register(selfHostedRoutes);
  await app.register(webhookProxyRoutes);
  await app.register(organizationWebhookRoutes);
  await app.register(templateRoutes);
  await app.register(usageRoutes);
  await app.register(balanceHistoryRoutes);
  await app.register(budgetRoutes);
  await app.register(autoTopUpRoutes);
  // Start counting in the shared window from the first request when Redis is there (bounded wait).
  app.addHook('onReady', async () => {
    await limiter.ready(2_000);
  });
  app.addHook('onClose', async () => {
    await deductions.drain();
    metrics.close();
    if (!options.bus) await bus.close();
    await limiter.close();
    await outbound.close();
    if (provisionerOutbound !== outbound) await provisionerOutbound.close();
  });
  return app;
}

/** docs/limits.md, Redis outage: the shared window in Redis when REDIS_URL is set (falling back per instance while it is down), else in-process. */
function createLimiter(config: Config, clock: Clock, app: FastifyInstance, metrics: Metrics): RateLimiter {
  if (!config.redisUrl) return new LocalRateLimiter(clock);
  return new RedisRateLimiter(
    config.redisUrl,
    clock,
    {
      onOutage: (err) => {
        metrics.rateLimitOutages.inc();
        metrics.rateLimitFallback.set(1);
        app.log.error({ err: err.message }, 'rate limiter: Redis unreachable, counting per instance until it returns');
      },
      onRecovered: () => {
        metrics.rateLimitFallback.set(0);
        app.log.warn('rate limiter: Redis answers again, shared windows resumed');
      },
    },
    config.rateLimitTime,
    `${config.redisPrefix}rl:`,
    config.redisCommandTimeoutMs,
  );
}
