import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type Actor, actingAs, type Ctx, type Deps } from '../context.js';
import { AppError, UnauthorizedError } from '../errors.js';
import { type KeyScope, type Principals, requireScope } from '../lib/principals.js';
import { API_KEY_PREFIX, safeEqual, sha256Hex } from '../lib/secrets.js';
import { registerFailedAuthCounting } from './auth-throttle.js';
import { isApiPath } from './route-prefixes.js';

/**
 * How a route authenticates, declared in its `config.auth`. The onRequest hook below runs it before
 * the body is parsed or validated, so an unauthenticated caller gets 401 and learns nothing else.
 *   public          no credentials (health, docs, the entitlement check's body credentials)
 *   apiKey          organization API key as Bearer (MCP stdio mode), with `config.scope`
 *   service         X-MCP-Service-Key (MCP service mode)
 *   apiKeyOrService either of the two (the service key wins when sent)
 *   admin           X-Admin-Key (docs/operator.md)
 *   metrics         X-Admin-Key, or Bearer METRICS_TOKEN when it is set (GET /metrics: docs/operations-metrics.md)
 *   deployment      X-Deployment-ID + X-Deployment-Secret
 *   deploymentOrApiKey  the deployment headers when X-Deployment-ID is sent, else an organization API key
 *                   (Bearer, as the OpenAI SDKs send it, or X-API-Key) acting for its primary deployment
 *   user            a signed-in user's access token (Bearer JWT)
 *   account         the application API: a user's access token, or an organization API key as
 *                   Bearer cg_… or X-API-Key (its scope is judged per permission, docs/accounts.md)
 */
export type AuthMode =
  | 'public'
  | 'apiKey'
  | 'service'
  | 'apiKeyOrService'
  | 'admin'
  | 'metrics'
  | 'deployment'
  | 'deploymentOrApiKey'
  | 'user'
  | 'account';

type ApiKeyPrincipal = Principals['apiKey'];
type DeploymentPrincipal = Principals['deployment'];

/**
 * How each credential is checked. The modules that own the credentials do it (app.ts hands their
 * functions to registerAuth), so this layer imports none of them (ARCHITECTURE.md, Layers).
 */
export interface CredentialChecks {
  /** A user's access token: its user and live session (modules/auth/service.ts). */
  accessToken(deps: Deps, token: string): Promise<{ userId: string; sessionId: string }>;
  /** An organization API key with its primary deployment (modules/metering/state.ts). */
  apiKey(deps: Deps, key: string | undefined): Promise<ApiKeyPrincipal>;
  /** X-Deployment-ID and X-Deployment-Secret (modules/deployments/service.ts). */
  deployment(deps: Deps, id: string | undefined, secret: string | undefined): Promise<DeploymentPrincipal>;
}

type AuthResult =
  | { kind: 'public'; ctx: Ctx }
  | { kind: 'apiKey'; ctx: Ctx; principal: ApiKeyPrincipal }
  | { kind: 'service'; ctx: Ctx }
  | { kind: 'admin'; ctx: Ctx }
  | { kind: 'metrics'; ctx: Ctx }
  | { kind: 'deployment'; ctx: Ctx; deployment: DeploymentPrincipal }
  | { kind: 'user'; ctx: Ctx; userId: string; sessionId: string };

declare module 'fastify' {
  interface FastifyInstance {
    deps: Deps;
  }
  interface FastifyContextConfig {
    auth?: AuthMode;
    scope?: KeyScope;
    /** A deployment route that spends credits or sends on the deployment's behalf: refused while it is suspended. */
    spends?: boolean;
  }
  interface FastifyRequest {
    authResult?: AuthResult;
  }
}

export function ctxFor(request: FastifyRequest, actor: Actor): Ctx {
  return actingAs(request.server.deps, actor, request.ip, request.headers['user-agent']);
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

export function bearerToken(request: FastifyRequest): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header(request, 'authorization') ?? '');
  return match?.[1];
}

async function authenticate(request: FastifyRequest, mode: AuthMode, scope: KeyScope | undefined, check: CredentialChecks): Promise<AuthResult> {
  const { config } = request.server.deps;
  switch (mode) {
    case 'public':
      return { kind: 'public', ctx: ctxFor(request, { type: 'system' }) };
    case 'service':
    case 'admin': {
      const [name, expected] = mode === 'service' ? ['x-mcp-service-key', config.mcpServiceKey] : ['x-admin-key', config.adminApiKey];
      const key = header(request, name);
      if (!key || !safeEqual(key, expected)) throw new UnauthorizedError(`Missing or invalid ${mode === 'service' ? 'X-MCP-Service-Key' : 'X-Admin-Key'}`);
      return { kind: mode, ctx: ctxFor(request, { type: mode === 'service' ? 'service' : 'operator' }) };
    }
    case 'metrics': {
      // The operator key keeps working; a scraper sends the token it was given, which opens nothing else.
      if (header(request, 'x-admin-key') !== undefined || config.metricsToken === undefined) return authenticate(request, 'admin', scope, check);
      const token = bearerToken(request);
      // Compared as digests: constant time whatever the lengths.
      if (!token || !safeEqual(sha256Hex(token), sha256Hex(config.metricsToken))) {
        throw new UnauthorizedError('Missing or invalid credentials: send Authorization: Bearer <METRICS_TOKEN> or X-Admin-Key');
      }
      return { kind: 'metrics', ctx: ctxFor(request, { type: 'system' }) };
    }
    case 'apiKeyOrService':
      return authenticate(request, header(request, 'x-mcp-service-key') !== undefined ? 'service' : 'apiKey', scope, check);
    case 'user': {
      const token = bearerToken(request);
      if (!token || token.startsWith(API_KEY_PREFIX)) throw new UnauthorizedError('Sign in: send a user access token');
      const { userId, sessionId } = await check.accessToken(request.server.deps, token);
      return { kind: 'user', ctx: ctxFor(request, { type: 'user', userId }), userId, sessionId };
    }
    case 'account': {
      const token = bearerToken(request);
      const apiKey = header(request, 'x-api-key') ?? (token?.startsWith(API_KEY_PREFIX) ? token : undefined);
      if (apiKey === undefined) return authenticate(request, 'user', scope, check);
      const principal = await check.apiKey(request.server.deps, apiKey);
      const actor: Actor = { type: 'api_key', apiKeyId: principal.apiKeyId, organizationId: principal.organizationId };
      return { kind: 'apiKey', ctx: ctxFor(request, actor), principal };
    }
    case 'deploymentOrApiKey': {
      if (header(request, 'x-deployment-id') !== undefined) return authenticate(request, 'deployment', scope, check);
      const principal = await check.apiKey(request.server.deps, header(request, 'x-api-key') ?? bearerToken(request));
      if (scope) requireScope(principal, scope);
      const actor: Actor = { type: 'api_key', apiKeyId: principal.apiKeyId, organizationId: principal.organizationId };
      return { kind: 'apiKey', ctx: ctxFor(request, actor), principal };
    }
    case 'apiKey': {
      const principal = await check.apiKey(request.server.deps, bearerToken(request));
      if (scope) requireScope(principal, scope);
      const actor: Actor = { type: 'api_key', apiKeyId: principal.apiKeyId, organizationId: principal.organizationId };
      return { kind: 'apiKey', ctx: ctxFor(request, actor), principal };
    }
    case 'deployment': {
      const deployment = await check.deployment(request.server.deps, header(request, 'x-deployment-id'), header(request, 'x-deployment-secret'));
      const actor: Actor = { type: 'deployment', deploymentId: deployment.id, organizationId: deployment.organization_id };
      return { kind: 'deployment', ctx: ctxFor(request, actor), deployment };
    }
  }
}

/** Every API route must say how it authenticates; a route without `config.auth` fails the boot. */
export function registerAuth(app: FastifyInstance, check: CredentialChecks): void {
  app.addHook('onRoute', (route) => {
    if (isApiPath(route.url) && !(route.config as { auth?: AuthMode } | undefined)?.auth) {
      throw new Error(`route ${route.method} ${route.url} declares no config.auth`);
    }
  });
  app.addHook('onRequest', async (request) => {
    const config = request.routeOptions.config as { auth?: AuthMode; scope?: KeyScope; spends?: boolean } | undefined;
    if (config?.auth) request.authResult = await authenticate(request, config.auth, config.scope, check);
    // docs/decisions.md, Suspended deployments: a suspended deployment may read (quotas, entitlements) but not spend or send.
    if (config?.spends && request.authResult?.kind === 'deployment' && request.authResult.deployment.status !== 'active') {
      throw new AppError('DEPLOYMENT_SUSPENDED', 'This deployment is suspended: it can read its quotas and entitlements, but not spend or send');
    }
  });
  // A 401 on /api/v1 counts a failure of the client IP, and becomes 429 once it has failed too often.
  registerFailedAuthCounting(app);
}

function resultOf(request: FastifyRequest): AuthResult {
  if (!request.authResult) throw new Error(`route ${request.url} has no authentication result`);
  return request.authResult;
}

/** The API key principal of an `apiKey` route; `scope` adds a requirement that depends on the body. */
export function apiKeyOf(request: FastifyRequest, scope?: KeyScope): { principal: ApiKeyPrincipal; ctx: Ctx } {
  const result = resultOf(request);
  if (result.kind !== 'apiKey') throw new Error('not an API key route');
  if (scope) requireScope(result.principal, scope);
  return result;
}

export function deploymentOf(request: FastifyRequest): { deployment: DeploymentPrincipal; ctx: Ctx } {
  const result = resultOf(request);
  if (result.kind !== 'deployment') throw new Error('not a deployment route');
  return result;
}

/** The context of any authenticated route (service, admin, public, or either-key routes). */
export function ctxOf(request: FastifyRequest): Ctx {
  return resultOf(request).ctx;
}

/** For `apiKeyOrService` routes: the API key's principal, or null when the service key was used. */
export function principalOf(request: FastifyRequest): ApiKeyPrincipal | null {
  const result = resultOf(request);
  return result.kind === 'apiKey' ? result.principal : null;
}

/** The signed-in user of a `user` route (or of an `account` route called with a user token). */
export function userOf(request: FastifyRequest): { userId: string; sessionId: string; ctx: Ctx } {
  const result = resultOf(request);
  if (result.kind !== 'user') throw new UnauthorizedError('This call needs a signed-in user, not an API key');
  return result;
}
