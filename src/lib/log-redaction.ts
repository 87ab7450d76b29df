import type { FastifyRequest, RouteOptions } from 'fastify';
import pino from 'pino';

/**
 * Secrets never reach logs, including secrets in URLs (docs/accounts.md, "Secrets in logs"). Headers
 * are covered by the logger's redact paths (app.ts, REDACT_PATHS); this file covers the URL, which pino
 * would otherwise log verbatim with every request. The rule: every token-shaped value anywhere in the
 * URL — any path segment, any query name or value, after percent-decoding (so `%2F` and other escapes
 * hide nothing) — is logged as `[redacted]` (tokenShaped below). Routes may also declare secret path
 * parameters (`config.secretParams`) and a few query names are always secret: those are hidden
 * whatever their shape, a second net for values the shape rule would let through (a short or
 * mangled token in a known place).
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
 * misplaced `?api_key=`, `?password=`, `?client_secret=`, `?x-admin-key=`, `?signature=`, an OAuth
 * `?code=`, `?session=`): any name holding one of these words, without case, after percent-decoding
 * (docs/operations.md, "Secrets in logs"). It hides some harmless values (`?zipcode=`, `?author=`):
 * hiding too much in a log costs nothing, too little leaks.
 */
const SECRET_QUERY_NAME = /pass|pwd|secret|token|key|auth|sig|session|jwt|code|credential|private/i;

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
 * The prefixes of the secrets this service issues (lib/secrets.ts, auth, invitations, webhooks) and of
 * the payment processor's: a value starting with one, followed by at least 8 characters of which one is
 * a digit or a capital, is a secret even when too short for the general rule (a truncated token).
 */
const SECRET_PREFIX = /^(?:cginv_|cgev_|cgrt_|cgds_|cg_|whsec_|sk_live_|sk_test_|rk_live_|rk_test_)/;
/** Candidate runs: a prefixed secret (with base64's `+/=` too), or any run of base62/base64url characters. */
const RUN = /(?:cginv_|cgev_|cgrt_|cgds_|cg_|whsec_|sk_live_|sk_test_|rk_live_|rk_test_)[A-Za-z0-9+/=_-]*|[A-Za-z0-9_-]{20,}/g;
/** A span of base64 characters (standard and URL-safe), judged whole when it is base64 rather than a path (base64Span). */
const SPAN = /[A-Za-z0-9+/=_-]+/g;
/** A path piece: lower-case letters, `-` and `_` only (or empty: `//`, a leading `/`). */
const PATH_WORD = /^[a-z_-]*$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const MIXED = /[0-9A-Z]/;

/**
 * Token-shaped (docs/accounts.md, "Secrets in logs"): a run of 20 or more base62/base64url characters
 * (`A-Z a-z 0-9 _ -`) holding at least one digit or capital letter, unless it is a UUID; or a known
 * secret prefix followed by 8 or more characters holding a digit or capital. UUIDs are ids, not
 * secrets, and stay readable; so do words and slugs (`template-deployments`, `search_documents`),
 * which a random token of that length is all but certain not to look like (the chance that 20 random
 * base62 characters hold no digit and no capital is about 3 in 10^8).
 */
export function isTokenShaped(run: string): boolean {
  const prefix = SECRET_PREFIX.exec(run);
  if (prefix) {
    const rest = run.slice(prefix[0].length);
    if (rest.length >= 8 && MIXED.test(rest)) return true;
  }
  return run.length >= 20 && MIXED.test(run) && !UUID.test(run);
}

/**
 * Percent-decoding that a stray or malformed escape cannot stop (one bad `%` would make
 * decodeURIComponent give up on the whole piece, and an escape inside a token would then split it):
 * each run of escapes is decoded on its own, ASCII ones always, and the whole is decoded again, up to
 * three times, so a double-encoded token (`%2541`) is seen too.
 */
function decodedForSearch(raw: string): string {
  let text = raw;
  for (let round = 0; round < 3 && text.includes('%'); round++) {
    const next = text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (escapes) => {
      try {
        return decodeURIComponent(escapes);
      } catch {
        return escapes.replace(/%([0-9A-Fa-f]{2})/g, (sequence, hex: string) => {
          const code = Number.parseInt(hex, 16);
          return code < 0x80 ? String.fromCharCode(code) : sequence;
        });
      }
    });
    if (next === text) break;
    text = next;
  }
  return text;
}

/**
 * One piece of a URL (a path segment, a query name or value) with every token-shaped run replaced by
 * `[redacted]`. A piece with none is returned exactly as sent; one with a token is written decoded and
 * re-escaped around the `[redacted]` (`invitations%2F[redacted]`), so what is left is still readable.
 */
export function redactTokens(raw: string): string {
  const text = decodedForSearch(raw);
  let out = '';
  let last = 0;
  for (const [start, end] of secretRuns(text)) {
    out += `${encodeURIComponent(text.slice(last, start))}${REDACTED}`;
    last = end;
  }
  return last === 0 ? raw : out + encodeURIComponent(text.slice(last));
}

/**
 * Whether a span of base64 characters is one value: it holds `+` or `=` (which paths and words do not),
 * or `/` between pieces none of which is a path word. A standard base64 secret (`openssl rand -base64`,
 * the format docs/operations-metrics.md suggests for METRICS_TOKEN) is then judged whole, not as the
 * pieces between its `+/=`, each of which may be too short to look like a token; `invitations/cginv_…`
 * stays a path whose token alone is hidden.
 */
function base64Span(span: string): boolean {
  if (/[+=]/.test(span)) return true;
  const pieces = span.split('/');
  return pieces.length > 1 && !pieces.some((piece) => PATH_WORD.test(piece));
}

/** [start, end) of every token-shaped run of `text`, in order. */
function secretRuns(text: string): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  for (const span of text.matchAll(SPAN)) {
    if (base64Span(span[0]) && isTokenShaped(span[0])) {
      runs.push([span.index, span.index + span[0].length]);
      continue;
    }
    for (const match of span[0].matchAll(RUN)) {
      if (isTokenShaped(match[0])) runs.push([span.index + match.index, span.index + match.index + match[0].length]);
    }
  }
  return runs;
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

  /** The URL with every token-shaped value, secret path segment and secret query value replaced by `[redacted]`. */
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
    return parts.map((part, i) => (hidden.has(i) ? REDACTED : redactTokens(part))).join('/');
  }
}

function redactQuery(query: string): string {
  return query
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      const rawName = eq === -1 ? pair : pair.slice(0, eq);
      if (SECRET_QUERY_NAME.test(decodedForSearch(rawName))) return `${rawName}=${REDACTED}`;
      // Any other parameter, whatever its name (`?foo=<token>`), and the name itself: the shape rule.
      return eq === -1 ? redactTokens(pair) : `${redactTokens(rawName)}=${redactTokens(pair.slice(eq + 1))}`;
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

/**
 * Fields of a database error that quote the statement or its values: PGlite attaches the statement
 * (`query`), every parameter (`params`) and its options (`queryOptions`) to its errors; PostgreSQL's
 * `detail` quotes key values and failing rows (`Key (lower(email))=(…) already exists`) and
 * `internalQuery` a function's statement. Parameters hold emails, password hashes and tokens.
 */
const DATABASE_ERROR_FIELDS = ['query', 'params', 'queryOptions', 'detail', 'internalQuery'];

type SerializedError = Record<string, unknown> & { aggregateErrors?: unknown[] };

function withoutDatabaseValues(serialized: unknown): void {
  if (typeof serialized !== 'object' || serialized === null) return;
  const err = serialized as SerializedError;
  for (const field of DATABASE_ERROR_FIELDS) delete err[field];
  for (const inner of err.aggregateErrors ?? []) withoutDatabaseValues(inner);
  // Errors held in other fields are serialized the same way (pino's err serializer recurses).
  for (const value of Object.values(err)) if (typeof value === 'object' && value !== null && 'stack' in value) withoutDatabaseValues(value);
}

/**
 * The logger's `err` serializer (docs/operations.md, "Secrets in logs"): pino's, without the fields of
 * a database error that quote statements and values (DATABASE_ERROR_FIELDS). The code, constraint,
 * table, column and message stay: enough to find the statement in the code.
 */
export function errorSerializer(err: Error): ReturnType<typeof pino.stdSerializers.err> {
  const serialized = pino.stdSerializers.err(err);
  withoutDatabaseValues(serialized);
  return serialized;
}
