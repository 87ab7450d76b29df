import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { MINUTE } from '../clock.js';
import { AppError, flatErrorBody } from '../errors.js';
import { type Decision, hashedSubject, retryAfterSeconds, type WindowSpec } from '../lib/rate-limiter.js';
import { rateLimitHeaders } from './rate-limit.js';
import { isIntegrationApi, requestPath } from './route-prefixes.js';

/**
 * Failed authentication on /api/v1 is throttled per client IP (docs/limits.md, "Failed authentication").
 * Every 401 answered on /api/v1 (a wrong or revoked API key, service key, deployment credentials,
 * entitlement-check body credentials, admin key) counts one failure for the client IP in a shared
 * sliding minute. Past FAILED_AUTH_LIMIT failures, a request from that IP whose credentials fail is
 * answered 429 with Retry-After instead of 401. A request whose credentials are valid is answered
 * normally: nobody guesses a valid key, and an office or NAT sharing one address with a guesser must
 * not be locked out. The refusal is taken where the 401 would be sent, so it costs no database read
 * beyond the 401's own (a mistyped key still costs none) and only failing requests touch the window.
 */
export const FAILED_AUTH_LIMIT = 100;
export const FAILED_AUTH_WINDOW_MS = MINUTE;

const failureWindow = (ip: string): WindowSpec[] => [
  { subject: hashedSubject('auth-fail', ip), name: 'failed-auth', limit: FAILED_AUTH_LIMIT, windowMs: FAILED_AUTH_WINDOW_MS },
];

/**
 * The 429 that replaces a throttled IP's 401. Written here rather than by the error handler because the
 * 401 has already been serialized when its failure is counted; every /api/v1 path uses the flat shape.
 */
function throttledAnswer(reply: FastifyReply, decision: Decision): string {
  const seconds = retryAfterSeconds(decision);
  const refusal = new AppError('RATE_LIMITED', `Too many failed authentications from this address. Retry in ${seconds} seconds.`);
  reply.code(refusal.status);
  reply.headers({ ...rateLimitHeaders(decision), 'x-ratelimit-remaining': '0', 'retry-after': String(seconds) });
  reply.type('application/json; charset=utf-8');
  return JSON.stringify(flatErrorBody(refusal));
}

/**
 * After the answer is decided: a 401 on /api/v1 is one failure of the client IP, or, when the IP is
 * already past its failures, a 429. Refusals do not count, so waiting as told is enough; successful
 * requests never reach the window.
 */
export function registerFailedAuthCounting(app: FastifyInstance): void {
  // Callback style: every answer passes here, and only a 401 has anything to wait for.
  app.addHook('onSend', (request: FastifyRequest, reply, payload, done) => {
    if (reply.statusCode !== 401 || !isIntegrationApi(requestPath(request))) {
      done(null, payload);
      return;
    }
    const { limiter } = request.server.deps;
    // A throw inside becomes a rejection, as it was in the async hook.
    Promise.resolve()
      .then(() => limiter.hit(failureWindow(request.ip)))
      .then(
        (decision) => done(null, decision.allowed ? payload : throttledAnswer(reply, decision)),
        (err: unknown) => done(err as FastifyError),
      );
  });
}
