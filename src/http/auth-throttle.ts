import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { MINUTE } from '../clock.js';
import { AppError } from '../errors.js';
import { hashedSubject, retryAfterSeconds, type WindowSpec } from '../lib/rate-limiter.js';
import { rateLimitHeaders } from './rate-limit.js';

/**
 * SPEC §8 account safety: "failed authentication on /api/v1/* is throttled per client IP".
 * Every 401 answered on /api/v1 (a wrong or revoked API key, service key, deployment credentials,
 * entitlement-check body credentials, admin key) counts one failure for the client IP in a shared
 * sliding minute. An IP past FAILED_AUTH_LIMIT failures is refused on every /api/v1 path, the
 * operator API included, with 429 and Retry-After *before* its credentials are looked at — also
 * correct ones (as Unkey and GitHub do): a guesser learns nothing while throttled, and the check costs
 * no database read. Successful requests never count. docs/limits.md.
 */
export const FAILED_AUTH_LIMIT = 100;
export const FAILED_AUTH_WINDOW_MS = MINUTE;

const isThrottledPath = (url: string) => url.startsWith('/api/v1/');

const failureWindow = (ip: string): WindowSpec[] => [
  { subject: hashedSubject('auth-fail', ip), name: 'failed-auth', limit: FAILED_AUTH_LIMIT, windowMs: FAILED_AUTH_WINDOW_MS },
];

/**
 * Before authentication (the auth hook's first step): 429 for an IP over its failures. Only IPs this
 * instance saw fail recently (`caches.authFailures`) are looked up in the shared window, so a client
 * that never fails costs nothing extra; on another instance an attacker gets at most one more 401
 * before that instance checks it too.
 */
export async function refuseThrottledClient(request: FastifyRequest): Promise<void> {
  if (!isThrottledPath(request.url)) return;
  const { limiter, caches } = request.server.deps;
  if (caches.authFailures.get(request.ip) === undefined) return;
  const decision = await limiter.hit(failureWindow(request.ip), { peek: true });
  if (decision.allowed) return;
  const seconds = retryAfterSeconds(decision);
  throw new AppError(
    'RATE_LIMITED',
    `Too many failed authentications from this address. Retry in ${seconds} seconds.`,
    {},
    { ...rateLimitHeaders(decision), 'x-ratelimit-remaining': '0', 'retry-after': String(seconds) },
  );
}

/** After the answer is decided: a 401 on /api/v1 is one failure of the client IP (refusals themselves are 429 and never count). */
export function registerFailedAuthCounting(app: FastifyInstance): void {
  // Callback style: every answer passes here, and only a 401 has anything to wait for.
  app.addHook('onSend', (request, reply, payload, done) => {
    if (reply.statusCode !== 401 || !isThrottledPath(request.url)) {
      done(null, payload);
      return;
    }
    const { limiter, caches } = request.server.deps;
    caches.authFailures.set(request.ip, true);
    // A throw inside becomes a rejection, as it was in the async hook.
    Promise.resolve()
      .then(() => limiter.hit(failureWindow(request.ip)))
      .then(
        () => done(null, payload),
        (err: unknown) => done(err as FastifyError),
      );
  });
}
