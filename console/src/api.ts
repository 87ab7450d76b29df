/**
 * The console's one way to the API (docs/console.md "Tokens"). The access token lives in this module's
 * memory only: never in localStorage or sessionStorage, so a script injected into the page finds none
 * to carry away. The refresh token is an HttpOnly cookie the browser sends to /console/session only.
 */

import { ApiError, errorOf } from './api-errors';
import { sameOriginNext } from './links';
import type { Schemas } from './types';

export type User = Schemas['User'];

export interface SessionAnswer {
  access_token: string;
  expires_in: number;
  user: User;
}

let accessToken: string | null = null;
let refreshing: Promise<SessionAnswer | null> | null = null;
const signedOutListeners = new Set<() => void>();

/** Called when the session is gone (refresh refused): the app shows the sign-in. */
export function onSignedOut(listener: () => void): () => void {
  signedOutListeners.add(listener);
  return () => signedOutListeners.delete(listener);
}

const CONSOLE_HEADERS = { 'x-creditgate-console': '1' };

async function sessionCall(method: string, path: string, body?: unknown): Promise<SessionAnswer> {
  const res = await fetch(path, {
    method,
    credentials: 'same-origin',
    headers: { ...CONSOLE_HEADERS, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? null : JSON.stringify(body),
  });
  if (!res.ok) throw await errorOf(res);
  const answer = ((await res.json()) as { data: SessionAnswer }).data;
  accessToken = answer.access_token;
  return answer;
}

export const signIn = (email: string, password: string) => sessionCall('POST', '/console/session', { email, password });
export const signUp = (email: string, password: string, full_name?: string) =>
  sessionCall('POST', '/console/session/signup', full_name ? { email, password, full_name } : { email, password });

/** Trade the session cookie for a new access token; null when there is no session. Concurrent callers share one. */
export function restoreSession(): Promise<SessionAnswer | null> {
  refreshing ??= sessionCall('POST', '/console/session/refresh')
    .catch((err: unknown) => {
      accessToken = null;
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return null;
      throw err;
    })
    .finally(() => {
      refreshing = null;
    });
  return refreshing;
}

export async function signOut(): Promise<void> {
  try {
    if (accessToken) {
      await fetch('/console/session', { method: 'DELETE', credentials: 'same-origin', headers: { ...CONSOLE_HEADERS, authorization: `Bearer ${accessToken}` } });
    }
  } finally {
    accessToken = null;
    for (const listener of signedOutListeners) listener();
  }
}

export interface Page<T> {
  data: T[];
  next: string | null;
}

interface CallOptions {
  query?: Record<string, string | number | undefined | null>;
  body?: unknown;
  accept?: string;
  headers?: Record<string, string>;
}

function urlOf(path: string, query?: CallOptions['query']): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== null && v !== '') params.set(k, String(v));
  const q = params.toString();
  return q ? `${path}?${q}` : path;
}

/** A signed-in call; a 401 gets one refresh and one retry. */
async function call(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  const send = () =>
    fetch(urlOf(path, options.query), {
      method,
      credentials: 'same-origin',
      headers: {
        ...(accessToken ? { authorization: `Bearer ${accessToken}` } : {}),
        ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
        accept: options.accept ?? 'application/json',
        ...options.headers,
      },
      body: options.body === undefined ? null : JSON.stringify(options.body),
    });
  let res = await send();
  if (res.status === 401) {
    const restored = await restoreSession();
    if (!restored) {
      for (const listener of signedOutListeners) listener();
      throw await errorOf(res);
    }
    res = await send();
  }
  if (!res.ok) throw await errorOf(res);
  return res;
}

/** An enveloped answer's `data`. */
export async function request<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
  const res = await call(method, path, options);
  return ((await res.json()) as { data: T }).data;
}

export const get = <T>(path: string, query?: CallOptions['query']) => request<T>('GET', path, { query });
export const post = <T>(path: string, body?: unknown, headers?: Record<string, string>) =>
  request<T>('POST', path, { body: body ?? {}, ...(headers ? { headers } : {}) });
export const put = <T>(path: string, body: unknown) => request<T>('PUT', path, { body });
export const del = <T>(path: string) => request<T>('DELETE', path);

/** A cursor-paginated list: its items and the next cursor. */
export async function list<T>(path: string, query: CallOptions['query'] = {}): Promise<Page<T>> {
  const res = await call('GET', path, { query });
  const body = (await res.json()) as { data: T[]; meta?: { next_cursor?: string | null } };
  return { data: body.data, next: body.meta?.next_cursor ?? null };
}

/** The raw text of an answer (CSV export). */
export async function text(path: string, query: CallOptions['query'], accept: string): Promise<string> {
  const res = await call('GET', path, { query, accept });
  return res.text();
}

/**
 * One part of a paged text answer (the usage CSV export): its text and the `Link: <…>; rel="next"`
 * target when more follows, null when it is the last. Only a path on this origin is followed, so
 * the access token never goes to a URL the answer names elsewhere (links.ts).
 */
export async function textPart(path: string, query: CallOptions['query'], accept: string): Promise<{ text: string; next: string | null }> {
  const res = await call('GET', path, { query, accept });
  return { text: await res.text(), next: sameOriginNext(res.headers.get('link'), window.location.origin) };
}

/** A unique Idempotency-Key for one user action (a retry of the same action reuses it). */
export function idempotencyKey(): string {
  return crypto.randomUUID();
}

/**
 * The operator's calls (/api/v1/admin/*): the admin key is typed into the operator page and held in
 * memory for that tab only; the answers use the flat error shape.
 */
export async function admin<T>(adminKey: string, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(path, {
    method,
    credentials: 'omit',
    headers: { 'x-admin-key': adminKey, accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? null : JSON.stringify(body),
  });
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}
