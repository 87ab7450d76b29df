/**
 * creditgate for the AI proxy benchmark (bench/ai.ts): the production start path (AI_BASE_URL from the
 * environment, pointing at the stand-in) with these IPC calls:
 *   seed        an enterprise deployment (unlimited AI tokens: nothing to hold) and a launch one with an
 *               AI token limit of 10⁹ (every call holds and settles), no per-minute limit; a write key each
 *   verify      their AI usage records, holds still held, and findLedgerMismatches
 *   statements  SQL statements the service has run so far, by name or first characters (app.deps.db
 *               wrapped, as bench/lib/server-stats.ts does for the other benchmarks): the runner takes
 *               the difference over a known number of calls to get statements per call
 */
import type { AddressInfo } from 'node:net';
import { systemCtx } from '../../src/context.js';
import { serve } from '../../src/main.js';
import { createApiKey } from '../../src/modules/api-keys/service.js';
import { findLedgerMismatches } from '../../src/modules/credits/ledger.js';
import { setOverrides } from '../../src/modules/deployments/service.js';
import { createOrganization } from '../../src/modules/organizations/service.js';
import { serveParent } from './child.js';
import { countStatements } from './server-stats.js';

/** The parent imports only types from this file: importing it starts a server. */
export interface AiSeed {
  unlimitedKey: string;
  limitedKey: string;
}

export interface AiVerification {
  /** usage_records of metric ai_tokens of the two seeded deployments, and how many of them are estimates. */
  usageRecords: number;
  estimated: number;
  /** ai_reservations still held. */
  held: number;
  /** findLedgerMismatches(db) over every deployment. */
  mismatches: number;
}

const app = await serve(process.env);
const statements = countStatements(app.deps.db);
const deploymentIds: string[] = [];

serveParent((app.server.address() as AddressInfo).port, {
  statements: async () => statements(),
  seed: async (): Promise<AiSeed> => {
    const ctx = { ...systemCtx(app.deps), actor: { type: 'operator' as const } };
    const suffix = Date.now().toString(36);
    const tenant = async (tier: 'enterprise' | 'launch') => {
      const { organization, deployment } = await createOrganization(ctx, { name: `AI bench ${tier}`, slug: `ai-bench-${tier}-${suffix}`, tier });
      deploymentIds.push(deployment.id);
      if (tier !== 'enterprise') await setOverrides(ctx, deployment.id, { ai_tokens_limit: 1_000_000_000, api_rate_limit: 1_000_000_000 });
      const { key } = await createApiKey(ctx, { organizationId: organization.id, name: 'ai bench', scopes: ['read', 'write'] });
      return key;
    };
    return { unlimitedKey: await tenant('enterprise'), limitedKey: await tenant('launch') };
  },
  verify: async (): Promise<AiVerification> => {
    const db = app.deps.db;
    const [usage] = await db.query<{ n: number; estimated: number }>(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE metadata->>'estimated' = 'true')::int AS estimated
       FROM usage_records WHERE deployment_id = ANY($1::uuid[]) AND metric = 'ai_tokens'`,
      [deploymentIds],
    );
    const [held] = await db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM ai_reservations WHERE deployment_id = ANY($1::uuid[]) AND status = 'held'",
      [deploymentIds],
    );
    return { usageRecords: usage!.n, estimated: usage!.estimated, held: held!.n, mismatches: (await findLedgerMismatches(db)).length };
  },
});
