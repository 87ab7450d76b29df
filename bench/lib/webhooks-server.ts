/**
 * creditgate for the webhook proxy benchmark (bench/webhooks.ts): the production start path, like
 * bench/server.ts, with the calls that benchmark needs over IPC:
 *   seed    growth-tier deployments (20,000 monthly credits), each with a purchased grant of GRANT
 *           through changePurchased and an api_rate_limit override of 10⁹ (growth allows 10,000
 *           requests a minute; the run would otherwise measure 429s): one "hot" deployment and
 *           `spread` more. Returns their ids and secrets (X-Deployment-ID / X-Deployment-Secret).
 *   verify  the accounting of those deployments: findLedgerMismatches, usage records and ledger rows
 *           of webhook sends, credits gone from the balances, delivery records by status.
 *   statements  SQL statements the service has run, by name (or the first characters of the text),
 *           counted by wrapping app.deps.db: statements per send, exactly, without pg_stat's delays.
 *   flushStats  one short statement on every pool connection at once (not counted): a PostgreSQL
 *           backend publishes its pg_stat counters at the end of a transaction at most once a second,
 *           and an idle one only after 10 s, so the runner calls this (a second after the load) before
 *           it reads pg_stat_database / pg_stat_wal.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { systemCtx } from '../../src/context.js';
import { serve } from '../../src/main.js';
import { findLedgerMismatches, type Reconciliation } from '../../src/modules/credits/ledger.js';
import { changePurchased } from '../../src/modules/credits/service.js';
import { setOverrides } from '../../src/modules/deployments/service.js';
import { createOrganization } from '../../src/modules/organizations/service.js';
import { serveParent } from './child.js';
import { countStatements, flushPoolStats } from './server-stats.js';

/** The parent imports only types from this file: importing it starts a server. */
const TIER = 'growth';
const GRANT = 100_000_000;
const RATE_LIMIT_OVERRIDE = 1_000_000_000;

export interface WebhooksTenant {
  deploymentId: string;
  deploymentSecret: string;
}

export interface WebhooksSeed {
  /** The deployment that takes every send of the one-deployment variants. */
  hot: WebhooksTenant;
  /** Deployments the spread variant sends for, round-robin. */
  spread: WebhooksTenant[];
  tier: string;
  grant: number;
  monthlyAllocation: number | null;
  rateLimitOverride: number;
}

export interface WebhooksVerification {
  /** findLedgerMismatches(db) over every deployment. */
  mismatches: number;
  sample: Reconciliation[];
  /** The rest is summed over the seeded deployments. usage_records of metric webhook_send: */
  usageSuccess: number;
  usageFailed: number;
  /** Credits on successful webhook usage records, less refunds. */
  usageCredits: number;
  ledgerDeducts: number;
  ledgerRefunds: number;
  /** Credits gone from the balances since seeding: Σ monthly_used + grants − Σ purchased_balance. */
  creditsSpent: number;
  /** The hot deployment's balance. */
  hotMonthlyUsed: number;
  hotPurchasedBalance: number;
  /** webhook_deliveries rows of the proxy by status, and their credits_charged. */
  deliveries: Record<string, number>;
  creditsCharged: number;
  /** Deliveries that needed more than one attempt. */
  retried: number;
  /** pg_stat_user_tables: updates and HOT updates (no new index entries) by table, as published so far. */
  updates: Record<string, { updates: number; hot: number }>;
}

let seeded: WebhooksSeed | undefined;

async function tenant(app: FastifyInstance, slug: string): Promise<WebhooksTenant> {
  const ctx = { ...systemCtx(app.deps), actor: { type: 'operator' as const } };
  const { deployment, deploymentSecret } = await createOrganization(ctx, { name: `Webhooks bench ${slug}`, slug, tier: TIER });
  await ctx.db.transaction((tx) =>
    changePurchased(tx, { deploymentId: deployment.id, amount: GRANT, reason: 'benchmark grant', actor: 'operator', now: ctx.clock.now() }),
  );
  await setOverrides(ctx, deployment.id, { api_rate_limit: RATE_LIMIT_OVERRIDE });
  return { deploymentId: deployment.id, deploymentSecret };
}

async function seed(app: FastifyInstance, spreadCount: number): Promise<WebhooksSeed> {
  const suffix = Date.now().toString(36);
  const hot = await tenant(app, `webhooks-hot-${suffix}`);
  const spread: WebhooksTenant[] = [];
  for (let i = 0; i < spreadCount; i++) spread.push(await tenant(app, `webhooks-${i}-${suffix}`));
  await app.deps.db.query('ANALYZE');
  const [balance] = await app.deps.db.query<{ monthly_allocation: number | null }>(
    'SELECT monthly_allocation FROM credit_balances WHERE deployment_id = $1',
    [hot.deploymentId],
  );
  seeded = { hot, spread, tier: TIER, grant: GRANT, monthlyAllocation: balance?.monthly_allocation ?? null, rateLimitOverride: RATE_LIMIT_OVERRIDE };
  return seeded;
}

async function verify(app: FastifyInstance): Promise<WebhooksVerification> {
  if (!seeded) throw new Error('verify before seed');
  const db = app.deps.db;
  const mismatches = await findLedgerMismatches(db);
  const ids = [seeded.hot, ...seeded.spread].map((t) => t.deploymentId);
  const [r] = await db.query<Record<string, string>>(
    `SELECT (SELECT count(*) FROM usage_records WHERE deployment_id = ANY($1::uuid[]) AND metric = 'webhook_send' AND success)::text AS usage_success,
            (SELECT count(*) FROM usage_records WHERE deployment_id = ANY($1::uuid[]) AND metric = 'webhook_send' AND NOT success)::text AS usage_failed,
            (SELECT COALESCE(SUM(quantity - refunded), 0) FROM usage_records
               WHERE deployment_id = ANY($1::uuid[]) AND metric = 'webhook_send' AND success)::text AS usage_credits,
            (SELECT count(*) FROM credit_ledger WHERE deployment_id = ANY($1::uuid[]) AND kind = 'deduct')::text AS ledger_deducts,
            (SELECT count(*) FROM credit_ledger WHERE deployment_id = ANY($1::uuid[]) AND kind = 'refund')::text AS ledger_refunds,
            (SELECT COALESCE(SUM(monthly_used), 0) FROM credit_balances WHERE deployment_id = ANY($1::uuid[]))::text AS monthly_used,
            (SELECT COALESCE(SUM(purchased_balance), 0) FROM credit_balances WHERE deployment_id = ANY($1::uuid[]))::text AS purchased,
            (SELECT monthly_used FROM credit_balances WHERE deployment_id = $2)::text AS hot_monthly_used,
            (SELECT purchased_balance FROM credit_balances WHERE deployment_id = $2)::text AS hot_purchased,
            (SELECT COALESCE(SUM(credits_charged), 0) FROM webhook_deliveries WHERE deployment_id = ANY($1::uuid[]))::text AS charged,
            (SELECT count(*) FROM webhook_deliveries WHERE deployment_id = ANY($1::uuid[]) AND attempt_count > 1)::text AS retried`,
    [ids, seeded.hot.deploymentId],
  );
  const tables = await db.query<{ relname: string; upd: string; hot: string }>(
    `SELECT relname, n_tup_upd::text AS upd, n_tup_hot_upd::text AS hot FROM pg_stat_user_tables
     WHERE relname IN ('webhook_deliveries', 'credit_balances')`,
  );
  const byStatus = await db.query<{ status: string; n: string }>(
    'SELECT status, count(*)::text AS n FROM webhook_deliveries WHERE deployment_id = ANY($1::uuid[]) GROUP BY status',
    [ids],
  );
  return {
    mismatches: mismatches.length,
    sample: mismatches.slice(0, 3),
    usageSuccess: Number(r!.usage_success),
    usageFailed: Number(r!.usage_failed),
    usageCredits: Number(r!.usage_credits),
    ledgerDeducts: Number(r!.ledger_deducts),
    ledgerRefunds: Number(r!.ledger_refunds),
    creditsSpent: Number(r!.monthly_used) + ids.length * seeded.grant - Number(r!.purchased),
    hotMonthlyUsed: Number(r!.hot_monthly_used),
    hotPurchasedBalance: Number(r!.hot_purchased),
    deliveries: Object.fromEntries(byStatus.map((row) => [row.status, Number(row.n)])),
    creditsCharged: Number(r!.charged),
    retried: Number(r!.retried),
    updates: Object.fromEntries(tables.map((t) => [t.relname, { updates: Number(t.upd), hot: Number(t.hot) }])),
  };
}

const app = await serve(process.env);
const statements = countStatements(app.deps.db);
serveParent((app.server.address() as AddressInfo).port, {
  statements: async () => statements(),
  flushStats: () => flushPoolStats(app),
  seed: (args) => seed(app, (args as { spread: number }).spread),
  verify: () => verify(app),
});
