import type { Queryable } from '../../db/client.js';
import { type FieldError, ValidationError } from '../../errors.js';
import { isUuid } from '../../lib/ids.js';
import { BUDGET_SCOPES, BUDGET_WINDOWS, type BudgetScope } from '../credits/index.js';
import { MAX_LIMIT, MAX_THRESHOLDS, MODES } from './schemas.js';

/**
 * What makes a budget well formed (docs/budgets.md, API). The route schemas refuse most of this
 * already; the verbs check again, so a budget made by any caller holds to the same rules, and check
 * what only the database knows: that the scope's ids are the organization's.
 */

/** A budget's fields as a create sends them, or as a change leaves them. */
export interface BudgetSpec {
  scope: string;
  deployment_id?: string | null | undefined;
  api_key_id?: string | null | undefined;
  end_user_id?: string | null | undefined;
  tool_name?: string | null | undefined;
  limit_credits?: number | null | undefined;
  limit_ai_tokens?: number | null | undefined;
  window: string;
  mode?: string | undefined;
  alert_thresholds?: number[] | undefined;
}

/** The scope that names each id; deployment_id also narrows the other scopes, so it is in none. */
const OWN_SCOPE = { api_key_id: 'api_key', end_user_id: 'end_user', tool_name: 'tool' } as const;
/** The id each scope requires. */
const SCOPE_ID: Partial<Record<BudgetScope, keyof BudgetSpec>> = {
  deployment: 'deployment_id',
  api_key: 'api_key_id',
  end_user: 'end_user_id',
  tool: 'tool_name',
};

const isLimit = (v: unknown) => v === null || v === undefined || (Number.isInteger(v) && (v as number) >= 1 && (v as number) <= MAX_LIMIT);
const isName = (v: unknown) => v === null || v === undefined || (typeof v === 'string' && v.length >= 1 && v.length <= 200);

/** Everything wrong with `spec` that needs no database, by field (empty: nothing). */
export function problemsOf(spec: BudgetSpec): FieldError[] {
  const out: FieldError[] = [];
  const scope = spec.scope as BudgetScope;
  if (!BUDGET_SCOPES.includes(scope)) out.push({ field: 'scope', message: `must be one of ${BUDGET_SCOPES.join(', ')}` });
  if (!(BUDGET_WINDOWS as readonly string[]).includes(spec.window)) out.push({ field: 'window', message: `must be one of ${BUDGET_WINDOWS.join(', ')}` });
  if (spec.mode !== undefined && !(MODES as readonly string[]).includes(spec.mode)) out.push({ field: 'mode', message: `must be one of ${MODES.join(', ')}` });
  for (const field of ['limit_credits', 'limit_ai_tokens'] as const) {
    if (!isLimit(spec[field])) out.push({ field, message: `must be a whole number from 1 to ${MAX_LIMIT}` });
  }
  if ((spec.limit_credits ?? null) === null && (spec.limit_ai_tokens ?? null) === null) {
    out.push({ field: 'limit_credits', message: 'or limit_ai_tokens must be set' });
  }
  const thresholds = spec.alert_thresholds ?? [];
  if (thresholds.length > MAX_THRESHOLDS || thresholds.some((t) => !Number.isInteger(t) || t < 1 || t > 100) || new Set(thresholds).size !== thresholds.length) {
    out.push({ field: 'alert_thresholds', message: `must be at most ${MAX_THRESHOLDS} different whole percents from 1 to 100` });
  }
  for (const field of ['end_user_id', 'tool_name'] as const) {
    if (!isName(spec[field])) out.push({ field, message: 'must be 1 to 200 characters, or "*"' });
  }
  if (spec.deployment_id != null && !isUuid(spec.deployment_id)) out.push({ field: 'deployment_id', message: 'must be a UUID' });
  if (spec.api_key_id != null && !isUuid(spec.api_key_id)) out.push({ field: 'api_key_id', message: 'must be a UUID' });
  if (!BUDGET_SCOPES.includes(scope)) return out;
  const required = SCOPE_ID[scope];
  if (required && (spec[required] ?? null) === null) out.push({ field: required, message: `is required for a ${scope} budget` });
  for (const [field, own] of Object.entries(OWN_SCOPE) as Array<[keyof typeof OWN_SCOPE, BudgetScope]>) {
    if (own !== scope && (spec[field] ?? null) !== null) out.push({ field, message: `belongs only to a ${own} budget` });
  }
  return out;
}

/** Throw the 400 for `problems`, naming the first field in the message and every one in the details. */
export function refuse(problems: FieldError[]): void {
  const first = problems[0];
  if (first) throw ValidationError.forField(first.field, first.message, problems);
}

/**
 * The scope's ids must be the organization's: a deployment or API key that does not exist or is
 * another organization's is 400 naming the field, indistinguishable one from the other.
 */
export async function checkIds(tx: Queryable, organizationId: string, spec: BudgetSpec): Promise<void> {
  const problems: FieldError[] = [];
  if (spec.deployment_id) {
    const rows = await tx.query('SELECT 1 FROM deployments WHERE id = $1 AND organization_id = $2', [spec.deployment_id, organizationId]);
    if (rows.length === 0) problems.push({ field: 'deployment_id', message: 'is not a deployment of this organization' });
  }
  if (spec.api_key_id) {
    const rows = await tx.query('SELECT 1 FROM api_keys WHERE id = $1 AND organization_id = $2', [spec.api_key_id, organizationId]);
    if (rows.length === 0) problems.push({ field: 'api_key_id', message: 'is not an API key of this organization' });
  }
  refuse(problems);
}
