import { Type } from 'typebox';
import { Nullable, StringEnum } from '../../http/schemas.js';
import { MASKED_END_USER } from '../organizations/rbac.js';

/**
 * The budgets API's shapes (docs/budgets.md, API): the body of a create and of a change, and a budget
 * as read, with what its window in progress has counted.
 */

/** The largest limit a budget takes: far below 2^53, as every amount of credits here. */
export const MAX_LIMIT = 1_000_000_000_000;
/** At most this many alert thresholds on one budget. */
export const MAX_THRESHOLDS = 10;
/** The subjects a '*' budget answers, most spent first. */
export const TOP_SUBJECTS = 100;
export const MODES = ['block', 'alert'] as const;
/** What a viewer sees in place of an end user's id (docs/budgets.md, API): as in usage reads. */
export const MASK = MASKED_END_USER;

const Uuid = (description: string) => Type.String({ format: 'uuid', description, examples: ['6f1c3d2e-5b7a-4c1d-9e2f-0a1b2c3d4e5f'] });
const Timestamp = (description: string) => Type.String({ format: 'date-time', description });
const Limit = (description: string) => Nullable(Type.Integer({ minimum: 1, maximum: MAX_LIMIT, description, examples: [1000] }));

export const OrgParams = Type.Object({ id: Uuid('Organization id') });
export const BudgetParams = Type.Object({ id: Uuid('Organization id'), budgetId: Uuid('Budget id') });

const Scope = StringEnum(['organization', 'deployment', 'api_key', 'end_user', 'tool'], {
  description: 'What the budget caps: the whole organization, one deployment, one API key, end users or tools',
  examples: ['deployment'],
});
const WindowKind = StringEnum(['hour', 'day', 'week', 'month', 'period'], {
  description: "UTC hours, days, weeks from Monday, calendar months, or the deployment's credit period",
  examples: ['day'],
});
const Mode = StringEnum(MODES, { description: 'block: a charge that would cross the credit limit is refused; alert: only counted', examples: ['block'] });
const Thresholds = Type.Array(Type.Integer({ minimum: 1, maximum: 100 }), {
  maxItems: MAX_THRESHOLDS,
  uniqueItems: true,
  description: 'Percents of the limit (1–100) to alert at; stored in ascending order. Default [80, 100]',
  examples: [[80, 100]],
});
const EndUser = Type.String({ minLength: 1, maxLength: 200, description: 'The end user, or "*" for each end user separately', examples: ['*'] });
const Tool = Type.String({ minLength: 1, maxLength: 200, description: 'The tool, or "*" for each tool separately', examples: ['rag_query'] });
const Ids = {
  deployment_id: Type.Optional(Nullable(Uuid("A deployment budget's deployment; for the other scopes, narrows the budget to that deployment's charges"))),
  api_key_id: Type.Optional(Nullable(Uuid("An api_key budget's key (a key of the organization); only on api_key budgets"))),
  end_user_id: Type.Optional(Nullable(EndUser)),
  tool_name: Type.Optional(Nullable(Tool)),
};
const Limits = {
  limit_credits: Type.Optional(Limit('Credits the window may spend')),
  limit_ai_tokens: Type.Optional(Limit('AI tokens (input + output of AI calls) the window may spend')),
};

export const CreateBudgetBody = Type.Object(
  {
    scope: Scope,
    ...Ids,
    ...Limits,
    window: WindowKind,
    mode: Type.Optional(Mode),
    alert_thresholds: Type.Optional(Thresholds),
  },
  {
    additionalProperties: false,
    description: 'At least one limit; the scope names its id (deployment_id, api_key_id, end_user_id or tool_name)',
    examples: [{ scope: 'end_user', end_user_id: '*', limit_credits: 500, window: 'day' }],
  },
);

export const UpdateBudgetBody = Type.Object(
  {
    ...Limits,
    window: Type.Optional(WindowKind),
    mode: Type.Optional(Mode),
    alert_thresholds: Type.Optional(Thresholds),
    // Accepted only as they are: a budget's scope and ids cannot be changed.
    scope: Type.Optional(Scope),
    ...Ids,
  },
  {
    additionalProperties: false,
    minProperties: 1,
    description: 'The fields to change; those left out keep their values. scope and its ids cannot change (400 when sent different)',
    examples: [{ limit_credits: 2000 }],
  },
);

const Subject = Type.Object(
  {
    id: Type.String({ description: 'The end user ("***" for a viewer) or the tool' }),
    spent_credits: Type.Integer({ minimum: 0 }),
    spent_ai_tokens: Type.Integer({ minimum: 0 }),
  },
  { title: 'BudgetSubject' },
);

export const BudgetSchema = Type.Object(
  {
    id: Type.String(),
    organization_id: Type.String(),
    scope: Scope,
    deployment_id: Nullable(Type.String()),
    api_key_id: Nullable(Type.String()),
    end_user_id: Nullable(Type.String({ description: '"***" for a viewer, except "*"' })),
    tool_name: Nullable(Type.String()),
    limit_credits: Nullable(Type.Integer()),
    limit_ai_tokens: Nullable(Type.Integer()),
    window: WindowKind,
    mode: Mode,
    alert_thresholds: Type.Array(Type.Integer()),
    spent_credits: Nullable(Type.Integer({ minimum: 0, description: 'Counted in the window in progress (a "*" budget: its largest subject); null without a credit limit' })),
    remaining_credits: Nullable(Type.Integer({ minimum: 0, description: 'limit_credits − spent_credits, never below 0; null without a credit limit' })),
    spent_ai_tokens: Nullable(Type.Integer({ minimum: 0, description: 'As spent_credits, for AI tokens; null without an AI token limit' })),
    remaining_ai_tokens: Nullable(Type.Integer({ minimum: 0, description: 'As remaining_credits, for AI tokens' })),
    window_start: Timestamp('Start of the window in progress'),
    resets_at: Timestamp('End of the window in progress: when the count starts over'),
    subjects: Nullable(Type.Array(Subject, { description: 'A "*" budget\'s end users or tools in this window, most spent first (at most 100); null otherwise' })),
    created_at: Timestamp('When the budget was created'),
    updated_at: Timestamp('When the budget was last changed'),
  },
  { title: 'Budget' },
);
