import { type TSchema, Type } from 'typebox';
import { Nullable, StringEnum } from './schemas.js';

/**
 * The events organization webhooks receive (docs/webhooks.md), as the OpenAPI 3.1 `webhooks` section: each
 * event's body `{id, type, created_at, data}` with its `data`, and the headers every delivery carries.
 * The data shapes are what the emitters in the modules write (events/outbox.ts callers); the webhook
 * delivery tests read real deliveries against them.
 */
const Uuid = (description: string) => Type.String({ format: 'uuid', description });
const Time = (description: string) => Type.String({ format: 'date-time', description });

const Role = StringEnum(['owner', 'admin', 'member', 'viewer'], { description: 'Role in the organization' });

const BudgetEventData = Type.Object({
  budget_id: Uuid('The budget'),
  scope: StringEnum(['organization', 'deployment', 'api_key', 'end_user', 'tool']),
  deployment_id: Nullable(Uuid('The deployment the budget is for or narrowed to; null when none')),
  end_user_id: Nullable(Type.String({ description: 'The end user counted (for a "*" budget the one whose window it is); null unless the scope is end_user' })),
  tool_name: Nullable(Type.String({ description: 'The tool counted (for a "*" budget the one whose window it is); null unless the scope is tool' })),
  metric: StringEnum(['credits', 'ai_tokens']),
  threshold: Type.Integer({ description: 'Percent reached; 100 for budget.exceeded', examples: [80, 100] }),
  spent: Type.Integer({ description: 'Counted in the window when the event was written' }),
  limit: Type.Integer({ description: "The budget's limit of that metric" }),
  window_start: Time('Start of the window'),
  window_end: Time('End of the window: when the count starts over'),
  truncated: Type.Optional(Type.Literal(true, { description: 'The 101st event of a "*" budget in a window: no more are sent for it' })),
});

/** Auto top-up events' data (docs/billing.md, "Auto top-up"). */
const autoTopUpData = (failed: boolean) =>
  Type.Object({
    deployment_id: Uuid('The deployment topped up'),
    pack: Type.String({ description: 'The credit pack bought' }),
    credits: Type.Integer({ description: "The pack's credits" }),
    payment_intent_id: Nullable(Type.String({ description: 'The off-session Stripe PaymentIntent; null when Stripe made none' })),
    consecutive_failures: Type.Integer({ description: 'Failed top-ups in a row in the organization, this one included (0 after a success)' }),
    ...(failed ? { failure_code: Type.String({ description: "Stripe's code (card_declined, authentication_required …) or no_payment_method", examples: ['card_declined'] }) } : {}),
  });

export const EVENT_DATA: Record<string, { summary: string; data: TSchema }> = {
  'organization.member.added': {
    summary: 'A user joined the organization (created it, accepted an invitation, or was added by an operator)',
    data: Type.Object({
      organization_id: Uuid('Organization'),
      user_id: Uuid('The new member'),
      role: Role,
      invitation_id: Type.Optional(Uuid('The invitation accepted, when there was one')),
    }),
  },
  'organization.member.removed': {
    summary: 'A member was removed, or left',
    data: Type.Object({
      organization_id: Uuid('Organization'),
      user_id: Uuid('The former member'),
      role: Role,
      left: Type.Boolean({ description: 'true when the member removed themselves' }),
    }),
  },
  'subscription.updated': {
    summary: "The organization's Stripe subscription changed status, price, tier or period",
    data: Type.Object({
      organization_id: Uuid('Organization'),
      subscription_id: Type.String({ description: 'Stripe subscription id', examples: ['sub_1PqR2s'] }),
      status: Type.String({ description: 'Stripe status', examples: ['active', 'past_due', 'canceled'] }),
      previous_status: Nullable(Type.String({ description: 'Status before the change; null for a new subscription' })),
      price_id: Type.Optional(Nullable(Type.String({ description: 'Stripe price' }))),
      tier: Type.Optional(
        Nullable(
          Type.String({
            description:
              "The primary deployment's tier after the change: what the subscription in force sells (this one, or another still in force), else the tier of a new organization",
          }),
        ),
      ),
      current_period_start: Type.Optional(Nullable(Time('Billing period start'))),
      current_period_end: Type.Optional(Nullable(Time('Billing period end'))),
      cancel_at_period_end: Type.Optional(Type.Boolean()),
      invoice_id: Type.Optional(Type.String({ description: 'The unpaid invoice, when a payment failed' })),
    }),
  },
  'api_key.created': {
    summary: 'An API key was created (the key itself is never sent)',
    data: Type.Object({
      api_key_id: Uuid('API key'),
      name: Type.String(),
      scopes: Type.Array(StringEnum(['read', 'write', 'admin'])),
      key_prefix: Type.String({ description: 'First characters of the key, to recognise it' }),
      expires_at: Nullable(Time('Expiry; null when it does not expire')),
    }),
  },
  'api_key.revoked': {
    summary: 'An API key was revoked: it is refused from now on',
    data: Type.Object({ api_key_id: Uuid('API key'), name: Type.String(), key_prefix: Type.String() }),
  },
  'credits.purchased': {
    summary: 'Purchased credits were added to a deployment (a credit pack paid, or an operator grant)',
    data: Type.Object({
      deployment_id: Uuid('Deployment'),
      amount: Type.Integer({ description: 'Credits added' }),
      purchased_balance: Type.Integer({ description: 'Purchased credits after the grant' }),
      reason: Type.String(),
      expires_at: Nullable(Time('When these credits expire; null when they do not')),
      pack: Type.Optional(Type.String({ description: 'The credit pack, when bought through Stripe' })),
      checkout_session_id: Type.Optional(Type.String({ description: 'The Stripe Checkout Session that paid for it' })),
      payment_intent_id: Type.Optional(Type.String({ description: 'An auto top-up: the off-session Stripe PaymentIntent that paid for it' })),
      auto_top_up: Type.Optional(Type.Literal(true, { description: 'Bought by auto top-up (docs/billing.md, "Auto top-up")' })),
    }),
  },
  'quota.threshold': {
    summary: 'A deployment used 80 % or 100 % of a quota this period (once per threshold per period)',
    data: Type.Object({
      deployment_id: Uuid('Deployment'),
      quota: StringEnum(['monthly_credits', 'ai_tokens']),
      threshold: Type.Integer({ description: 'Percent reached', examples: [80, 100] }),
      used: Type.Integer({ description: 'Used this period' }),
      limit: Nullable(Type.Integer({ description: 'The limit; null when unlimited' })),
      period_end: Time('End of the period'),
    }),
  },
  'deployment.tier_changed': {
    summary: "A deployment's tier changed",
    data: Type.Object({
      deployment_id: Uuid('Deployment'),
      from: Type.String({ description: 'Tier before', examples: ['trial'] }),
      to: Type.String({ description: 'Tier after', examples: ['launch'] }),
    }),
  },
  'budget.threshold': {
    summary:
      "A budget's window reached one of its alert thresholds (docs/budgets.md, Events): once per threshold per window and metric; a \"*\" budget sends at most 100 events per window, then one with truncated: true",
    data: BudgetEventData,
  },
  'budget.exceeded': {
    summary: 'A block budget first refused a charge in a window (docs/budgets.md, Events): once per window and metric',
    data: BudgetEventData,
  },
  'auto_top_up.succeeded': {
    summary: "An auto top-up's payment succeeded and its credits were added (a credits.purchased event is sent too)",
    data: autoTopUpData(false),
  },
  'auto_top_up.failed': {
    summary: 'An auto top-up could not be paid (declined, authentication required, no saved card); another is tried no sooner than an hour later',
    data: autoTopUpData(true),
  },
  'auto_top_up.disabled': {
    summary: 'Three auto top-ups in a row failed: auto top-up is switched off until an owner or admin enables it again',
    data: autoTopUpData(false),
  },
  'webhook.test': {
    summary: 'A test send (POST /organizations/{id}/webhooks/{webhookId}/test): to that webhook only; not an event to subscribe to',
    data: Type.Object({
      organization_id: Uuid('Organization'),
      webhook_id: Uuid('The webhook tested'),
      message: Type.String({ description: 'A fixed text; the time is the body\'s created_at', examples: ['This is a test event'] }),
    }),
  },
};

/** The request headers of every delivery (docs/webhooks.md, Verifying a delivery): x-service-signature and the Standard Webhooks set. */
const DELIVERY_HEADERS: Array<{ name: string; description: string }> = [
  { name: 'x-service-signature', description: "Hex HMAC-SHA256 of the raw body, keyed with the webhook's secret exactly as shown (whsec_ prefix included)" },
  { name: 'x-service-event', description: 'The event type' },
  { name: 'x-service-delivery', description: 'The delivery id' },
  {
    name: 'webhook-id',
    description:
      "Standard Webhooks message id: the delivery id (as x-service-delivery), the same on every attempt; deduplicate by it. Each webhook gets its own delivery of an event; the event id is the body's id",
  },
  { name: 'webhook-timestamp', description: 'Standard Webhooks timestamp (epoch seconds)' },
  { name: 'webhook-signature', description: 'Standard Webhooks signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>' },
];

/** The `webhooks` section of the document: one POST per event type. */
export function webhooksSection(): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [type, { summary, data }] of Object.entries(EVENT_DATA)) {
    const name = type
      .split(/[._]/)
      .map((w) => w[0]?.toUpperCase() + w.slice(1))
      .join('');
    out[type] = {
      post: {
        operationId: `on${name}`,
        summary,
        tags: ['Webhooks'],
        security: [],
        parameters: DELIVERY_HEADERS.map((h) => ({ in: 'header', name: h.name, required: true, description: h.description, schema: { type: 'string' } })),
        requestBody: {
          required: true,
          content: {
            'application/json': {
              schema: {
                type: 'object',
                title: `${name}Event`,
                required: ['id', 'type', 'created_at', 'data'],
                properties: {
                  id: { type: 'string', format: 'uuid', description: 'Event id' },
                  type: { type: 'string', const: type },
                  created_at: { type: 'string', format: 'date-time' },
                  data: { ...data, title: `${name}Data` },
                },
              },
            },
          },
        },
        responses: {
          '200': { description: 'Any 2xx: delivered' },
          '410': { description: 'Gone: the webhook is disabled' },
        },
      },
    };
  }
  return out;
}
