import { existsSync, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import { SECRETS_FILE } from '../lib/data-dir.js';
import { ApiError, UsageError } from './exit-codes.js';

type Env = Record<string, string | undefined>;

/**
 * Whether a URL names this machine: `localhost` (and `*.localhost`), 127.0.0.0/8, `::1`, an IPv4
 * loopback address mapped to IPv6, or the unspecified address (`0.0.0.0`, `::`), which connects to
 * this machine. Only such a target may get the development secrets of DATA_DIR, and plain http
 * (docs/cli.md, "Operator commands").
 */
export function isLoopbackUrl(url: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  host = host.replace(/^\[|\]$/g, '').replace(/\.$/, '');
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  if (isIP(host) === 4) return host.startsWith('127.') || host === '0.0.0.0';
  if (isIP(host) === 6) return host === '::1' || host === '::' || /^::ffff:(?:127\.|7f[0-9a-f]{2}:)/.test(host);
  return false;
}

/** A URL as it may be echoed: without the user name and password before `@`. */
export function withoutUserinfo(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/*)[^/?#]*@/i, '$1');
}

/**
 * A secret from the environment, else from the development secrets `creditgate serve` stored in
 * DATA_DIR: those only for a service on this machine (`target` a loopback URL). A remote instance
 * never gets this machine's development keys (docs/cli.md, "Operator commands").
 */
export function readSecret(name: string, target: string, env: Env = process.env): string | undefined {
  if (env[name]) return env[name];
  if (!isLoopbackUrl(target)) return undefined;
  const file = join(resolve(env.DATA_DIR || './.creditgate'), SECRETS_FILE);
  if (!existsSync(file)) return undefined;
  try {
    return (JSON.parse(readFileSync(file, 'utf8')) as Record<string, string | undefined>)[name];
  } catch {
    throw new UsageError(`${file} is not valid JSON; set ${name} in the environment instead`);
  }
}

/** The running service: --url, else CREDITGATE_URL, else HOST and PORT as `serve` would listen. */
export function baseUrl(flag: string | undefined, env: Env = process.env): string {
  const url = flag ?? env.CREDITGATE_URL ?? `http://${env.HOST || '127.0.0.1'}:${env.PORT || '8080'}`;
  const source = flag === undefined ? 'CREDITGATE_URL' : '--url';
  // Echoed without its user name and password: an error line ends up in terminals, CI logs and tickets.
  const shown = withoutUserinfo(url);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`${source} must be an http(s) URL, got "${shown}"`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new UsageError(`${source} must be an http(s) URL, got "${shown}"`);
  if (parsed.username !== '' || parsed.password !== '') throw new UsageError(`${source} must not hold a user name or password, got "${shown}"`);
  return url.replace(/\/+$/, '');
}

/** A path with every interpolated value URL-encoded: path`/api/v1/admin/deployments/${id}`. */
export function path(strings: TemplateStringsArray, ...values: Array<string | number>): string {
  return strings.reduce((out, text, i) => out + text + (i < values.length ? encodeURIComponent(String(values[i])) : ''), '');
}

export interface AdminApi {
  readonly url: string;
  /** Send one request with the operator key; the parsed JSON answer, or an ApiError with the service's message. */
  send(method: string, path: string, body?: unknown): Promise<unknown>;
}

export interface AdminApiOptions {
  /** --insecure-http: send the key over plain http to a host that is not this machine (docs/cli.md). */
  allowInsecureHttp?: boolean;
}

/**
 * The operator API at `url`, with ADMIN_API_KEY. Refused before anything is sent: plain http to a
 * host other than this machine (the key would cross the network in clear) unless allowed, and a
 * missing key (the development secrets of DATA_DIR are read only for this machine).
 */
export function adminApi(url: string, env: Env = process.env, options: AdminApiOptions = {}): AdminApi {
  if (new URL(url).protocol === 'http:' && !isLoopbackUrl(url) && !options.allowInsecureHttp) {
    throw new UsageError(`refusing to send ADMIN_API_KEY over plain http to ${withoutUserinfo(url)}; use https, or --insecure-http on a network you trust`);
  }
  const key = readSecret('ADMIN_API_KEY', url, env);
  if (!key) {
    throw new UsageError(
      isLoopbackUrl(url)
        ? 'ADMIN_API_KEY is not set and no development secrets were found in DATA_DIR'
        : `ADMIN_API_KEY is not set (the development secrets in DATA_DIR are used only for a service on this machine, not ${new URL(url).host})`,
    );
  }
  return { url, send: (method, p, body) => request(url, method, p, { 'x-admin-key': key }, body) };
}

export async function request(url: string, method: string, p: string, headers: Record<string, string>, body?: unknown): Promise<unknown> {
  const res = await fetch(url + p, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  }).catch((err: Error & { cause?: { code?: string; message?: string } }) => {
    const why = err.cause?.code ?? err.cause?.message ?? err.message;
    throw new ApiError(`cannot reach creditgate at ${url} (${why}); is it running? (npm start)`);
  });
  const text = await res.text();
  if (!res.ok) throw new ApiError(describeFailure(res.status, text));
  if (text === '') return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

interface FieldMessage {
  field?: unknown;
  message?: unknown;
}

/**
 * One line from an error answer: the flat shape of /api/v1 (`{error, code, message, fields?}`), the
 * envelope (`{success: false, error: {code, message}}`), or whatever else the body holds.
 */
export function describeFailure(status: number, text: string): string {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const flat = body as { code?: unknown; message?: unknown; fields?: unknown; error?: { code?: unknown; message?: unknown } } | undefined;
  const source = typeof flat?.message === 'string' ? flat : typeof flat?.error === 'object' && flat.error !== null ? flat.error : undefined;
  if (typeof source?.message !== 'string') {
    const excerpt = oneLine(text).slice(0, 200);
    return `the service answered HTTP ${status}${excerpt ? `: ${excerpt}` : ''}`;
  }
  const message = oneLine(source.message);
  const fields = (Array.isArray(flat?.fields) ? (flat.fields as FieldMessage[]) : [])
    .map((f) => oneLine(`${String(f.field ?? '')} ${String(f.message ?? '')}`))
    .filter((f) => f !== '' && !message.includes(f));
  const code = typeof source.code === 'string' ? `${source.code}, ` : '';
  return `${message}${fields.length > 0 ? ` (${fields.join('; ')})` : ''} [${code}HTTP ${status}]`;
}

const oneLine = (text: string): string => text.replace(/\s+/g, ' ').trim();
