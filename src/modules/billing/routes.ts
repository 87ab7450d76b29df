import type { FastifyInstance } from 'fastify';

/** Billing read endpoints (seed E, SPEC §9). */
export async function billingRoutes(_app: FastifyInstance): Promise<void> {}
