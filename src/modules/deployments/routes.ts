import type { FastifyInstance } from 'fastify';

/** An organization's deployments and secret rotation (SPEC §8). */
export async function deploymentRoutes(_app: FastifyInstance): Promise<void> {}
