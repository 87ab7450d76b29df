import { Type } from 'typebox';
import { PageQuery } from '../../http/envelope.js';
import { Nullable, StringEnum } from '../../http/schemas.js';
import { GROUP_BYS, MAX_RANGE_DAYS, MAX_SPLIT_KEYS, SPLIT_BYS } from './range.js';

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const Int = (description: string, example = 0) => Type.Integer({ description, examples: [example] });
const Instant = (description: string) =>
  Type.String({ format: 'date-time', maxLength: 40, description, examples: ['2026-01-15T00:00:00Z'] });

export const OrgParams = Type.Object({ id: Uuid('Organization id') });

const DeploymentFilter = Type.Optional(Uuid("Only this deployment's records (a deployment of the organization; another is 404)"));

export const SummaryQuery = Type.Object(
  {
    group_by: Type.Optional(
      StringEnum(GROUP_BYS, {
        description:
          'day or hour (buckets, empty ones included; days in tz), tool, action (as recorded), mcp_user (end user; null = none), model (AI calls; null = tool calls) or deployment. Default day',
        default: 'day',
        examples: ['day'],
      }),
    ),
    from: Type.Optional(Instant('Start, inclusive (RFC 3339; any offset, answered in UTC). Default: 30 days before to')),
    to: Type.Optional(
      Instant(`End, exclusive (RFC 3339). Default: now. At most ${MAX_RANGE_DAYS.hour} days after from by hour, ${MAX_RANGE_DAYS.day} otherwise`),
    ),
    deployment_id: DeploymentFilter,
    tz: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 64,
        description: 'IANA time zone of the day buckets (its offset must be whole hours over the range). Default UTC',
        examples: ['Europe/Berlin'],
      }),
    ),
    split_by: Type.Optional(
      StringEnum(SPLIT_BYS, {
        description: `With group_by=day or hour: split each bucket by tool, action or end user (the ${MAX_SPLIT_KEYS} largest over the range by credits, the rest as one "other" part), for a stacked chart`,
        examples: ['tool'],
      }),
    ),
  },
  { additionalProperties: false },
);

export const RecordsQuery = Type.Object(
  {
    ...PageQuery.properties,
    from: Type.Optional(Instant('Only records at or after this instant (RFC 3339)')),
    to: Type.Optional(Instant('Only records before this instant (RFC 3339)')),
    deployment_id: DeploymentFilter,
    tool_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only calls of this tool', examples: ['rag_query'] })),
    mcp_user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Only calls of this end user', examples: ['end-user-42'] })),
    success: Type.Optional(Type.Boolean({ description: 'true: only calls that deducted; false: only refused ones' })),
  },
  { additionalProperties: false },
);

const Counts = {
  calls: Int('Usage records (calls metered, refused ones included)', 12),
  successful: Int('Calls that deducted', 11),
  failed: Int('Calls refused (nothing deducted)', 1),
  credits: Int('Credits deducted, net of refunds', 22),
  credits_refunded: Int('Credits of these calls refunded since', 0),
  input_tokens: Int('AI calls: prompt tokens (0 for tool calls)', 0),
  output_tokens: Int('AI calls: completion tokens (0 for tool calls)', 0),
};

export const UsageTotalsSchema = Type.Object(Counts, { title: 'UsageTotals' });

export const UsageSplitSchema = Type.Object(
  {
    key: Nullable(Type.String({ description: 'The tool, action or end user (null: calls without an end user, or the "other" part)', examples: ['rag_query'] })),
    other: Type.Boolean({ description: 'true for the one part that sums every key outside split_keys' }),
    ...Counts,
  },
  { title: 'UsageSplit' },
);

export const UsageGroupSchema = Type.Object(
  {
    key: Nullable(
      Type.String({
        description: 'Bucket start (UTC ISO 8601) for day/hour; the tool name, the action, or the end user id (null: calls without one)',
        examples: ['2026-01-15T00:00:00.000Z'],
      }),
    ),
    ...Counts,
    split: Type.Optional(
      Type.Array(UsageSplitSchema, {
        description: 'With split_by: the parts of this bucket with calls, in the order of split_keys, "other" last; they sum to the bucket',
      }),
    ),
  },
  { title: 'UsageGroup' },
);

export const UsageSummarySchema = Type.Object(
  {
    organization_id: Uuid('Organization id'),
    deployment_id: Nullable(Uuid('The deployment filter, or null for all of them')),
    group_by: StringEnum(GROUP_BYS, { description: 'The grouping' }),
    from: Type.String({
      format: 'date-time',
      description: 'Start of the range, inclusive (UTC): the asked start rounded down to the hour (to the UTC day for end users)',
      examples: ['2025-12-16T12:00:00.000Z'],
    }),
    to: Type.String({
      format: 'date-time',
      description: 'End of the range, exclusive (UTC): the asked end rounded up to the hour (to the UTC day for end users)',
      examples: ['2026-01-15T13:00:00.000Z'],
    }),
    tz: Type.String({ description: 'The zone of the day buckets', examples: ['UTC'] }),
    groups: Type.Array(UsageGroupSchema, {
      description: 'Time buckets oldest first; otherwise by credits, then calls',
    }),
    totals: UsageTotalsSchema,
    truncated: Type.Boolean({ description: 'More than 1,000 tools, actions or end users: the smallest are left out of groups, not of totals' }),
    split_by: Type.Optional(StringEnum(SPLIT_BYS, { description: 'The split asked for' })),
    split_keys: Type.Optional(
      Type.Array(Nullable(Type.String()), {
        description: `With split_by: the keys split out, largest first by credits then calls (at most ${MAX_SPLIT_KEYS}; null = calls without an end user)`,
      }),
    ),
    split_other: Type.Optional(Type.Boolean({ description: 'With split_by: whether more keys had usage, summed in each bucket\'s "other" part' })),
    as_of: Type.String({ format: 'date-time', description: 'The instant the answer describes' }),
    lag_seconds: Type.Integer({ description: 'How far the rollups read were behind as_of: 0 once every record is counted (they are written with the records); while the backfill of records older than the rollups runs, the seconds since it began', examples: [0] }),
  },
  { title: 'UsageSummary' },
);

export const UsageRecordSchema = Type.Object(
  {
    id: Uuid('Usage record id'),
    deployment_id: Uuid('The deployment that metered the call'),
    tool_name: Type.String({ description: 'The tool (AI calls: the model; proxied webhooks: webhook_send)', examples: ['rag_query'] }),
    action: Type.String({ description: 'The action it was metered as when recorded (ai_tokens for AI calls)', examples: ['rag_query'] }),
    mcp_user_id: Nullable(Type.String({ description: 'End user of the MCP session (service mode), else null', examples: ['end-user-42'] })),
    credits: Int('Credits deducted, net of refunds', 2),
    credits_refunded: Int('Credits refunded since', 0),
    success: Type.Boolean({ description: 'Whether credits were deducted' }),
    error: Nullable(Type.String({ description: 'Why nothing was deducted', examples: ['insufficient_credits'] })),
    invocation_id: Nullable(Type.String({ description: 'Idempotency id of the call', examples: ['inv_01J9Z3'] })),
    timestamp: Type.String({ format: 'date-time', description: 'When it was recorded (UTC)', examples: ['2026-01-15T12:00:00.000Z'] }),
  },
  { title: 'UsageRecord' },
);
