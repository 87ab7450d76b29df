import type { FastifyInstance } from 'fastify';

/** Organization API keys (SPEC §8). */
export async function apiKeyRoutes(_app: FastifyInstance): Promise<void> {}
