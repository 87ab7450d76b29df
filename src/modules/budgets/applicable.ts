import { type Static, Type } from 'typebox';
import type { Queryable } from '../../db/client.js';
import { Nullable, StringEnum } from '../../http/schemas.js';
import { type BudgetRow, budgetStandings } from '../credits/index.js';

/**
 * The budgets that hold a caller's charges, as the entitlement snapshot and GET /api/v1/ai/quota answer
 * them (docs/budgets.md, "In the entitlement snapshot and the AI quota"): the organization and
 * deployment budgets of the deployment, and the api_key budgets of the key that authenticated, if one
 * did. A budget narrowed to another deployment holds none of this deployment's charges and is left out.
 * Read from the database on every answer, never cached: the spent amounts are those of the moment.
 */

const SCOPES = ['organization', 'deployment', 'api_key'] as const;

export const AppliedBudgetSchema = Type.Object(
  {
    id: Type.String({ format: 'uuid', description: 'The budget (GET /organizations/{id}/budgets/{budgetId})' }),
    scope: StringEnum(SCOPES, { description: 'The organization, this deployment, or the API key that authenticated', examples: ['organization'] }),
    window: StringEnum(['hour', 'day', 'week', 'month', 'period'], {
      description: "UTC hours, days, weeks from Monday, calendar months, or the deployment's credit period",
      examples: ['day'],
    }),
    limit_credits: Nullable(Type.Integer({ minimum: 1, description: 'Credits the window may spend; null: no credit limit', examples: [1000] })),
    limit_ai_tokens: Nullable(Type.Integer({ minimum: 1, description: 'AI tokens (input + output of AI calls) the window may spend; null: no AI token limit' })),
    spent_credits: Nullable(Type.Integer({ minimum: 0, description: 'Counted in the window in progress; null without a credit limit', examples: [120] })),
    spent_ai_tokens: Nullable(Type.Integer({ minimum: 0, description: 'As spent_credits, for AI tokens; null without an AI token limit' })),
    resets_at: Type.String({ format: 'date-time', description: 'End of the window in progress: when the count starts over' }),
  },
  { title: 'AppliedBudget' },
);

export type AppliedBudget = Static<typeof AppliedBudgetSchema>;

/** Whose charges: the deployment, and the API key that authenticated (null: none did). */
export interface BudgetHolder {
  organizationId: string;
  deploymentId: string;
  apiKeyId: string | null;
}

/**
 * The budgets that apply to `holder`, oldest first, each with its window in progress at `now`. One
 * indexed read of the organization's budgets; the windows are read only when it finds some, so an
 * organization without budgets costs that one read and answers [].
 */
export async function budgetsThatApply(db: Queryable, holder: BudgetHolder, now: Date): Promise<AppliedBudget[]> {
  const rows = await db.query<BudgetRow>(
    `SELECT id, organization_id, scope, deployment_id, api_key_id, end_user_id, tool_name, limit_credits, limit_ai_tokens,
            window_kind, mode, alert_thresholds
     FROM budgets
     WHERE organization_id = $1 AND (deployment_id IS NULL OR deployment_id = $2)
       AND (scope IN ('organization', 'deployment') OR (scope = 'api_key' AND api_key_id = $3::uuid))
     ORDER BY created_at, id`,
    [holder.organizationId, holder.deploymentId, holder.apiKeyId],
    'budgets_that_apply',
  );
  if (rows.length === 0) return [];
  const standings = await budgetStandings(db, holder.organizationId, rows, now);
  return rows.map((b) => {
    const standing = standings.get(b.id)!;
    return {
      id: b.id,
      scope: b.scope as (typeof SCOPES)[number],
      window: b.window_kind,
      limit_credits: b.limit_credits,
      limit_ai_tokens: b.limit_ai_tokens,
      // As the budgets API answers (docs/budgets.md, Reads): nothing of a kind is counted without its limit.
      spent_credits: b.limit_credits === null ? null : standing.spentCredits,
      spent_ai_tokens: b.limit_ai_tokens === null ? null : standing.spentAiTokens,
      resets_at: standing.window.end.toISOString(),
    };
  });
}
