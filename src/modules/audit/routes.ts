import type { FastifyInstance } from 'fastify';

/** The audit log of an organization (SPEC §8). */
export async function auditRoutes(_app: FastifyInstance): Promise<void> {}
