import type { Ctx } from '../../context.js';
import { NotFoundError, ValidationError } from '../../errors.js';
import { authorize } from '../organizations/rbac.js';
import { BUCKET_MS, bucketStarts, type GroupBy, MAX_SPLIT_KEYS, type SplitBy, summaryRange } from './range.js';

/** At most this many groups by tool, action or end user (the largest by credits, then calls); `truncated` says when there were more. */
export const MAX_GROUPS = 1000;

export interface UsageCounts {
  calls: number;
  successful: number;
  failed: number;
  /** Credits deducted, net of refunds (docs/usage-analytics.md). */
  credits: number;
  credits_refunded: number;
}

export interface UsageSplit extends UsageCounts {
  key: string | null;
  /** The part that sums every key outside `split_keys`. */
  other: boolean;
}

export interface UsageGroup extends UsageCounts {
  key: string | null;
  /** With split_by: the bucket's parts with calls, in split_keys order, "other" last. */
  split?: UsageSplit[];
}

export interface UsageSummaryView {
  organization_id: string;
  deployment_id: string | null;
  group_by: GroupBy;
  from: string;
  to: string;
  groups: UsageGroup[];
  totals: UsageCounts;
  /** More than MAX_GROUPS tools, actions or end users had usage: the smaller ones are left out (totals still count them). */
  truncated: boolean;
  split_by?: SplitBy;
  split_keys?: Array<string | null>;
  split_other?: boolean;
}

/**
 * What each grouping groups by: a closed set of SQL expressions (never input). Time buckets are UTC
 * by construction: date_bin works on the instant, not on the session's TimeZone. `action` is the
 * action recorded on the row (`metric`), not the tool's mapping today.
 */
const KEY_SQL: Record<GroupBy, string> = {
  day: `date_bin('1 day'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00')`,
  hour: `date_bin('1 hour'::interval, "timestamp", TIMESTAMPTZ '1970-01-01 00:00:00+00')`,
  tool: 'tool_name',
  action: 'metric',
  mcp_user: 'mcp_user_id',
};

const ORDER_SQL: Record<GroupBy, string> = {
  day: 'key',
  hour: 'key',
  tool: 'credits DESC, calls DESC, key',
  action: 'credits DESC, calls DESC, key',
  mcp_user: 'credits DESC, calls DESC, key NULLS LAST',
};

interface GroupRow {
  key: Date | string | null;
  calls: number;
  successful: number;
  credits: number;
  credits_refunded: number;
  group_count: number;
  total_calls: number;
  total_successful: number;
  total_credits: number;
  total_refunded: number;
}

/** The deployment filter names a deployment of this organization, else 404 like any other tenant's row. */
export async function assertOwnDeployment(ctx: Ctx, organizationId: string, deploymentId: string | undefined): Promise<void> {
  if (deploymentId === undefined) return;
  const rows = await ctx.db.query('SELECT 1 FROM deployments WHERE id = $1 AND organization_id = $2', [deploymentId, organizationId]);
  if (rows.length === 0) throw new NotFoundError('Deployment');
}

const counts = (calls: number, successful: number, credits: number, refunded: number): UsageCounts => ({
  calls,
  successful,
  failed: calls - successful,
  credits,
  credits_refunded: refunded,
});

/**
 * Usage of an organization in [from, to) grouped by time bucket, tool, action or end user
 * (usage.read: every role; API keys need `read`). One statement over usage_records_org_ts_idx: the
 * groups and the totals come from one snapshot of committed rows, so they always agree, and a
 * deduction commits its usage record with its ledger row (credits module), so a summary never sees
 * half of one. Time groupings list every bucket of the range, empty ones as zeros.
 */
export async function summarizeUsage(
  ctx: Ctx,
  input: {
    organizationId: string;
    groupBy: GroupBy;
    from?: string | undefined;
    to?: string | undefined;
    deploymentId?: string | undefined;
    splitBy?: SplitBy | undefined;
  },
): Promise<UsageSummaryView> {
  await authorize(ctx, input.organizationId, 'usage.read');
  if (input.splitBy !== undefined && input.groupBy !== 'day' && input.groupBy !== 'hour') {
    throw ValidationError.forField('split_by', 'needs group_by=day or group_by=hour');
  }
  const { from, to } = summaryRange(input, input.groupBy, ctx.clock.now());
  await assertOwnDeployment(ctx, input.organizationId, input.deploymentId);
  if (input.splitBy !== undefined && (input.groupBy === 'day' || input.groupBy === 'hour')) return splitSummary(ctx, { ...input, groupBy: input.groupBy, splitBy: input.splitBy }, from, to);
  const rows = await ctx.db.query<GroupRow>(
    `WITH g AS (
       SELECT ${KEY_SQL[input.groupBy]} AS key,
              count(*)::bigint AS calls,
              count(*) FILTER (WHERE success)::bigint AS successful,
              COALESCE(sum(quantity - refunded) FILTER (WHERE success), 0)::bigint AS credits,
              COALESCE(sum(refunded) FILTER (WHERE success), 0)::bigint AS credits_refunded
       FROM usage_records
       WHERE organization_id = $1 AND "timestamp" >= $2 AND "timestamp" < $3
         AND ($4::uuid IS NULL OR deployment_id = $4::uuid)
       GROUP BY 1)
     SELECT key, calls, successful, credits, credits_refunded,
            count(*) OVER ()::bigint AS group_count,
            sum(calls) OVER ()::bigint AS total_calls,
            sum(successful) OVER ()::bigint AS total_successful,
            sum(credits) OVER ()::bigint AS total_credits,
            sum(credits_refunded) OVER ()::bigint AS total_refunded
     FROM g ORDER BY ${ORDER_SQL[input.groupBy]} LIMIT $5`,
    [input.organizationId, from, to, input.deploymentId ?? null, MAX_GROUPS],
  );
  const first = rows[0];
  const totals = first
    ? counts(first.total_calls, first.total_successful, first.total_credits, first.total_refunded)
    : counts(0, 0, 0, 0);
  const found: UsageGroup[] = rows.map((r) => ({
    key: r.key instanceof Date ? r.key.toISOString() : r.key,
    ...counts(r.calls, r.successful, r.credits, r.credits_refunded),
  }));
  const groups = input.groupBy === 'day' || input.groupBy === 'hour' ? withEmptyBuckets(found, from, to, BUCKET_MS[input.groupBy]) : found;
  return {
    organization_id: input.organizationId,
    deployment_id: input.deploymentId ?? null,
    group_by: input.groupBy,
    from: from.toISOString(),
    to: to.toISOString(),
    groups,
    totals,
    truncated: (first?.group_count ?? 0) > rows.length,
  };
}

/** Every bucket of the range in order, the ones without records as zeros: a chart's continuous axis. */
function withEmptyBuckets(found: UsageGroup[], from: Date, to: Date, width: number): UsageGroup[] {
  const byKey = new Map(found.map((g) => [g.key, g]));
  return bucketStarts(from, to, width).map((start) => {
    const key = start.toISOString();
    return byKey.get(key) ?? { key, ...counts(0, 0, 0, 0) };
  });
}

interface SplitRow {
  key: Date;
  /** 1.. for the split keys (largest first), null for the "other" part. */
  rank: number | null;
  part: string | null;
  calls: number;
  successful: number;
  credits: number;
  credits_refunded: number;
  part_count: number;
}

/**
 * A time grouping with every bucket split by tool, action or end user (a stacked chart): the
 * MAX_SPLIT_KEYS largest keys over the whole range (by credits, then calls) each get their part, the
 * rest sum into one "other" part. One statement, so the parts, the buckets and the totals come from
 * one snapshot and always add up. At most buckets × (MAX_SPLIT_KEYS + 1) rows leave the database;
 * keys are matched by (is null, value), an equality a hash join can use (a null end user is a key).
 */
async function splitSummary(
  ctx: Ctx,
  input: { organizationId: string; groupBy: 'day' | 'hour'; deploymentId?: string | undefined; splitBy: SplitBy },
  from: Date,
  to: Date,
): Promise<UsageSummaryView> {
  const rows = await ctx.db.query<SplitRow>(
    `WITH r AS (
       SELECT ${KEY_SQL[input.groupBy]} AS key,
              ${KEY_SQL[input.splitBy]} AS part,
              count(*)::bigint AS calls,
              count(*) FILTER (WHERE success)::bigint AS successful,
              COALESCE(sum(quantity - refunded) FILTER (WHERE success), 0)::bigint AS credits,
              COALESCE(sum(refunded) FILTER (WHERE success), 0)::bigint AS credits_refunded
       FROM usage_records
       WHERE organization_id = $1 AND "timestamp" >= $2 AND "timestamp" < $3
         AND ($4::uuid IS NULL OR deployment_id = $4::uuid)
       GROUP BY 1, 2),
     ranked AS (
       SELECT part IS NULL AS part_null, COALESCE(part, '') AS part_value,
              row_number() OVER (ORDER BY sum(credits) DESC, sum(calls) DESC, part NULLS LAST) AS rank
       FROM r GROUP BY part)
     SELECT r.key,
            CASE WHEN k.rank <= $5 THEN k.rank END AS rank,
            min(r.part) AS part,
            sum(r.calls)::bigint AS calls,
            sum(r.successful)::bigint AS successful,
            sum(r.credits)::bigint AS credits,
            sum(r.credits_refunded)::bigint AS credits_refunded,
            (SELECT count(*) FROM ranked)::bigint AS part_count
     FROM r JOIN ranked k ON k.part_null = (r.part IS NULL) AND k.part_value = COALESCE(r.part, '')
     GROUP BY r.key, CASE WHEN k.rank <= $5 THEN k.rank END
     ORDER BY r.key, 2 NULLS LAST`,
    [input.organizationId, from, to, input.deploymentId ?? null, MAX_SPLIT_KEYS],
  );
  const keys: Array<string | null> = [];
  const buckets = new Map<string, UsageGroup>();
  let total = counts(0, 0, 0, 0);
  for (const row of rows) {
    const part: UsageSplit = { key: row.rank === null ? null : row.part, other: row.rank === null, ...counts(row.calls, row.successful, row.credits, row.credits_refunded) };
    if (row.rank !== null) keys[row.rank - 1] = row.part;
    const key = row.key.toISOString();
    const bucket = buckets.get(key) ?? { key, ...counts(0, 0, 0, 0), split: [] };
    buckets.set(key, add(bucket, part));
    bucket.split!.push(part);
    total = add(total, part);
  }
  const groups = bucketStarts(from, to, BUCKET_MS[input.groupBy]).map((start) => {
    const key = start.toISOString();
    return buckets.get(key) ?? { key, ...counts(0, 0, 0, 0), split: [] };
  });
  return {
    organization_id: input.organizationId,
    deployment_id: input.deploymentId ?? null,
    group_by: input.groupBy,
    from: from.toISOString(),
    to: to.toISOString(),
    groups,
    totals: total,
    truncated: false,
    split_by: input.splitBy,
    split_keys: keys,
    split_other: (rows[0]?.part_count ?? 0) > MAX_SPLIT_KEYS,
  };
}

/** `into` with `part`'s counts added (mutates and returns `into`). */
function add<T extends UsageCounts>(into: T, part: UsageCounts): T {
  into.calls += part.calls;
  into.successful += part.successful;
  into.failed += part.failed;
  into.credits += part.credits;
  into.credits_refunded += part.credits_refunded;
  return into;
}
