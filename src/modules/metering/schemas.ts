import { Type } from 'typebox';
import { InvocationId, Metadata, Nullable, StringEnum, ToolName } from '../../http/schemas.js';

const Reason = Nullable(
  StringEnum(['sandbox_tier', 'insufficient_credits', 'no_deployment_found', 'deployment_not_found', 'mcp_disabled', 'budget_exceeded'], {
    description: 'Why the call is not allowed; null when allowed',
  }),
);
const Tier = Nullable(Type.String({ description: 'Deployment tier', examples: ['launch'] }));
// docs/input.md: a deployment_id that is not a UUID is 400 here (it used to reach a ::uuid cast: 500).
const DeploymentId = Type.String({ format: 'uuid', description: 'Deployment UUID', examples: ['0b6f1c2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });

/** The end user of the call, for end-user budgets and usage analytics (docs/budgets.md); `*` is no one's id. */
const EndUserId = Type.String({ minLength: 1, maxLength: 200, description: 'Your end user of this call (or send X-End-User-Id); counted by end-user budgets' });

const reservationFields = {
  reserve: Type.Optional(
    Type.Boolean({ description: 'Hold credit_cost credits for 5 minutes for a later record with the same invocation_id' }),
  ),
  invocation_id: Type.Optional(InvocationId),
  end_user_id: Type.Optional(EndUserId),
};

export const StdioCheckBody = Type.Object({ tool_name: ToolName, ...reservationFields }, { additionalProperties: false });
export const ServiceCheckBody = Type.Object(
  { deployment_id: DeploymentId, tool_name: ToolName, ...reservationFields },
  { additionalProperties: false },
);

/** What a refusal that money could lift says; a budget's names the budget and when its window ends (docs/budgets.md). */
export const PaymentRequired = Type.Object(
  {
    reason: StringEnum(['insufficient_credits', 'budget_exceeded']),
    credits_required: Type.Integer({ description: 'What the call costs' }),
    credits_available: Nullable(Type.Integer({ description: 'Spendable credits; null when unlimited or unknown' })),
    budget_id: Type.Optional(Type.String({ format: 'uuid', description: 'The budget that refused the call' })),
    resets_at: Type.Optional(Type.String({ format: 'date-time', description: "When the budget's window ends" })),
    top_up_url: Type.Optional(
      Type.String({
        format: 'uri',
        description: 'insufficient_credits with billing available: a page where a person buys a credit pack for this deployment, valid 30 minutes',
        examples: ['https://creditgate.example.com/console/top-up/AQtvHCSwW0rHqTiWJ3FHqr4AAGlpH3iA'],
      }),
    ),
  },
  { title: 'PaymentRequired' },
);

const reservationAnswer = {
  invocation_id: Type.Optional(Type.String({ description: 'With reserve: the id the reservation is held under' })),
  reservation_expires_at: Type.Optional(Type.String({ format: 'date-time', description: 'With reserve: when the hold lapses' })),
  payment_required: Type.Optional(PaymentRequired),
};

export const StdioCheckReply = Type.Object({
  allowed: Type.Boolean(),
  credit_cost: Type.Integer({ description: 'Credits the call will cost; 0 on a denial' }),
  tier: Tier,
  reason: Reason,
  ...reservationAnswer,
}, { title: 'StdioCheckResult' });

export const ServiceCheckReply = Type.Object({
  allowed: Type.Boolean(),
  tier: Tier,
  credit_cost: Type.Integer(),
  credits_available: Nullable(Type.Integer({ description: 'Spendable credits; null when unlimited or denied' })),
  reason: Reason,
  ...reservationAnswer,
}, { title: 'CheckResult' });

export const StdioRecordBody = Type.Object(
  { tool_name: ToolName, metadata: Type.Optional(Metadata), invocation_id: Type.Optional(InvocationId), end_user_id: Type.Optional(EndUserId) },
  { additionalProperties: false },
);

export const ServiceUsageBody = Type.Object(
  {
    deployment_id: DeploymentId,
    tool_name: ToolName,
    mcp_user_id: Type.Optional(Nullable(Type.String({ maxLength: 200, description: 'End user of the MCP session' }))),
    metadata: Type.Optional(Metadata),
    invocation_id: Type.Optional(InvocationId),
  },
  { additionalProperties: false },
);

export const RecordReply = Type.Object({
  success: Type.Boolean({ description: 'Whether credits were deducted' }),
  credits_used: Type.Integer(),
  credits_remaining: Nullable(Type.Integer({ description: 'Spendable credits after this call; null when unlimited' })),
  error: Nullable(Type.String({ description: 'Why nothing was deducted', examples: ['insufficient_credits'] })),
  usage_id: Nullable(Type.String({ description: 'The usage record written for this call' })),
  invocation_id: Nullable(Type.String()),
  payment_required: Type.Optional(PaymentRequired),
}, { title: 'UsageRecorded' });

export const ResolveQuery = Type.Object(
  { user_id: Type.String({ minLength: 1, maxLength: 200, description: "A user's id or external_id" }) },
  { additionalProperties: false },
);

export const ResolveReply = Type.Object({
  deployment_id: Nullable(Type.String()),
  organization_id: Nullable(Type.String()),
  tier: Tier,
  mcp_enabled: Type.Boolean(),
  error: Nullable(Type.String({ examples: ['no_deployment_found'] })),
}, { title: 'ResolvedDeployment' });

export const CostsReply = Type.Object({
  costs: Type.Array(
    Type.Object({ action: Type.String(), credits: Type.Integer(), description: Nullable(Type.String()) }),
    { description: 'Every action with its credits, by action' },
  ),
  tools: Type.Array(
    Type.Object({ tool_name: Type.String(), action: Type.String() }),
    { description: 'The tool → action map, by tool name; a tool not listed is metered as platform_basic' },
  ),
}, { title: 'CreditCosts' });

/** The cost table's validator: a strong ETag over its content (docs/metering.md, Prices up front). */
export const CostsEtag = Type.String({ description: 'Strong ETag of the table; send it back as If-None-Match to get 304 while the table is unchanged', examples: ['"3q2-7wEjRk3xYbG5hXJ0k0n8Pq5aV1cZ"'] });
export const CostsHeaders = Type.Object({
  'if-none-match': Type.Optional(Type.String({ maxLength: 1000, description: 'An ETag of an earlier answer: 304 without a body while the table is unchanged' })),
});

/** The organization of GET /organizations/{id}/credit-costs. */
export const OrgParams = Type.Object({
  id: Type.String({ format: 'uuid', description: 'Organization id', examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] }),
});

export const InvocationParams = Type.Object({ invocation_id: InvocationId });
export const UsageParams = Type.Object({ usage_id: Type.String({ format: 'uuid' }) });
export const ScopeQuery = Type.Object(
  { deployment_id: Type.Optional(DeploymentId) },
  { additionalProperties: false },
);
export const ReleaseBody = Type.Union([
  Type.Object({ deployment_id: Type.Optional(DeploymentId) }, { additionalProperties: false }),
  Type.Null(),
]);

export const ReleaseReply = Type.Object({
  invocation_id: Type.String(),
  status: Type.String({ examples: ['released'] }),
  released_credits: Type.Integer(),
}, { title: 'ReservationReleased' });

export const RefundBody = Type.Object(
  {
    amount: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000_000, description: 'Credits to refund; all that is left when omitted' })),
    reason: Type.String({ minLength: 1, maxLength: 500 }),
    idempotency_key: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  },
  { additionalProperties: false },
);

export const RefundReply = Type.Object({
  usage_id: Type.String(),
  refund_id: Nullable(Type.String()),
  credits_refunded: Type.Integer({ description: 'Credits of the usage settled by this refund' }),
  credits_forfeited: Type.Integer({
    description: 'Of those, the monthly part of a period that has ended: settled but not given back (nothing rolls over)',
  }),
  total_refunded: Type.Integer(),
  credits_remaining: Nullable(Type.Integer()),
}, { title: 'UsageRefunded' });

export const InvocationReply = Type.Object({
  invocation_id: Type.String(),
  deployment_id: Type.String(),
  status: Type.String({ description: 'reserved, recorded, released, expired, refunded or denied' }),
  tool_name: Type.String(),
  reserved_credits: Type.Integer(),
  reservation_expires_at: Nullable(Type.String({ format: 'date-time' })),
  usage_id: Nullable(Type.String()),
  credits_used: Type.Integer(),
  credits_refunded: Type.Integer(),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
}, { title: 'Invocation' });
