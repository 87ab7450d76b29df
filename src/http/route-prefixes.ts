/**
 * The URL prefixes that decide how a request is treated: which error shape it gets, which rate limit,
 * whether its route must declare how it authenticates, whether its failed authentications are counted.
 * They are decided here and nowhere else. Each predicate takes a path: a route's pattern, or a
 * request's URL for the decisions taken before or without a route (errors, failed authentication).
 */

/** /api and the application API's own roots: the console's and the apps' routes (docs/limits.md, Rate limits). */
const API_PATH = /^\/(api|auth|organizations|invitations|billing|users|templates)(\/|$)/;

/**
 * The integration API, /api/v1/… (docs/openapi.md, Shapes; docs/limits.md): the flat error shape, the
 * deployment's minute limit, and failed authentication counted per client IP (docs/limits.md, Failed authentication).
 */
export function isIntegrationApi(url: string): boolean {
  return url.startsWith('/api/v1/');
}

/** The operator API, /api/v1/admin/… (docs/operator.md): part of the integration API, but not rate limited. */
export function isOperatorApi(url: string): boolean {
  return url === '/api/v1/admin' || url.startsWith('/api/v1/admin/');
}

/**
 * Any path of the API (/api/…, /auth/…, /organizations/…, …): its routes must declare `config.auth`,
 * and those outside the integration API are the application API, limited per hour by plan (docs/limits.md).
 */
export function isApiPath(url: string): boolean {
  return API_PATH.test(url);
}

/**
 * Which error shape a path answers with (docs/openapi.md, Shapes): the flat one on the integration API,
 * on /api/v1 itself and on the billing processor's webhooks (/webhooks/…); the envelope everywhere else.
 */
export function usesFlatShape(url: string): boolean {
  return isIntegrationApi(url) || url === '/api/v1' || url.startsWith('/webhooks/');
}

/**
 * The path a request's decisions are taken on: its route's pattern when one matched, else its URL's
 * path decoded. The router decodes before it matches, so `/%61pi/v1/…` reaches an /api/v1 route: a
 * decision on the raw URL would treat it as outside the integration API (its failed authentications
 * uncounted, its errors in the other shape).
 */
export function requestPath(request: { url: string; routeOptions?: { url?: string | undefined } }): string {
  const route = request.routeOptions?.url;
  if (route) return route;
  const q = request.url.indexOf('?');
  const path = q === -1 ? request.url : request.url.slice(0, q);
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}
