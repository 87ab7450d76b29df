import type { FastifyRequest } from 'fastify';
import type { Actor, Ctx, Deps } from '../context.js';
import { UnauthorizedError } from '../errors.js';
import { safeEqual } from '../lib/secrets.js';
import { authenticateDeployment, type DeploymentRow } from '../modules/deployments/service.js';
import { type ApiKeyPrincipal, loadApiKeyPrincipal, requireScope } from '../modules/metering/state.js';

declare module 'fastify' {
  interface FastifyInstance {
    deps: Deps;
  }
}

export function ctxFor(request: FastifyRequest, actor: Actor): Ctx {
  return {
    ...request.server.deps,
    actor,
    ip: request.ip,
    userAgent: request.headers['user-agent'],
  };
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

export function bearerToken(request: FastifyRequest): string | undefined {
  const value = header(request, 'authorization');
  if (!value) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(value);
  return match?.[1];
}

/** Organization API key as Bearer (seed A), with the scope the route needs. */
export async function apiKeyAuth(
  request: FastifyRequest,
  scope: 'read' | 'write' | 'admin',
): Promise<{ principal: ApiKeyPrincipal; ctx: Ctx }> {
  const principal = await loadApiKeyPrincipal(request.server.deps, bearerToken(request));
  requireScope(principal, scope);
  const ctx = ctxFor(request, { type: 'api_key', apiKeyId: principal.apiKeyId, organizationId: principal.organizationId });
  return { principal, ctx };
}

export function hasServiceKey(request: FastifyRequest): boolean {
  return header(request, 'x-mcp-service-key') !== undefined;
}

/** X-MCP-Service-Key (seed B), compared in constant time. */
export function serviceAuth(request: FastifyRequest): Ctx {
  const key = header(request, 'x-mcp-service-key');
  if (!key || !safeEqual(key, request.server.deps.config.mcpServiceKey)) {
    throw new UnauthorizedError('Missing or invalid X-MCP-Service-Key');
  }
  return ctxFor(request, { type: 'service' });
}

/** X-Admin-Key (SPEC §11). */
export function adminAuth(request: FastifyRequest): Ctx {
  const key = header(request, 'x-admin-key');
  if (!key || !safeEqual(key, request.server.deps.config.adminApiKey)) {
    throw new UnauthorizedError('Missing or invalid X-Admin-Key');
  }
  return ctxFor(request, { type: 'operator' });
}

/** X-Deployment-ID + X-Deployment-Secret (seed: AI quota, webhook proxy). */
export async function deploymentAuth(request: FastifyRequest): Promise<{ deployment: DeploymentRow; ctx: Ctx }> {
  const deployment = await authenticateDeployment(
    request.server.deps,
    header(request, 'x-deployment-id'),
    header(request, 'x-deployment-secret'),
  );
  const ctx = ctxFor(request, { type: 'deployment', deploymentId: deployment.id, organizationId: deployment.organization_id });
  return { deployment, ctx };
}
