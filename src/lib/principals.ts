import { AppError } from '../errors.js';

/**
 * Who a request acts as, as the layers below the modules see it (ARCHITECTURE.md, Layers). The shapes
 * belong to the modules that load them, and each module names its own here by adding a member to this
 * interface (declaration merging, as the routes' `config` is added to Fastify's):
 *   apiKey      an organization API key with its primary deployment (modules/metering/state.ts)
 *   deployment  a deployment's row, proven by its credentials (modules/deployments/service.ts)
 * so http/auth.ts and lib/caches.ts hold them without importing a module.
 */
// biome-ignore lint/suspicious/noEmptyInterface: filled in by the modules that own the principals (see above)
export interface Principals {}

export type KeyScope = 'read' | 'write' | 'admin';

/** An API key may do only what its scopes allow (docs/accounts.md). */
export function requireScope(principal: { scopes: readonly string[] }, scope: KeyScope): void {
  if (!principal.scopes.includes(scope)) {
    throw new AppError('INSUFFICIENT_SCOPE', `This API key lacks the "${scope}" scope`);
  }
}
