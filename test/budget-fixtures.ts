import { budgetsChanged, forgetOrganizationBalances } from '../src/modules/credits/budgets.js';
import type { Harness } from './harness.js';

/**
 * Budgets for the engine's tests (docs/budgets.md), written as the budgets API writes them: the
 * organization's balance rows given a new version first (budgetsChanged), then the row, in one transaction.
 */
export interface BudgetInput {
  organizationId: string;
  scope: 'organization' | 'deployment' | 'api_key' | 'end_user' | 'tool';
  deploymentId?: string | null;
  apiKeyId?: string | null;
  endUserId?: string | null;
  toolName?: string | null;
  limitCredits: number | null;
  limitAiTokens?: number | null;
  window: 'hour' | 'day' | 'week' | 'month' | 'period';
  mode?: 'block' | 'alert';
}

export function budgetFixtures(harness: () => Harness) {
  return {
    async addBudget(input: BudgetInput): Promise<string> {
      const h = harness();
      const now = h.clock.now();
      return h.deps.db.transaction(async (tx) => {
        await budgetsChanged(tx, input.organizationId);
        const rows = await tx.query<{ id: string }>(
          `INSERT INTO budgets (organization_id, scope, deployment_id, api_key_id, end_user_id, tool_name, limit_credits, limit_ai_tokens,
                                window_kind, mode, created_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) RETURNING id`,
          [
            input.organizationId,
            input.scope,
            input.deploymentId ?? null,
            input.apiKeyId ?? null,
            input.endUserId ?? null,
            input.toolName ?? null,
            input.limitCredits,
            input.limitAiTokens ?? null,
            input.window,
            input.mode ?? 'block',
            now,
          ],
        );
        return rows[0]!.id;
      }).then(async (id) => {
        await forgetOrganizationBalances(h.deps, input.organizationId);
        return id;
      });
    },
    async setLimit(budgetId: string, organizationId: string, limitCredits: number): Promise<void> {
      const h = harness();
      await h.deps.db.transaction(async (tx) => {
        await budgetsChanged(tx, organizationId);
        await tx.query('UPDATE budgets SET limit_credits = $2 WHERE id = $1', [budgetId, limitCredits]);
      });
    },
    async removeBudget(budgetId: string, organizationId: string): Promise<void> {
      const h = harness();
      await h.deps.db.transaction(async (tx) => {
        await budgetsChanged(tx, organizationId);
        await tx.query('DELETE FROM budgets WHERE id = $1', [budgetId]);
      });
    },
    /** Every window row of a budget: subject, start and what it counted. */
    async windowsOf(
      budgetId: string,
    ): Promise<Array<{ subject: string; window_start: Date; window_end: Date; spent_credits: number; spent_ai_tokens: number }>> {
      return harness().deps.db.query(
        'SELECT subject, window_start, window_end, spent_credits, spent_ai_tokens FROM budget_windows WHERE budget_id = $1 ORDER BY window_start, subject',
        [budgetId],
      );
    },
  };
}
