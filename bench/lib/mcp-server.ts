/**
 * creditgate for the MCP metering benchmark (bench/mcp.ts): the production start path (serve() from
 * src/main.ts, like bench/lib/webhooks-server.ts) with the calls that benchmark needs over IPC:
 *   seed    a user; an organization on growth (20,000 monthly credits) that the user owns, with a
 *           purchased grant of GRANT through changePurchased and an api_rate_limit override of 10⁹
 *           (growth allows 10,000 requests a minute; a metered call is two or three of them); an
 *           organization API key with scopes read and write (stdio mode). Service mode finds the
 *           deployment with resolve-deployment by the user's id.
 *   verify  the accounting of that deployment: findLedgerMismatches over every deployment, usage
 *           records, deduct ledger rows, credits gone from the balance, invocations by status and the
 *           balance's reserved credits (open reservations).
 *   statements  SQL statements the service has run, by name (or the first characters of the text),
 *           counted by wrapping app.deps.db (as in webhooks-server.ts).
 *   flushStats  one short statement on every pool connection, so each backend publishes its pg_stat
 *           counters before the runner reads pg_stat_wal (see webhooks-server.ts).
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { systemCtx } from '../../src/context.js';
import { serve } from '../../src/main.js';
import { createApiKey } from '../../src/modules/api-keys/service.js';
import { findLedgerMismatches, type Reconciliation } from '../../src/modules/credits/ledger.js';
import { changePurchased } from '../../src/modules/credits/service.js';
import { setOverrides } from '../../src/modules/deployments/service.js';
import { costOfTool } from '../../src/modules/metering/costs.js';
import { createOrganization } from '../../src/modules/organizations/service.js';
import { createUser } from '../../src/modules/users/service.js';
import { serveParent } from './child.js';
import { countStatements, flushPoolStats } from './server-stats.js';

/** The parent imports only types from this file: importing it starts a server. */
const TIER = 'growth';
const GRANT = 100_000_000;
const RATE_LIMIT_OVERRIDE = 1_000_000_000;

export interface McpSeed {
  userId: string;
  organizationId: string;
  deploymentId: string;
  /** Organization API key (`cg_…`), scopes read and write. */
  apiKey: string;
  tier: string;
  grant: number;
  monthlyAllocation: number | null;
  rateLimitOverride: number;
  /** Credits one call of `tool` costs (its action in credit_costs). */
  tool: string;
  action: string;
  cost: number;
}

export interface McpVerification {
  /** findLedgerMismatches(db) over every deployment. */
  mismatches: number;
  sample: Reconciliation[];
  /** The seeded deployment's usage records, by outcome, and their credits (less refunds). */
  usageSuccess: number;
  usageFailed: number;
  usageCredits: number;
  ledgerDeducts: number;
  ledgerRefunds: number;
  /** Credits gone from the balance since seeding: monthly_used + GRANT − purchased_balance. */
  creditsSpent: number;
  /** credit_balances.reserved: credits held by reservations that are still open. */
  reserved: number;
  /** invocations rows by status (reserved = open reservation). */
  invocations: Record<string, number>;
}

let seeded: McpSeed | undefined;

async function seed(app: FastifyInstance, tool: string): Promise<McpSeed> {
  const ctx = { ...systemCtx(app.deps), actor: { type: 'operator' as const } };
  const suffix = Date.now().toString(36);
  const user = await createUser(ctx, { email: `mcp-bench-${suffix}@example.com`, fullName: 'MCP bench user' });
  const { organization, deployment } = await createOrganization(ctx, { name: `MCP bench ${suffix}`, slug: `mcp-bench-${suffix}`, tier: TIER, ownerUserId: user.id });
  await ctx.db.transaction((tx) => changePurchased(tx, { deploymentId: deployment.id, amount: GRANT, reason: 'benchmark grant', actor: 'operator', now: ctx.clock.now() }));
  await setOverrides(ctx, deployment.id, { api_rate_limit: RATE_LIMIT_OVERRIDE });
  const { key } = await createApiKey(ctx, { organizationId: organization.id, name: 'MCP bench', scopes: ['read', 'write'] });
  await app.deps.db.query('ANALYZE');
  const [balance] = await app.deps.db.query<{ monthly_allocation: number | null }>('SELECT monthly_allocation FROM credit_balances WHERE deployment_id = $1', [deployment.id]);
  const cost = await costOfTool(app.deps, tool);
  seeded = {
    userId: user.id,
    organizationId: organization.id,
    deploymentId: deployment.id,
    apiKey: key,
    tier: TIER,
    grant: GRANT,
    monthlyAllocation: balance?.monthly_allocation ?? null,
    rateLimitOverride: RATE_LIMIT_OVERRIDE,
    tool,
    action: cost.action,
    cost: cost.credits,
  };
  return seeded;
}

async function verify(app: FastifyInstance): Promise<McpVerification> {
  if (!seeded) throw new Error('verify before seed');
  const db = app.deps.db;
  const mismatches = await findLedgerMismatches(db);
  const [r] = await db.query<Record<string, string>>(
    `SELECT (SELECT count(*) FROM usage_records WHERE deployment_id = $1 AND success)::text AS usage_success,
            (SELECT count(*) FROM usage_records WHERE deployment_id = $1 AND NOT success)::text AS usage_failed,
            (SELECT COALESCE(SUM(quantity - refunded), 0) FROM usage_records WHERE deployment_id = $1 AND success)::text AS usage_credits,
            (SELECT count(*) FROM credit_ledger WHERE deployment_id = $1 AND kind = 'deduct')::text AS ledger_deducts,
            (SELECT count(*) FROM credit_ledger WHERE deployment_id = $1 AND kind = 'refund')::text AS ledger_refunds,
            monthly_used::text, purchased_balance::text, reserved::text
     FROM credit_balances WHERE deployment_id = $1`,
    [seeded.deploymentId],
  );
  const byStatus = await db.query<{ status: string; n: string }>('SELECT status, count(*)::text AS n FROM invocations WHERE deployment_id = $1 GROUP BY status', [
    seeded.deploymentId,
  ]);
  return {
    mismatches: mismatches.length,
    sample: mismatches.slice(0, 3),
    usageSuccess: Number(r!.usage_success),
    usageFailed: Number(r!.usage_failed),
    usageCredits: Number(r!.usage_credits),
    ledgerDeducts: Number(r!.ledger_deducts),
    ledgerRefunds: Number(r!.ledger_refunds),
    creditsSpent: Number(r!.monthly_used) + seeded.grant - Number(r!.purchased_balance),
    reserved: Number(r!.reserved),
    invocations: Object.fromEntries(byStatus.map((row) => [row.status, Number(row.n)])),
  };
}

const app = await serve(process.env);
const statements = countStatements(app.deps.db);
serveParent((app.server.address() as AddressInfo).port, {
  statements: async () => statements(),
  flushStats: () => flushPoolStats(app),
  seed: (args) => seed(app, (args as { tool: string }).tool),
  verify: () => verify(app),
});
