import type { Ctx } from '../../context.js';
import { DAY, HOUR } from '../../clock.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { rollupBackfillLag } from '../credits/index.js';
import { authorize, seesEndUsers } from '../organizations/rbac.js';
import { BUCKET_MS, bucketStarts, type GroupBy, MAX_SPLIT_KEYS, type SplitBy, summaryRange } from './range.js';

/** At most this many groups by tool, action, end user, model or deployment (the largest by credits, then calls); `truncated` says when there were more. */
export const MAX_GROUPS = 1000;

export interface UsageCounts {
  calls: number;
  successful: number;
  failed: number;
  /** Credits deducted, net of refunds (docs/usage-analytics.md). */
  credits: number;
  credits_refunded: number;
  /** AI calls' tokens (docs/ai-proxy.md): 0 for tool calls. */
  input_tokens: number;
  output_tokens: number;
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
  /** The zone of the day buckets (docs/usage-analytics.md, "Time zones"). */
  tz: string;
  groups: UsageGroup[];
  totals: UsageCounts;
  /** More than MAX_GROUPS keys had usage: the smaller ones are left out (totals still count them). */
  truncated: boolean;
  split_by?: SplitBy;
  split_keys?: Array<string | null>;
  split_other?: boolean;
  /** The instant the answer describes, and how far the rollups it was read from were behind it (0: written with the records). */
  as_of: string;
  lag_seconds: number;
}

/**
 * The rollup a summary reads (docs/usage-analytics.md, "Rollups"): A per deployment, hour, tool,
 * action and model; B per deployment, UTC day and end user. Each grouping is a closed set of SQL
 * expressions over the rollup's row `r` (never input). `$tz` is the zone of day buckets; an hour of A
 * lies inside one local day, as only zones with whole-hour offsets over the range are taken.
 */
type Source = 'hours' | 'days';
const TABLE: Record<Source, string> = { hours: 'usage_rollup_hours', days: 'usage_rollup_days' };
const TIME: Record<Source, string> = { hours: 'r.hour', days: 'r.day' };
const ORIGIN = `TIMESTAMPTZ '1970-01-01 00:00:00+00'`;

function keySql(source: Source, key: GroupBy | SplitBy, zoned: boolean): string {
  switch (key) {
    case 'hour':
      return 'r.hour';
    case 'day':
      if (source === 'days') return 'r.day';
      return zoned ? `(((r.hour AT TIME ZONE $6)::date)::timestamp AT TIME ZONE $6)` : `date_bin('1 day'::interval, r.hour, ${ORIGIN})`;
    case 'tool':
      return 'r.tool_name';
    case 'action':
      return 'r.action';
    case 'model':
      return `NULLIF(r.model, '')`;
    case 'deployment':
      return 'r.deployment_id::text';
    case 'mcp_user':
      return `NULLIF(r.end_user, '')`;
  }
}

const ORDER_SQL: Record<GroupBy, string> = {
  day: 'key',
  hour: 'key',
  tool: 'credits DESC, calls DESC, key',
  action: 'credits DESC, calls DESC, key',
  mcp_user: 'credits DESC, calls DESC, key NULLS LAST',
  model: 'credits DESC, calls DESC, key NULLS LAST',
  deployment: 'credits DESC, calls DESC, key',
};

/** The counts of a rollup's rows, summed. */
const COUNTS_SQL = `sum(r.calls)::bigint AS calls, sum(r.successful)::bigint AS successful, sum(r.credits - r.refunded)::bigint AS credits,
              sum(r.refunded)::bigint AS credits_refunded, sum(r.input_tokens)::bigint AS input_tokens, sum(r.output_tokens)::bigint AS output_tokens`;

interface CountRow {
  calls: number;
  successful: number;
  credits: number;
  credits_refunded: number;
  input_tokens: number;
  output_tokens: number;
}

interface GroupRow extends CountRow {
  key: Date | string | null;
  group_count: number;
  total_calls: number;
  total_successful: number;
  total_credits: number;
  total_refunded: number;
  total_input_tokens: number;
  total_output_tokens: number;
}

/** The deployment filter names a deployment of this organization, else 404 like any other tenant's row. */
export async function assertOwnDeployment(ctx: Ctx, organizationId: string, deploymentId: string | undefined): Promise<void> {
  if (deploymentId === undefined) return;
  const rows = await ctx.db.query('SELECT 1 FROM deployments WHERE id = $1 AND organization_id = $2', [deploymentId, organizationId]);
  if (rows.length === 0) throw new NotFoundError('Deployment');
}

const zero = (): UsageCounts => ({ calls: 0, successful: 0, failed: 0, credits: 0, credits_refunded: 0, input_tokens: 0, output_tokens: 0 });
const countsOf = (r: CountRow): UsageCounts => ({
  calls: r.calls,
  successful: r.successful,
  failed: r.calls - r.successful,
  credits: r.credits,
  credits_refunded: r.credits_refunded,
  input_tokens: r.input_tokens,
  output_tokens: r.output_tokens,
});

/** Zones PostgreSQL knows, read once per process (pg_timezone_names reads the zone files). */
let knownZones: Promise<Set<string>> | null = null;

/**
 * `tz` (docs/usage-analytics.md, "Time zones"): an IANA zone PostgreSQL knows whose offset is whole
 * hours over the whole range (so every hour of rollup A falls in one local day), else 400 naming
 * `tz`. UTC (the default) needs no check.
 */
export async function checkZone(db: Queryable, tz: string, from: Date, to: Date): Promise<void> {
  if (tz === 'UTC') return;
  knownZones ??= db.query<{ name: string }>('SELECT name FROM pg_timezone_names').then((rows) => new Set(rows.map((r) => r.name)));
  const zones = await knownZones.catch((error: unknown) => {
    knownZones = null;
    throw error;
  });
  if (!zones.has(tz)) throw ValidationError.forField('tz', 'must be an IANA time zone such as Europe/Berlin');
  const rows = await db.query<{ whole: boolean }>(
    `SELECT bool_and(mod(extract(epoch FROM (h AT TIME ZONE $1) - (h AT TIME ZONE 'UTC'))::bigint, 3600) = 0) AS whole
     FROM generate_series($2::timestamptz, $3::timestamptz, '1 hour'::interval) h`,
    [tz, from, to],
  );
  if (rows[0]?.whole !== true) throw ValidationError.forField('tz', 'has an offset that is not a whole number of hours in this range');
}

/** Which rollup answers, and to what the range is aligned: B (whole UTC days) for end users, A (whole hours) otherwise. */
function sourceFor(groupBy: GroupBy, splitBy: SplitBy | undefined, tz: string): Source {
  const users = groupBy === 'mcp_user' || splitBy === 'mcp_user';
  if (!users) return 'hours';
  if (splitBy === 'mcp_user' && groupBy !== 'day') throw ValidationError.forField('split_by', 'mcp_user splits only group_by=day (end users are counted per UTC day)');
  if (tz !== 'UTC' && groupBy === 'day') throw ValidationError.forField('tz', 'end users are counted per UTC day: split_by=mcp_user takes only tz=UTC');
  return 'days';
}

const floorTo = (at: Date, unit: number) => new Date(Math.floor(at.getTime() / unit) * unit);
const ceilTo = (at: Date, unit: number) => new Date(Math.ceil(at.getTime() / unit) * unit);

/**
 * Usage of an organization grouped by time bucket, tool, action, end user, model or deployment
 * (usage.read: every role; API keys need `read`), read from the rollups only, so its cost follows the
 * range and the number of keys, not the number of records. The range is widened to the rollup's
 * grain: whole hours, or whole UTC days for end users. One statement: the groups and the totals come
 * from one snapshot, and a rollup changes in the transaction of the records it counts, so a summary
 * never sees half of a deduction.
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
    tz?: string | undefined;
  },
): Promise<UsageSummaryView> {
  const auth = await authorize(ctx, input.organizationId, 'usage.read');
  if (!seesEndUsers(auth) && (input.groupBy === 'mcp_user' || input.splitBy === 'mcp_user')) {
    throw new AppError('FORBIDDEN', 'Your role (viewer) does not see end users: grouping by mcp_user is not allowed');
  }
  if (input.splitBy !== undefined && input.groupBy !== 'day' && input.groupBy !== 'hour') {
    throw ValidationError.forField('split_by', 'needs group_by=day or group_by=hour');
  }
  const tz = input.tz ?? 'UTC';
  const asked = summaryRange(input, input.groupBy, ctx.clock.now());
  const source = sourceFor(input.groupBy, input.splitBy, tz);
  const unit = source === 'days' ? DAY : HOUR;
  const from = floorTo(asked.from, unit);
  const to = ceilTo(asked.to, unit);
  await checkZone(ctx.db, tz, from, to);
  await assertOwnDeployment(ctx, input.organizationId, input.deploymentId);
  const asOf = ctx.clock.now();
  const zoned = tz !== 'UTC';
  const head = { organization_id: input.organizationId, deployment_id: input.deploymentId ?? null, group_by: input.groupBy, from: from.toISOString(), to: to.toISOString(), tz };
  // The rollups are exact for every record since they exist; records older than them are counted by a
  // backfill, and until it is done the answer says how long it has been going (docs/usage-analytics.md).
  const tail = { as_of: asOf.toISOString(), lag_seconds: await rollupBackfillLag(ctx.db, asOf) };
  const params = [input.organizationId, from, to, input.deploymentId ?? null, input.splitBy ? MAX_SPLIT_KEYS : MAX_GROUPS, tz];
  const where = `r.organization_id = $1 AND ${TIME[source]} >= $2 AND ${TIME[source]} < $3 AND ($4::uuid IS NULL OR r.deployment_id = $4::uuid) AND $6::text IS NOT NULL`;
  const isTime = input.groupBy === 'day' || input.groupBy === 'hour';
  if (input.splitBy !== undefined && isTime) {
    const split = await splitSummary(ctx.db, source, input.groupBy as 'day' | 'hour', input.splitBy, zoned, where, params);
    const groups = await withEmptyBuckets(ctx.db, split.groups, input.groupBy as 'day' | 'hour', from, to, tz, true);
    return { ...head, groups, totals: split.totals, truncated: false, split_by: input.splitBy, split_keys: split.keys, split_other: split.other, ...tail };
  }
  const rows = await ctx.db.query<GroupRow>(
    `WITH g AS (
       SELECT ${keySql(source, input.groupBy, zoned)} AS key, ${COUNTS_SQL}
       FROM ${TABLE[source]} r
       WHERE ${where}
       GROUP BY 1)
     SELECT key, calls, successful, credits, credits_refunded, input_tokens, output_tokens,
            count(*) OVER ()::bigint AS group_count,
            sum(calls) OVER ()::bigint AS total_calls,
            sum(successful) OVER ()::bigint AS total_successful,
            sum(credits) OVER ()::bigint AS total_credits,
            sum(credits_refunded) OVER ()::bigint AS total_refunded,
            sum(input_tokens) OVER ()::bigint AS total_input_tokens,
            sum(output_tokens) OVER ()::bigint AS total_output_tokens
     FROM g ORDER BY ${ORDER_SQL[input.groupBy]} LIMIT $5`,
    params,
    `usage_summary_${source}_${input.groupBy}${zoned ? '_tz' : ''}`,
  );
  const first = rows[0];
  const totals = first
    ? countsOf({
        calls: first.total_calls,
        successful: first.total_successful,
        credits: first.total_credits,
        credits_refunded: first.total_refunded,
        input_tokens: first.total_input_tokens,
        output_tokens: first.total_output_tokens,
      })
    : zero();
  const found: UsageGroup[] = rows.map((r) => ({ key: r.key instanceof Date ? r.key.toISOString() : r.key, ...countsOf(r) }));
  const groups = isTime ? await withEmptyBuckets(ctx.db, found, input.groupBy as 'day' | 'hour', from, to, tz, false) : found;
  return { ...head, groups, totals, truncated: (first?.group_count ?? 0) > rows.length, ...tail };
}

/**
 * Every bucket of the range in order, the ones without usage as zeros: a chart's continuous axis. UTC
 * buckets are computed here; a zone's day buckets by PostgreSQL with the same expression the summary
 * groups by, so the two always agree (days of 23 or 25 hours at a change of offset).
 */
async function withEmptyBuckets(
  db: Queryable,
  found: UsageGroup[],
  groupBy: 'day' | 'hour',
  from: Date,
  to: Date,
  tz: string,
  split: boolean,
): Promise<UsageGroup[]> {
  let starts: Date[];
  if (groupBy === 'day' && tz !== 'UTC') {
    const rows = await db.query<{ start: Date }>(
      `SELECT DISTINCT (((h AT TIME ZONE $3)::date)::timestamp AT TIME ZONE $3) AS start
       FROM generate_series($1::timestamptz, $2::timestamptz - '1 hour'::interval, '1 hour'::interval) h ORDER BY 1`,
      [from, to, tz],
    );
    starts = rows.map((r) => r.start);
  } else starts = bucketStarts(from, to, BUCKET_MS[groupBy]);
  const byKey = new Map(found.map((g) => [g.key, g]));
  return starts.map((start) => {
    const key = start.toISOString();
    return byKey.get(key) ?? { key, ...zero(), ...(split ? { split: [] } : {}) };
  });
}

interface SplitRow extends CountRow {
  key: Date;
  /** 1.. for the split keys (largest first), null for the "other" part. */
  rank: number | null;
  part: string | null;
  part_count: number;
}

/**
 * A time grouping with every bucket split by tool, action or end user (a stacked chart): the
 * MAX_SPLIT_KEYS largest keys over the whole range (by credits, then calls) each get their part, the
 * rest sum into one "other" part. One statement, so the parts, the buckets and the totals come from
 * one snapshot and always add up. The keys are ranked by window functions over the grouped rows, not
 * by joining them with a list of keys: a new organization has no statistics, and the planner's
 * nested loop for that join took time quadratic in a tenant's keys (10,000 tools: 35 s). A null end
 * user is a key (dense_rank takes nulls as one peer).
 */
async function splitSummary(
  db: Queryable,
  source: Source,
  groupBy: 'day' | 'hour',
  splitBy: SplitBy,
  zoned: boolean,
  where: string,
  params: unknown[],
): Promise<{ groups: UsageGroup[]; totals: UsageCounts; keys: Array<string | null>; other: boolean }> {
  const rows = await db.query<SplitRow>(
    `WITH s AS (
       SELECT ${keySql(source, groupBy, zoned)} AS key, ${keySql(source, splitBy, zoned)} AS part, ${COUNTS_SQL}
       FROM ${TABLE[source]} r
       WHERE ${where}
       GROUP BY 1, 2),
     totalled AS (
       SELECT s.*, sum(credits) OVER (PARTITION BY part) AS part_credits, sum(calls) OVER (PARTITION BY part) AS part_calls FROM s),
     ranked AS (
       SELECT totalled.*, dense_rank() OVER (ORDER BY part_credits DESC, part_calls DESC, part NULLS LAST) AS rank FROM totalled),
     counted AS (
       SELECT ranked.*, max(rank) OVER () AS part_count FROM ranked)
     SELECT key,
            CASE WHEN rank <= $5 THEN rank END AS rank,
            min(part) AS part,
            sum(calls)::bigint AS calls,
            sum(successful)::bigint AS successful,
            sum(credits)::bigint AS credits,
            sum(credits_refunded)::bigint AS credits_refunded,
            sum(input_tokens)::bigint AS input_tokens,
            sum(output_tokens)::bigint AS output_tokens,
            max(part_count)::bigint AS part_count
     FROM counted
     GROUP BY key, CASE WHEN rank <= $5 THEN rank END
     ORDER BY key, 2 NULLS LAST`,
    params,
    `usage_summary_split_${source}_${groupBy}_${splitBy}${zoned ? '_tz' : ''}`,
  );
  const keys: Array<string | null> = [];
  const buckets = new Map<string, UsageGroup>();
  const totals = zero();
  for (const row of rows) {
    const part: UsageSplit = { key: row.rank === null ? null : row.part, other: row.rank === null, ...countsOf(row) };
    if (row.rank !== null) keys[row.rank - 1] = row.part;
    const key = row.key.toISOString();
    const bucket = buckets.get(key) ?? { key, ...zero(), split: [] };
    buckets.set(key, add(bucket, part));
    bucket.split!.push(part);
    add(totals, part);
  }
  return { groups: [...buckets.values()], totals, keys, other: (rows[0]?.part_count ?? 0) > MAX_SPLIT_KEYS };
}

/** `into` with `part`'s counts added (mutates and returns `into`). */
function add<T extends UsageCounts>(into: T, part: UsageCounts): T {
  into.calls += part.calls;
  into.successful += part.successful;
  into.failed += part.failed;
  into.credits += part.credits;
  into.credits_refunded += part.credits_refunded;
  into.input_tokens += part.input_tokens;
  into.output_tokens += part.output_tokens;
  return into;
}
