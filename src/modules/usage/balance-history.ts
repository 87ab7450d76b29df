import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { DAY, HOUR } from '../../clock.js';
import type { Ctx } from '../../context.js';
import { ctxOf } from '../../http/auth.js';
import { Envelope, envelopeErrors, ok } from '../../http/envelope.js';
import { anyOf, Nullable } from '../../http/schemas.js';
import { authorize } from '../organizations/rbac.js';
import { summaryRange } from './range.js';
import { checkZone } from './summary.js';
import { OrgParams } from './schemas.js';

/** The burn rate is the mean over this many days at the end of the range (docs/usage-analytics.md, "Balance history"). */
export const BURN_DAYS = 7;

export interface BalanceDay {
  day: string;
  balance: number | null;
  spent: number;
  refunded: number;
  deployments: Array<{ deployment_id: string; balance: number | null }>;
}

export interface BalanceHistoryView {
  organization_id: string;
  from: string;
  to: string;
  tz: string;
  days: BalanceDay[];
  balance: number | null;
  burn_rate: number;
  runs_out_at: string | null;
  as_of: string;
}

/** For each instant of `at` (non-decreasing), the sum of the points' values at or after it: one sweep from the end. */
function sumsFrom(points: Array<{ t: number; v: number }>, at: number[]): number[] {
  points.sort((a, b) => a.t - b.t);
  const out = new Array<number>(at.length);
  let j = points.length;
  let sum = 0;
  for (let i = at.length - 1; i >= 0; i--) {
    while (j > 0 && points[j - 1]!.t >= at[i]!) sum += points[--j]!.v;
    out[i] = sum;
  }
  return out;
}

const floorTo = (at: Date, unit: number) => new Date(Math.floor(at.getTime() / unit) * unit);
const ceilTo = (at: Date, unit: number) => new Date(Math.ceil(at.getTime() / unit) * unit);

/**
 * An organization's closing balance per day of `tz`, its spending and burn rate (docs/usage-analytics.md,
 * "Balance history"), walked back from the current balance rows: the days' deductions come from rollup A
 * (by the calls' time, before refunds), every other change from the ledger's few other rows (grants,
 * refunds, period resets, expiries, adjustments, payments of owed credits). Reads only.
 */
export async function balanceHistory(
  ctx: Ctx,
  input: { organizationId: string; from?: string | undefined; to?: string | undefined; tz?: string | undefined },
): Promise<BalanceHistoryView> {
  await authorize(ctx, input.organizationId, 'usage.read');
  const tz = input.tz ?? 'UTC';
  const asked = summaryRange(input, 'day', ctx.clock.now());
  const from = floorTo(asked.from, HOUR);
  const to = ceilTo(asked.to, HOUR);
  await checkZone(ctx.db, tz, from, to);
  const now = ctx.clock.now();
  // The local days overlapping [from, to): each from its local midnight to the next (23 or 25 hours at a change of offset).
  const days = await ctx.db.query<{ start: Date; end: Date }>(
    `SELECT (l AT TIME ZONE $3) AS start, ((l + interval '1 day') AT TIME ZONE $3) AS "end"
     FROM generate_series((($1::timestamptz AT TIME ZONE $3)::date)::timestamp,
                          ((($2::timestamptz - interval '1 microsecond') AT TIME ZONE $3)::date)::timestamp,
                          '1 day'::interval) l
     ORDER BY 1`,
    [from, to, tz],
  );
  const since = days[0]!.start;
  const balances = await ctx.db.query<{ deployment_id: string; unlimited: boolean; balance: number }>(
    `SELECT deployment_id, monthly_allocation IS NULL AS unlimited,
            ((CASE WHEN monthly_allocation IS NULL THEN 0 ELSE GREATEST(0, monthly_allocation - monthly_used) END) + purchased_balance)::bigint AS balance
     FROM credit_balances WHERE organization_id = $1 ORDER BY deployment_id`,
    [input.organizationId],
  );
  const ids = balances.map((b) => b.deployment_id);
  // Everything at or after the last day's end is after every day's closing instant: one sum per
  // deployment there, so what is read (and walked) grows with the range, not with the history since.
  const horizon = days[days.length - 1]!.end;
  // Deductions by hour since the first day, per deployment: credits before refunds (a refund is a ledger row of its own time).
  const hours = await ctx.db.query<{ deployment_id: string; at: Date; credits: number }>(
    `SELECT r.deployment_id, LEAST(r.hour, $3) AS at, sum(r.credits)::bigint AS credits
     FROM usage_rollup_hours r
     WHERE r.organization_id = $1 AND r.hour >= $2
     GROUP BY 1, 2`,
    [input.organizationId, since, horizon],
    'balance_history_hours',
  );
  // Every other change of a balance since the first day (the ledger's rows that are not a call's
  // deduction), by hour: a day's end is a whole hour (checkZone), and now is after every row.
  const changes = await ctx.db.query<{ deployment_id: string; at: Date; delta: number; refunded: number }>(
    `SELECT deployment_id, LEAST(date_trunc('hour', created_at, 'UTC'), $3) AS at, sum(monthly_delta + purchased_delta)::bigint AS delta,
            sum(CASE WHEN kind = 'refund' THEN amount ELSE 0 END)::bigint AS refunded
     FROM credit_ledger
     WHERE deployment_id = ANY($1::uuid[]) AND created_at >= $2 AND (kind <> 'deduct' OR reason = 'owed')
     GROUP BY 1, 2`,
    [ids, since, horizon],
    'balance_history_ledger',
  );

  const out: BalanceDay[] = days.map((d) => ({ day: d.start.toISOString(), balance: 0, spent: 0, refunded: 0, deployments: [] }));
  const starts = days.map((d) => d.start.getTime());
  /** The day whose [start, end) holds `at`, or -1 (days are contiguous: the last start at or before it). */
  const dayOf = (at: Date): number => {
    const t = at.getTime();
    if (t < starts[0]! || t >= horizon.getTime()) return -1;
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid]! <= t) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  for (const h of hours) {
    const i = dayOf(h.at);
    if (i >= 0) out[i]!.spent += Number(h.credits);
  }
  for (const c of changes) {
    const i = dayOf(c.at);
    if (i >= 0) out[i]!.refunded += Number(c.refunded);
  }
  // Each day's closing instant: its end, or now for today and later (non-decreasing).
  const closes = days.map((d) => Math.min(d.end.getTime(), now.getTime()));
  let unlimited = false;
  for (const b of balances) {
    unlimited ||= b.unlimited;
    // The balance at a day's close: today's, plus what was deducted since, less what else changed since.
    const after = (points: Array<{ t: number; v: number }>) => sumsFrom(points, closes);
    const deducted = after(hours.filter((h) => h.deployment_id === b.deployment_id).map((h) => ({ t: h.at.getTime(), v: Number(h.credits) })));
    const changed = after(changes.filter((c) => c.deployment_id === b.deployment_id).map((c) => ({ t: c.at.getTime(), v: Number(c.delta) })));
    days.forEach((_, i) => {
      const balance = b.unlimited ? null : Number(b.balance) + deducted[i]! - changed[i]!;
      const day = out[i]!;
      day.deployments.push({ deployment_id: b.deployment_id, balance });
      day.balance = day.balance === null || balance === null ? null : day.balance + balance;
    });
  }
  const last = out.slice(-BURN_DAYS);
  const net = last.reduce((sum, d) => sum + d.spent - d.refunded, 0);
  const burnRate = Math.round((Math.max(0, net) / last.length) * 100) / 100;
  const balance = unlimited ? null : balances.reduce((sum, b) => sum + Number(b.balance), 0);
  const runsOut = balance === null || burnRate === 0 ? null : new Date(now.getTime() + (balance / burnRate) * DAY).toISOString();
  return {
    organization_id: input.organizationId,
    from: from.toISOString(),
    to: to.toISOString(),
    tz,
    days: out,
    balance,
    burn_rate: burnRate,
    runs_out_at: runsOut,
    as_of: now.toISOString(),
  };
}

const Credits = (description: string) => Type.Integer({ description, examples: [1500] });
const NullableCredits = (description: string) => Nullable(Type.Integer({ description, examples: [1500] }));
const Instant = (description: string) => Type.String({ format: 'date-time', maxLength: 40, description, examples: ['2026-01-15T00:00:00Z'] });

export const BalanceHistoryQuery = Type.Object(
  {
    from: Type.Optional(Instant('Start, inclusive (RFC 3339; any offset, answered in UTC). Default: 30 days before to')),
    to: Type.Optional(Instant('End, exclusive (RFC 3339). Default: now. At most 366 days after from')),
    tz: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        description: 'IANA time zone of the days (its offset must be whole hours over the range). Default UTC',
        examples: ['Europe/Berlin'],
      }),
    ),
  },
  { additionalProperties: false },
);

const BalanceDaySchema = Type.Object(
  {
    day: Type.String({ format: 'date-time', description: "The day's start: the instant of its local midnight in tz" }),
    balance: NullableCredits("Closing balance (monthly remaining + purchased, summed over the deployments) at the day's end, or now for today; null = unlimited"),
    spent: Credits("Credits the day's calls deducted, before refunds"),
    refunded: Credits('Credits refunded that day (by the time of the refund)'),
    deployments: Type.Array(
      Type.Object({
        deployment_id: Type.String({ format: 'uuid', description: 'Deployment id' }),
        balance: NullableCredits("The deployment's closing balance; null = unlimited"),
      }),
      { description: 'The closing balance per deployment' },
    ),
  },
  { title: 'BalanceDay' },
);

export const BalanceHistorySchema = Type.Object(
  {
    organization_id: Type.String({ format: 'uuid', description: 'Organization id' }),
    from: Type.String({ format: 'date-time', description: 'Start of the range, rounded down to the hour' }),
    to: Type.String({ format: 'date-time', description: 'End of the range, rounded up to the hour' }),
    tz: Type.String({ description: 'The zone of the days', examples: ['UTC'] }),
    days: Type.Array(BalanceDaySchema, { description: 'Every local day overlapping the range, oldest first' }),
    balance: NullableCredits('The balance now (monthly remaining + purchased); null = unlimited'),
    burn_rate: Type.Number({ description: `Mean credits spent per day (less refunds) over the last ${BURN_DAYS} days of the range`, examples: [42.5] }),
    runs_out_at: Nullable(
      Type.String({ format: 'date-time', description: 'At this rate credits last until: now + balance / burn_rate; null when the rate is 0 or unlimited' }),
    ),
    as_of: Type.String({ format: 'date-time', description: 'The instant the answer describes' }),
  },
  { title: 'BalanceHistory', description: "An organization's closing balance per day, burn rate and when its credits run out" },
);

/** `GET /organizations/{id}/balance/history` (docs/usage-analytics.md, "Balance history"). */
export async function balanceHistoryRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/organizations/:id/balance/history',
    {
      config: { auth: 'account' },
      schema: {
        tags: ['Usage'],
        security: anyOf('bearerAuth', 'apiKeyHeader', 'apiKey'),
        operationId: 'getBalanceHistory',
        summary: 'Closing balance per day, burn rate and when credits run out (usage.read: every role; key scope read)',
        params: OrgParams,
        querystring: BalanceHistoryQuery,
        response: { 200: Envelope(BalanceHistorySchema), ...envelopeErrors(400, 401, 403, 404) },
      },
    },
    async (request) =>
      ok(await balanceHistory(ctxOf(request), { organizationId: request.params.id, from: request.query.from, to: request.query.to, tz: request.query.tz })),
  );
}
