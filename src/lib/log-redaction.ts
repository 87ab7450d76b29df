import type { FastifyRequest, RouteOptions } from 'fastify';

/**
 * SPEC §8: secrets never reach logs, including secrets in URL paths (an invitation token in
 * `/invitations/{token}`). Headers are covered by the logger's redact paths (app.ts, REDACT_PATHS);
 * this file covers the URL, which pino would otherwise log verbatim with every request.
 */
declare module 'fastify' {
  interface FastifyContextConfig {
    /** Path parameters of this route that are bearer secrets: logged as `[redacted]`, whatever the answer. */
    secretParams?: readonly string[];
  }
}

export const REDACTED = '[redacted]';

/**
 * Query parameters whose value is a secret in any URL, routed or not (a mailed `?token=` link, a
 * misplaced `?api_key=`). Compared without case.
 */
const SECRET_QUERY_PARAMS = new Set(['token', 'access_token', 'refresh_token', 'api_key', 'apikey', 'key', 'secret', 'deployment_secret']);

interface SecretRoute {
  /** The route's path segments (no empty ones): literal text, or a parameter (`:name`), or `*`. */
  segments: string[];
  /** Indexes in `segments` of the secret parameters. */
  secret: Set<number>;
}

const paramName = (segment: string): string | null => (segment.startsWith(':') ? (/^:([A-Za-z0-9_]+)/.exec(segment)?.[1] ?? null) : null);

function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/**
 * The one list of where secrets sit in URLs, filled from the routes themselves (`config.secretParams`),
 * so a new route with a token in its path declares it once, beside its schema. Matching works on the
 * raw URL, so it also holds for requests no route answered (a 404 under `/invitations/<token>/…`).
 */
export class SecretRoutes {
  private readonly routes: SecretRoute[] = [];
  private readonly urls = new Set<string>();

  /** For the `onRoute` hook: remember a route that declares secret path parameters (once per URL: GET and HEAD share one). */
  add(route: Pick<RouteOptions, 'url' | 'config'>): void {
    const names = route.config?.secretParams ?? [];
    if (names.length === 0 || this.urls.has(route.url)) return;
    this.urls.add(route.url);
    const segments = route.url.split('/').filter(Boolean);
    const secret = new Set<number>();
    segments.forEach((segment, i) => {
      const name = paramName(segment);
      if (name !== null && names.includes(name)) secret.add(i);
    });
    if (secret.size !== names.length) throw new Error(`${route.url}: secretParams ${names.join(', ')} are not all path parameters`);
    this.routes.push({ segments, secret });
  }

  /** The URL with every secret path segment and secret query value replaced by `[redacted]`. */
  redactUrl(url: string): string {
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const query = q === -1 ? null : url.slice(q + 1);
    return this.redactPath(path) + (query === null ? '' : `?${redactQuery(query)}`);
  }

  private redactPath(path: string): string {
    const parts = path.split('/');
    // Empty segments (`//`) are skipped when matching, as a lenient router would, so they cannot hide a token.
    const positions = parts.flatMap((part, i) => (part === '' ? [] : [i]));
    const hidden = new Set<number>();
    for (const route of this.routes) {
      // Walk the route's segments while the literal ones match: a secret parameter reached that way is
      // hidden even when a later segment differs (the request went to no route, but still held the token).
      for (let i = 0; i < route.segments.length && i < positions.length; i++) {
        const pattern = route.segments[i]!;
        const position = positions[i]!;
        if (pattern === '*') break;
        if (route.secret.has(i)) hidden.add(position);
        // Literal text compared without case: hiding too much in a log costs nothing, too little leaks.
        else if (paramName(pattern) === null && decoded(parts[position]!).toLowerCase() !== pattern.toLowerCase()) break;
      }
    }
    return hidden.size === 0 ? path : parts.map((part, i) => (hidden.has(i) ? REDACTED : part)).join('/');
  }
}

function redactQuery(query: string): string {
  return query
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      const name = decoded(eq === -1 ? pair : pair.slice(0, eq)).toLowerCase();
      return SECRET_QUERY_PARAMS.has(name) ? `${eq === -1 ? pair : pair.slice(0, eq)}=${REDACTED}` : pair;
    })
    .join('&');
}

/** What a request looks like to the serializer: a Fastify request, or (in a careless log line) the raw one. */
type LoggedRequest = Partial<Pick<FastifyRequest, 'method' | 'url' | 'host' | 'ip' | 'headers' | 'socket'>>;

/**
 * The logger's one `req` serializer: Fastify's default fields, with the URL redacted. Headers are left
 * out, as Fastify's default does, so no credential header can ride along with a request.
 */
export function requestSerializer(secrets: SecretRoutes): (req: LoggedRequest) => Record<string, unknown> {
  return (req) => ({
    method: req.method,
    url: typeof req.url === 'string' ? secrets.redactUrl(req.url) : undefined,
    version: req.headers?.['accept-version'],
    host: req.host ?? req.headers?.host,
    remoteAddress: req.ip ?? req.socket?.remoteAddress,
    remotePort: req.socket?.remotePort,
  });
}
