import type { FastifyInstance } from 'fastify';

/** Members, invitations and per-user permissions (SPEC §8). */
export async function memberRoutes(_app: FastifyInstance): Promise<void> {}
