import type { FastifyInstance } from 'fastify';

/** Self-hosted /api paths of the seed: /api/users/me, /api/email/test. */
export async function selfHostedRoutes(_app: FastifyInstance): Promise<void> {}
