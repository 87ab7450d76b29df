import { type Ctx, systemCtx } from '../src/context.js';
import type { Database } from '../src/db/client.js';
import type { FastifyInstance } from 'fastify';
import { createApiKey } from '../src/modules/api-keys/service.js';
import { findLedgerMismatches, type Reconciliation } from '../src/modules/credits/ledger.js';
import { budgetsChanged } from '../src/modules/credits/budgets.js';
import { changePurchased } from '../src/modules/credits/service.js';
import { setOverrides } from '../src/modules/deployments/service.js';
import { createOrganization } from '../src/modules/organizations/service.js';

/**
 * Tenants for the benchmark, made through the service layer as test/harness.ts makes them: a
 * metered tier (growth: 20,000 monthly credits) plus a large purchased grant, so every deduction
 * runs the two-bucket arithmetic (the monthly bucket runs dry on the hot deployment, then purchased
 * credits pay) and nothing is ever refused for credits.
 */
export const BENCH_TIER = 'growth';
export const BENCH_GRANT = 10_000_000;

export interface Tenant {
  organizationId: string;
  deploymentId: string;
  apiKey: string;
}

export interface Seeded {
  many: Tenant[];
  hot: Tenant;
  ms: number;
}

export interface Verification {
  /** findLedgerMismatches(db): deployments whose ledger, balance and usage records disagree. */
  mismatches: number;
  sample: Reconciliation[];
  usageSuccess: number;
  usageFailed: number;
  ledgerDeducts: number;
  /** Credits gone from the balances: SUM(monthly_used) + grants − SUM(purchased_balance). */
  spent: number;
}

function operatorCtx(app: FastifyInstance): Ctx {
  return { ...systemCtx(app.deps), actor: { type: 'operator' } };
}

async function createTenant(ctx: Ctx, slug: string): Promise<Tenant> {
  const { organization, deployment } = await createOrganization(ctx, { name: `Bench ${slug}`, slug, tier: BENCH_TIER });
  await ctx.db.transaction((tx) =>
    changePurchased(tx, { deploymentId: deployment.id, amount: BENCH_GRANT, reason: 'benchmark grant', actor: 'operator', now: ctx.clock.now() }),
  );
  const { key } = await createApiKey(ctx, { organizationId: organization.id, name: 'bench', scopes: ['read', 'write'] });
  await addBudgets(ctx, organization.id, deployment.id);
  return { organizationId: organization.id, deploymentId: deployment.id, apiKey: key };
}

/**
 * `BENCH_BUDGETS=1..3`: that many block budgets on each tenant, all applying to every record and never
 * reached (docs/budgets.md): the organization's per day, the deployment's per month, each tool's per
 * hour. Measures what counting in budget windows costs the record path.
 */
const BENCH_BUDGETS = Math.min(3, Math.max(0, Number(process.env.BENCH_BUDGETS ?? 0)));

async function addBudgets(ctx: Ctx, organizationId: string, deploymentId: string): Promise<void> {
  if (BENCH_BUDGETS === 0) return;
  const budgets = [
    { scope: 'organization', deployment: null, tool: null, window: 'day' },
    { scope: 'deployment', deployment: deploymentId, tool: null, window: 'month' },
    { scope: 'tool', deployment: null, tool: '*', window: 'hour' },
  ].slice(0, BENCH_BUDGETS);
  const now = ctx.clock.now();
  await ctx.db.transaction(async (tx) => {
    await budgetsChanged(tx, organizationId);
    for (const b of budgets) {
      await tx.query(
        `INSERT INTO budgets (organization_id, scope, deployment_id, tool_name, limit_credits, window_kind, mode, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'block', $7, $7)`,
        [organizationId, b.scope, b.deployment, b.tool, 1_000_000_000_000, b.window, now],
      );
    }
  });
}

/** `count` tenants for "many deployments" and one more for "one hot deployment"; slugs start with `prefix`. */
export async function seedTenants(app: FastifyInstance, count: number, prefix = 'bench'): Promise<Seeded> {
  const started = performance.now();
  const ctx = operatorCtx(app);
  const many: Tenant[] = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      many[i] = await createTenant(ctx, `${prefix}-${i}`);
    }
  };
  await Promise.all(Array.from({ length: app.deps.db.kind === 'postgres' ? 8 : 1 }, worker));
  const hot = await createTenant(ctx, `${prefix}-hot`);
  // The hot deployment takes thousands of calls a minute: a per-deployment rate limit (docs/limits.md,
  // growth 10,000/min) would answer 429 and the run would measure the limiter's refusals.
  await setOverrides(ctx, hot.deploymentId, { api_rate_limit: 1_000_000_000 });
  // A production database has planner statistics; a freshly filled one gets them here.
  await app.deps.db.query('ANALYZE');
  return { many, hot, ms: Math.round(performance.now() - started) };
}

export async function verifyAccounting(db: Database, tenants: number): Promise<Verification> {
  const mismatches = await findLedgerMismatches(db);
  const rows = await db.query<Record<string, string>>(
    `SELECT (SELECT count(*) FROM usage_records WHERE success)::text AS usage_success,
            (SELECT count(*) FROM usage_records WHERE NOT success)::text AS usage_failed,
            (SELECT count(*) FROM credit_ledger WHERE kind = 'deduct')::text AS ledger_deducts,
            (SELECT COALESCE(SUM(monthly_used), 0) FROM credit_balances)::text AS monthly_used,
            (SELECT COALESCE(SUM(purchased_balance), 0) FROM credit_balances)::text AS purchased`,
  );
  const r = rows[0]!;
  return {
    mismatches: mismatches.length,
    sample: mismatches.slice(0, 3),
    usageSuccess: Number(r.usage_success),
    usageFailed: Number(r.usage_failed),
    ledgerDeducts: Number(r.ledger_deducts),
    spent: Number(r.monthly_used) + tenants * BENCH_GRANT - Number(r.purchased),
  };
}
