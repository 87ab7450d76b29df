import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { SECRETS_FILE } from '../lib/data-dir.js';
import { ApiError, UsageError } from './exit-codes.js';

type Env = Record<string, string | undefined>;

/** A secret from the environment, else from the development secrets `creditgate serve` stored in DATA_DIR. */
export function readSecret(name: string, env: Env = process.env): string | undefined {
  if (env[name]) return env[name];
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
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`${flag === undefined ? 'CREDITGATE_URL' : '--url'} must be an http(s) URL, got "${url}"`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new UsageError(`--url must be an http(s) URL, got "${url}"`);
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

export function adminApi(url: string, env: Env = process.env): AdminApi {
  const key = readSecret('ADMIN_API_KEY', env);
  if (!key) throw new UsageError('ADMIN_API_KEY is not set and no development secrets were found in DATA_DIR');
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
