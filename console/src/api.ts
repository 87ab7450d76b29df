/**
 * The console's one way to the API (docs/console.md "Tokens"). The access token lives in this module's
 * memory only: never in localStorage or sessionStorage, so a script injected into the page finds none
 * to carry away. The refresh token is an HttpOnly cookie the browser sends to /console/session only.
 */

import createClient, { type FetchResponse, type MaybeOptionalInit } from 'openapi-fetch';
import { ApiError, errorOf } from './api-errors';
import { sameOriginNext } from './links';
import type { paths, Schemas } from './types';

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

/** Ends the session by its cookie (sent by the browser), with the access token too when one is held: an expired one changes nothing. */
export async function signOut(): Promise<void> {
  try {
    const headers: Record<string, string> = { ...CONSOLE_HEADERS, ...(accessToken ? { authorization: `Bearer ${accessToken}` } : {}) };
    await fetch('/console/session', { method: 'DELETE', credentials: 'same-origin', headers });
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
  query?: Record<string, string | number | boolean | undefined | null>;
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

/** The request with the access token this module holds now (a retry after a refresh carries the new one). */
function withToken(request: Request): Request {
  if (accessToken) request.headers.set('authorization', `Bearer ${accessToken}`);
  return request;
}

/**
 * Every signed-in call goes through here: the access token, one refresh and one retry on a 401, and an
 * answer that is not 2xx thrown as an ApiError (api-errors.ts). The copy for the retry is taken before
 * the first send: a request's body can be read once only.
 */
async function signedInFetch(request: Request): Promise<Response> {
  const retry = request.clone();
  let res = await fetch(withToken(request));
  if (res.status === 401) {
    const restored = await restoreSession();
    if (!restored) {
      for (const listener of signedOutListeners) listener();
      throw await errorOf(res);
    }
    res = await fetch(withToken(retry));
  }
  if (!res.ok) throw await errorOf(res);
  return res;
}

/** A signed-in call by path (textPart below: the CSV export, whose answer is not JSON). */
function call(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  return signedInFetch(
    new Request(urlOf(path, options.query), {
      method,
      credentials: 'same-origin',
      headers: {
        ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
        accept: options.accept ?? 'application/json',
        ...options.headers,
      },
      body: options.body === undefined ? null : JSON.stringify(options.body),
    }),
  );
}

/** A query parameter left empty (undefined, null, '') is not sent. */
const querySerializer = (query: unknown) => urlOf('', query as CallOptions['query']).slice(1);

/**
 * The typed client (openapi-fetch) over the routes of the generated OpenAPI types (types.ts): the path,
 * its parameters and body are checked against the route's schema, and the answer is typed by it. It
 * sends through signedInFetch, so an error answer is thrown as an ApiError and `data` is always there.
 */
export const client = createClient<paths>({ credentials: 'same-origin', headers: { accept: 'application/json' }, querySerializer, fetch: signedInFetch });
type TypedClient = typeof client;

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
/** The routes that answer a method. */
type PathsWith<M extends Method> = { [P in keyof paths]: paths[P] extends { [K in M]: object } ? P : never }[keyof paths];
type Operation<P extends keyof paths, M extends Method> = NonNullable<paths[P][M & keyof paths[P]]>;
type InitOf<P extends keyof paths, M extends Method> = MaybeOptionalInit<paths[P], M & keyof paths[P]>;
/** The init argument, optional when the route needs no parameter and no body. */
type InitArgs<Init> = undefined extends Init ? [init?: Init] : [init: Init];
/** The JSON body of a route's 2xx answer (undefined for a 204). */
type Body<P extends keyof paths, M extends Method, Init> = NonNullable<FetchResponse<Operation<P, M>, Init, 'application/json'>['data']>;
/** An envelope's `data` (`{data, meta}`); an answer without one as it is. */
type DataOf<B> = B extends { data: infer D } ? D : B;

type DataMethod<M extends Method> = <P extends PathsWith<M>, Init extends InitOf<P, M>>(url: P, ...init: InitArgs<Init>) => Promise<DataOf<Body<P, M, Init>>>;
type BodyMethod<M extends Method> = <P extends PathsWith<M>, Init extends InitOf<P, M>>(url: P, ...init: InitArgs<Init>) => Promise<Body<P, M, Init>>;
type ListMethod = <P extends PathsWith<'get'>, Init extends InitOf<P, 'get'>>(
  url: P,
  ...init: InitArgs<Init>
) => Promise<Page<DataOf<Body<P, 'get', Init>> extends readonly (infer Item)[] ? Item : never>>;

/** The one untyped step: the client's generic methods, called by a method name the types above checked. */
const send = (c: TypedClient, method: Method, url: string, init?: object) =>
  (c.request as (method: string, url: string, init?: object) => Promise<{ data?: unknown }>)(method, url, init).then((answer) => answer.data);
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;

const dataMethod = <M extends Method>(method: M) =>
  (async (url: string, init?: object) => {
    const body = await send(client, method, url, init);
    return isObject(body) && 'data' in body ? body.data : body;
  }) as DataMethod<M>;

/**
 * Typed calls that answer the envelope's `data`, e.g.
 * `api.GET('/organizations/{id}/budgets', { params: { path: { id } } })` is a `Promise<Budget[]>`;
 * `api.list` answers a cursor-paginated list's items and its next cursor (`meta.next_cursor`).
 * For the whole answer (its `meta`, its headers) use `client`.
 */
export const api = {
  GET: dataMethod('get'),
  POST: dataMethod('post'),
  PUT: dataMethod('put'),
  PATCH: dataMethod('patch'),
  DELETE: dataMethod('delete'),
  list: (async (url: string, init?: object) => {
    const body = await send(client, 'get', url, init);
    const meta = isObject(body) && isObject(body.meta) ? body.meta : {};
    return { data: isObject(body) && Array.isArray(body.data) ? body.data : [], next: typeof meta.next_cursor === 'string' ? meta.next_cursor : null };
  }) as ListMethod,
};

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
 * The operator's typed calls (/api/v1/admin/*), with the admin key typed into the operator page: sent
 * as X-Admin-Key and nowhere else, no cookie. The answers are flat (no envelope), as they are typed;
 * an error answer is thrown as an ApiError.
 */
export function operatorApi(adminKey: string) {
  const c = createClient<paths>({
    credentials: 'omit',
    headers: { 'x-admin-key': adminKey, accept: 'application/json' },
    querySerializer,
    fetch: async (request) => {
      const res = await fetch(request);
      if (!res.ok) throw await errorOf(res);
      return res;
    },
  });
  const bodyMethod = <M extends Method>(method: M) => ((url: string, init?: object) => send(c, method, url, init)) as BodyMethod<M>;
  return { GET: bodyMethod('get'), POST: bodyMethod('post'), PUT: bodyMethod('put'), PATCH: bodyMethod('patch'), DELETE: bodyMethod('delete') };
}
export type OperatorApi = ReturnType<typeof operatorApi>;
