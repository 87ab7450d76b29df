import { type Ctx, actorLabel } from '../../context.js';
import { NotFoundError, ValidationError } from '../../errors.js';
import { pageOf } from '../../http/envelope.js';
import type { KeysetPosition } from '../../http/envelope.js';
import { aiTokensFree, effectiveTerms, readBalance, viewBalance } from '../credits/index.js';
import type { DeploymentRow } from '../deployments/service.js';
import { authorize } from '../organizations/rbac.js';
import { HOUR } from '../../clock.js';
import type { Database } from '../../db/client.js';

/** How a /billing call names its organization (docs/decisions-keys-billing.md, Billing reads): the query, the X-Organization-ID header, or neither. */
export interface BillingSelection {
  queryOrganizationId?: string | undefined;
  headerOrganizationId?: string | undefined;
}

const pick = (message: string) =>
  new ValidationError(message, [{ field: 'organization_id', message: 'name the organization (?organization_id= or X-Organization-ID)' }]);

/**
 * docs/decisions-keys-billing.md, Billing reads: the organization named by ?organization_id= or X-Organization-ID, else the user's
 * default organization, else the user's only organization; none of these is 400. An API key acts for
 * its own organization. Naming one the caller does not belong to is 404 (authorize decides).
 */
export async function billingOrganization(ctx: Ctx, sel: BillingSelection): Promise<string> {
  const { queryOrganizationId: q, headerOrganizationId: h } = sel;
  if (q !== undefined && h !== undefined && q.toLowerCase() !== h.toLowerCase()) {
    throw new ValidationError('?organization_id= and X-Organization-ID name different organizations', [
      { field: 'organization_id', message: 'differs from X-Organization-ID' },
      { field: 'x-organization-id', message: 'differs from organization_id' },
    ]);
  }
  const named = q ?? h;
  if (named !== undefined) return named.toLowerCase();
  if (ctx.actor.type === 'api_key') return ctx.actor.organizationId;
  if (ctx.actor.type !== 'user') throw pick('Name the organization');
  const rows = await ctx.db.query<{ default_organization_id: string | null; only: string | null }>(
    `SELECT u.default_organization_id,
            (SELECT CASE WHEN count(*) = 1 THEN min(m.organization_id::text) END
             FROM organization_members m JOIN organizations o ON o.id = m.organization_id AND o.deleted_at IS NULL
             WHERE m.user_id = u.id) AS only
     FROM users u WHERE u.id = $1`,
    [ctx.actor.userId],
  );
  const chosen = rows[0]?.default_organization_id ?? rows[0]?.only ?? null;
  if (chosen === null) throw pick('You belong to several organizations (or none) and have no default: name the organization');
  return chosen;
}

export interface SubscriptionView {
  id: string;
  organization_id: string;
  status: string;
  stripe_subscription_id: string;
  stripe_customer_id: string;
  stripe_price_id: string | null;
  current_period_start: string | null;
  current_period_end: string | null;
  cancel_at_period_end: boolean;
  created_at: string;
  updated_at: string;
}

const iso = (d: Date | null): string | null => d?.toISOString() ?? null;

/** The organization's subscription: the newest one still in force, else the newest ended one; null when none. */
export async function getSubscription(ctx: Ctx, sel: BillingSelection): Promise<SubscriptionView | null> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.read');
  const rows = await ctx.db.query<
    Omit<SubscriptionView, 'current_period_start' | 'current_period_end' | 'created_at' | 'updated_at'> & {
      current_period_start: Date | null;
      current_period_end: Date | null;
      created_at: Date;
      updated_at: Date;
    }
  >(
    `SELECT id, organization_id, status, stripe_subscription_id, stripe_customer_id, stripe_price_id, current_period_start,
            current_period_end, cancel_at_period_end, created_at, updated_at
     FROM subscriptions WHERE organization_id = $1
     ORDER BY (status <> 'canceled') DESC, created_at DESC, id DESC LIMIT 1`,
    [organizationId],
  );
  const s = rows[0];
  if (!s) return null;
  return {
    ...s,
    current_period_start: iso(s.current_period_start),
    current_period_end: iso(s.current_period_end),
    created_at: s.created_at.toISOString(),
    updated_at: s.updated_at.toISOString(),
  };
}

export interface UsageView {
  organization_id: string;
  deployment_id: string;
  tier: string;
  period_start: string;
  period_end: string;
  metrics: Array<{ metric: string; count: number; quantity: number; refunded: number }>;
  credits: {
    monthly_allocation: number | null;
    monthly_used: number;
    monthly_remaining: number | null;
    purchased: number;
    reserved: number;
    available: number | null;
  };
  ai_tokens: { used: number; limit: number | null; remaining: number | null; by_model: AiModelUsage[] };
}

/** AI tokens of the period by model (docs/ai-proxy.md: every call is a usage record with its model). */
export interface AiModelUsage {
  model: string;
  calls: number;
  input_tokens: number;
  output_tokens: number;
  credits: number;
  /** Calls whose tokens were counted by our tokenizer because the provider reported none. */
  estimated_calls: number;
}

/**
 * What the organization's records of [start, end) count, per metric and per AI model, read from the
 * hour rollups for the whole hours inside the range and from the records themselves for the part
 * hours at its edges (a period starts at its anchor's second, not on the hour). So the read costs the
 * same with a million records in the period as with a thousand (docs/decisions-keys-billing.md,
 * "Billing reads"). Only `estimated_calls` is not in the rollups: it reads the period's AI records, and only
 * when the rollups show AI calls at all.
 */
async function periodUsage(
  db: Database,
  organizationId: string,
  start: Date,
  end: Date,
): Promise<{ metrics: UsageView['metrics']; byModel: AiModelUsage[] }> {
  // Whole hours [from, to) from the rollups; [start, from) and [to, end) from the records.
  let from = Math.ceil(start.getTime() / HOUR) * HOUR;
  let to = Math.floor(end.getTime() / HOUR) * HOUR;
  if (from >= to) from = to = end.getTime();
  const params = [organizationId, new Date(from), new Date(to), start, end];
  const edges = `organization_id = $1 AND (("timestamp" >= $4 AND "timestamp" < $2) OR ("timestamp" >= $3 AND "timestamp" < $5))`;
  const metrics = await db.query<{ metric: string; count: number; quantity: number; refunded: number }>(
    `SELECT metric, sum(count)::int AS count, sum(quantity)::bigint AS quantity, sum(refunded)::bigint AS refunded FROM (
       SELECT r.action AS metric, r.successful AS count, r.credits AS quantity, r.refunded
       FROM usage_rollup_hours r WHERE r.organization_id = $1 AND r.hour >= $2 AND r.hour < $3
       UNION ALL
       SELECT metric, count(*), COALESCE(sum(quantity), 0), COALESCE(sum(refunded), 0)
       FROM usage_records WHERE success AND ${edges} GROUP BY metric
     ) x GROUP BY metric HAVING sum(count) > 0 ORDER BY metric`,
    params,
    'billing_period_metrics',
  );
  const models = await db.query<Omit<AiModelUsage, 'estimated_calls'>>(
    `SELECT model, sum(calls)::int AS calls, sum(input_tokens)::bigint AS input_tokens, sum(output_tokens)::bigint AS output_tokens,
            sum(credits)::bigint AS credits FROM (
       SELECT r.model, r.calls, r.input_tokens, r.output_tokens, r.credits
       FROM usage_rollup_hours r WHERE r.organization_id = $1 AND r.action = 'ai_tokens' AND r.hour >= $2 AND r.hour < $3
       UNION ALL
       SELECT tool_name, count(*), COALESCE(sum(usage_record_tokens(metric, metadata, 'input_tokens')), 0),
              COALESCE(sum(usage_record_tokens(metric, metadata, 'output_tokens')), 0), COALESCE(sum(quantity) FILTER (WHERE success), 0)
       FROM usage_records WHERE metric = 'ai_tokens' AND ${edges} GROUP BY tool_name
     ) x GROUP BY model HAVING sum(calls) > 0 ORDER BY model`,
    params,
    'billing_period_models',
  );
  if (models.length === 0) return { metrics, byModel: [] };
  const estimated = await db.query<{ model: string; estimated_calls: number }>(
    `SELECT tool_name AS model, count(*)::int AS estimated_calls FROM usage_records
     WHERE organization_id = $1 AND metric = 'ai_tokens' AND "timestamp" >= $2 AND "timestamp" < $3 AND metadata->>'estimated' = 'true'
     GROUP BY tool_name`,
    [organizationId, start, end],
    'billing_period_estimated',
  );
  const estimatedOf = new Map(estimated.map((e) => [e.model, e.estimated_calls]));
  return { metrics, byModel: models.map((m) => ({ ...m, estimated_calls: estimatedOf.get(m.model) ?? 0 })) };
}

/**
 * Usage of the current period, the primary deployment's (docs/metering.md, Periods): successful usage records of the
 * organization in [period_start, period_end) per metric, the credit buckets and AI tokens.
 */
export async function getUsage(ctx: Ctx, sel: BillingSelection): Promise<UsageView> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.read');
  const deployments = await ctx.db.query<DeploymentRow>(
    'SELECT * FROM deployments WHERE organization_id = $1 AND is_primary ORDER BY created_at LIMIT 1',
    [organizationId],
  );
  const d = deployments[0];
  if (!d) throw new NotFoundError('Primary deployment');
  const now = ctx.clock.now();
  const row = await readBalance(ctx.db, d.id, now, actorLabel(ctx.actor));
  const b = viewBalance(row);
  const { metrics, byModel } = await periodUsage(ctx.db, organizationId, b.periodStart, b.periodEnd);
  const aiLimit = effectiveTerms(d, now).aiTokensLimit;
  return {
    organization_id: organizationId,
    deployment_id: d.id,
    tier: d.tier,
    period_start: b.periodStart.toISOString(),
    period_end: b.periodEnd.toISOString(),
    metrics,
    credits: {
      monthly_allocation: b.monthlyAllocation,
      monthly_used: b.monthlyUsed,
      monthly_remaining: b.monthlyRemaining,
      purchased: b.purchased,
      reserved: b.reserved,
      available: b.available,
    },
    ai_tokens: { used: b.aiTokensUsed, limit: aiLimit, remaining: aiTokensFree(row, aiLimit), by_model: byModel },
  };
}

export interface InvoiceView {
  id: string;
  organization_id: string;
  stripe_invoice_id: string;
  status: string | null;
  amount_due: number | null;
  amount_paid: number | null;
  currency: string | null;
  hosted_invoice_url: string | null;
  period_start: string | null;
  period_end: string | null;
  created_at: string;
}

type InvoiceRow = Omit<InvoiceView, 'period_start' | 'period_end' | 'created_at'> & {
  period_start: Date | null;
  period_end: Date | null;
  created_at: Date;
};

/** The organization's invoices (stored from Stripe's invoice.* events), newest first. */
export async function listInvoices(
  ctx: Ctx,
  sel: BillingSelection,
  pageArgs: { limit: number; cursor: KeysetPosition | null },
): Promise<{ items: InvoiceView[]; next: string | null }> {
  const organizationId = await billingOrganization(ctx, sel);
  await authorize(ctx, organizationId, 'billing.read');
  const rows = await ctx.db.query<InvoiceRow>(
    `SELECT id, organization_id, stripe_invoice_id, status, amount_due, amount_paid, currency, hosted_invoice_url,
            period_start, period_end, created_at
     FROM invoices
     WHERE organization_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::uuid))
     ORDER BY created_at DESC, id DESC LIMIT $4`,
    [organizationId, pageArgs.cursor?.at ?? null, pageArgs.cursor?.id ?? null, pageArgs.limit + 1],
  );
  const { items, next } = pageOf(rows, pageArgs.limit, (r) => r.created_at);
  return {
    items: items.map((r) => ({ ...r, period_start: iso(r.period_start), period_end: iso(r.period_end), created_at: r.created_at.toISOString() })),
    next,
  };
}
