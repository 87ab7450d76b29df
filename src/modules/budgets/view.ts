import { type BudgetRow, type BudgetScope, type BudgetStanding, type BudgetWindowKind, EACH } from '../credits/index.js';
import { MASK } from './schemas.js';

/** A `budgets` row as this module reads it. */
export interface BudgetRecord extends BudgetRow {
  alert_thresholds: number[];
  created_at: Date;
  updated_at: Date;
}

/** A budget's own fields, as written: what the audit rows keep. */
export interface BudgetFields {
  id: string;
  organization_id: string;
  scope: BudgetScope;
  deployment_id: string | null;
  api_key_id: string | null;
  end_user_id: string | null;
  tool_name: string | null;
  limit_credits: number | null;
  limit_ai_tokens: number | null;
  window: BudgetWindowKind;
  mode: 'block' | 'alert';
  alert_thresholds: number[];
}

/** A budget as the API answers it (docs/budgets.md, API). */
export interface BudgetView extends BudgetFields {
  spent_credits: number | null;
  remaining_credits: number | null;
  spent_ai_tokens: number | null;
  remaining_ai_tokens: number | null;
  window_start: string;
  resets_at: string;
  subjects: Array<{ id: string; spent_credits: number; spent_ai_tokens: number }> | null;
  created_at: string;
  updated_at: string;
}

export const fieldsOf = (b: BudgetRecord): BudgetFields => ({
  id: b.id,
  organization_id: b.organization_id,
  scope: b.scope,
  deployment_id: b.deployment_id,
  api_key_id: b.api_key_id,
  end_user_id: b.end_user_id,
  tool_name: b.tool_name,
  limit_credits: b.limit_credits,
  limit_ai_tokens: b.limit_ai_tokens,
  window: b.window_kind,
  mode: b.mode,
  alert_thresholds: b.alert_thresholds,
});

/** What is spent, with a limit: null without one (nothing of that kind is counted for the budget). */
const spentOf = (limit: number | null, spent: number) => (limit === null ? null : spent);
const remainingOf = (limit: number | null, spent: number) => (limit === null ? null : Math.max(0, limit - spent));

/**
 * The answer for one budget and its window in progress. `masked` (a viewer): end users' ids read
 * "***", the budget's own (but "*") and those of its subjects; tools are not masked.
 */
export function viewOf(b: BudgetRecord, standing: BudgetStanding, masked: boolean): BudgetView {
  const fields = fieldsOf(b);
  const hideUsers = masked && b.scope === 'end_user';
  return {
    ...fields,
    end_user_id: hideUsers && b.end_user_id !== EACH ? MASK : b.end_user_id,
    spent_credits: spentOf(b.limit_credits, standing.spentCredits),
    remaining_credits: remainingOf(b.limit_credits, standing.spentCredits),
    spent_ai_tokens: spentOf(b.limit_ai_tokens, standing.spentAiTokens),
    remaining_ai_tokens: remainingOf(b.limit_ai_tokens, standing.spentAiTokens),
    window_start: standing.window.start.toISOString(),
    resets_at: standing.window.end.toISOString(),
    subjects:
      standing.subjects?.map((s) => ({ id: hideUsers ? MASK : s.subject, spent_credits: s.spentCredits, spent_ai_tokens: s.spentAiTokens })) ?? null,
    created_at: b.created_at.toISOString(),
    updated_at: b.updated_at.toISOString(),
  };
}
