import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, type FieldError, NotFoundError } from '../../errors.js';
import { isUuid } from '../../lib/ids.js';
import { pgArray } from '../../db/arrays.js';
import { writeAudit } from '../audit/service.js';
import { budgetsChanged, budgetStandings, budgetWindowKindChanged, forgetOrganizationBalances } from '../credits/index.js';
import { authorize, type Role, seesEndUsers } from '../organizations/rbac.js';
import { type BudgetSpec, checkIds, problemsOf, refuse } from './checks.js';
import { TOP_SUBJECTS } from './schemas.js';
import { type BudgetRecord, type BudgetView, fieldsOf, viewOf } from './view.js';

/**
 * Budgets of an organization (docs/budgets.md, API): created, changed and deleted by owners and admins
 * (`billing.manage`; an API key needs `admin`), read by every role (`usage.read`; a key needs `read`),
 * and by the operator. Every change is one transaction with the organization's balance rows given a
 * new version (`budgetsChanged`, so no batch on remembered rows misses it) and its audit row.
 * `budgetsChanged` comes first: it locks the balance rows before the budget row and the window rows a
 * delete cascades to, the order the money engine keeps (balance rows, then windows, whose insert locks
 * their budget row's key), so a change and a charge never wait on each other in a cycle.
 */

/** Who is asking, as far as budgets care. */
interface Access {
  role: Role | null;
  /** The API key acting, if one is. */
  apiKeyId: string | null;
  /** End users' ids read as "***" (a viewer, or a key of one): seesEndUsers. */
  masked: boolean;
}

/**
 * The caller's right to read or to manage the organization's budgets. The operator may do both on
 * any organization that exists (its routes are the operator API's), and its reads are audited too.
 */
async function access(ctx: Ctx, organizationId: string, manage: boolean): Promise<Access> {
  if (ctx.actor.type === 'operator') {
    const rows = isUuid(organizationId) ? await ctx.db.query('SELECT 1 FROM organizations WHERE id = $1 AND deleted_at IS NULL', [organizationId]) : [];
    if (rows.length === 0) throw new NotFoundError('Organization');
    return { role: null, apiKeyId: null, masked: false };
  }
  const auth = await authorize(ctx, organizationId, manage ? 'billing.manage' : 'usage.read');
  return { role: auth.role, apiKeyId: ctx.actor.type === 'api_key' ? ctx.actor.apiKeyId : null, masked: !seesEndUsers(auth) };
}

/** docs/operator.md: every operator call is audited, reads included. */
async function auditOperatorRead(ctx: Ctx, organizationId: string, budgetId: string | null): Promise<void> {
  if (ctx.actor.type === 'operator') await writeAudit(ctx.db, ctx, { organizationId, action: 'read', resourceType: 'budget', resourceId: budgetId });
}

const COLUMNS = `id, organization_id, scope, deployment_id, api_key_id, end_user_id, tool_name, limit_credits, limit_ai_tokens,
  window_kind, mode, alert_thresholds, created_at, updated_at`;

async function views(db: Queryable, ctx: Ctx, organizationId: string, rows: BudgetRecord[], who: Access): Promise<BudgetView[]> {
  const standings = await budgetStandings(db, organizationId, rows, ctx.clock.now(), TOP_SUBJECTS);
  return rows.map((b) => viewOf(b, standings.get(b.id)!, who.masked));
}

/** One budget of the organization, locked for a change when `lock`; another organization's is not found. */
async function budgetOf(db: Queryable, organizationId: string, budgetId: string, lock = false): Promise<BudgetRecord> {
  if (!isUuid(budgetId)) throw new NotFoundError('Budget');
  const rows = await db.query<BudgetRecord>(`SELECT ${COLUMNS} FROM budgets WHERE id = $1 AND organization_id = $2${lock ? ' FOR UPDATE' : ''}`, [
    budgetId,
    organizationId,
  ]);
  if (!rows[0]) throw new NotFoundError('Budget');
  return rows[0];
}

export async function listBudgets(ctx: Ctx, organizationId: string): Promise<BudgetView[]> {
  const who = await access(ctx, organizationId, false);
  const rows = await ctx.db.query<BudgetRecord>(`SELECT ${COLUMNS} FROM budgets WHERE organization_id = $1 ORDER BY created_at, id`, [organizationId]);
  await auditOperatorRead(ctx, organizationId, null);
  return views(ctx.db, ctx, organizationId, rows, who);
}

export async function readBudget(ctx: Ctx, organizationId: string, budgetId: string): Promise<BudgetView> {
  const who = await access(ctx, organizationId, false);
  const row = await budgetOf(ctx.db, organizationId, budgetId);
  await auditOperatorRead(ctx, organizationId, budgetId);
  return (await views(ctx.db, ctx, organizationId, [row], who))[0]!;
}

/** Budgets an organization may have at once (docs/budgets.md, API). */
export const MAX_BUDGETS = 100;

const sortedThresholds = (t: number[] | undefined) => [...(t ?? [80, 100])].sort((a, b) => a - b);

export async function createBudget(ctx: Ctx, organizationId: string, spec: BudgetSpec): Promise<BudgetView> {
  const who = await access(ctx, organizationId, true);
  refuse(problemsOf(spec));
  const now = ctx.clock.now();
  const changed = await ctx.db.transaction(async (tx) => {
    await budgetsChanged(tx, organizationId);
    await checkIds(tx, organizationId, spec);
    // Every batch of the organization reads all of its budgets: a bound keeps that read small.
    const count = await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM budgets WHERE organization_id = $1', [organizationId]);
    if (count[0]!.n >= MAX_BUDGETS) {
      throw new AppError('CONFLICT', `An organization has at most ${MAX_BUDGETS} budgets; delete one to create another`);
    }
    const rows = await tx.query<BudgetRecord>(
      `INSERT INTO budgets (organization_id, scope, deployment_id, api_key_id, end_user_id, tool_name, limit_credits, limit_ai_tokens,
                            window_kind, mode, alert_thresholds, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::int[], $12, $12) RETURNING ${COLUMNS}`,
      [
        organizationId,
        spec.scope,
        spec.deployment_id ?? null,
        spec.api_key_id ?? null,
        spec.end_user_id ?? null,
        spec.tool_name ?? null,
        spec.limit_credits ?? null,
        spec.limit_ai_tokens ?? null,
        spec.window,
        spec.mode ?? 'block',
        pgArray(sortedThresholds(spec.alert_thresholds)),
        now,
      ],
    );
    const created = rows[0]!;
    await writeAudit(tx, ctx, { organizationId, action: 'create', resourceType: 'budget', resourceId: created.id, metadata: { budget: fieldsOf(created) } });
    return (await views(tx, ctx, organizationId, [created], who))[0]!;
  });
  // Every instance sees the organization's has_budgets mark at once (credits/budgets.ts).
  await forgetOrganizationBalances(ctx, organizationId);
  return changed;
}

/** What a change may send: any field; scope and its ids only as they are. */
export type BudgetChange = Partial<BudgetSpec>;

/** The fields fixed at creation (docs/budgets.md, API): a budget for something else is another budget. */
const IMMUTABLE = ['scope', 'deployment_id', 'api_key_id', 'end_user_id', 'tool_name'] as const;

/** A key may not lift or remove the budget that holds it (docs/budgets.md, API). */
function refuseOwnKeyBudget(who: Access, budget: BudgetRecord): void {
  if (who.apiKeyId !== null && budget.scope === 'api_key' && budget.api_key_id === who.apiKeyId) {
    throw new AppError('FORBIDDEN', 'An API key cannot change or delete a budget on itself');
  }
}

export async function updateBudget(ctx: Ctx, organizationId: string, budgetId: string, change: BudgetChange): Promise<BudgetView> {
  const who = await access(ctx, organizationId, true);
  const changed = await ctx.db.transaction(async (tx) => {
    await budgetsChanged(tx, organizationId);
    const before = await budgetOf(tx, organizationId, budgetId, true);
    refuseOwnKeyBudget(who, before);
    const was = fieldsOf(before);
    const fixed: FieldError[] = IMMUTABLE.filter((f) => change[f] !== undefined && (change[f] ?? null) !== was[f]).map((field) => ({
      field,
      message: 'cannot be changed: delete the budget and create another',
    }));
    refuse(fixed);
    const spec: BudgetSpec = {
      ...was,
      limit_credits: change.limit_credits === undefined ? was.limit_credits : change.limit_credits,
      limit_ai_tokens: change.limit_ai_tokens === undefined ? was.limit_ai_tokens : change.limit_ai_tokens,
      window: change.window ?? was.window,
      mode: change.mode ?? was.mode,
      alert_thresholds: change.alert_thresholds ?? was.alert_thresholds,
    };
    refuse(problemsOf(spec));
    const rows = await tx.query<BudgetRecord>(
      `UPDATE budgets SET limit_credits = $3, limit_ai_tokens = $4, window_kind = $5, mode = $6, alert_thresholds = $7::int[], updated_at = $8
       WHERE id = $1 AND organization_id = $2 RETURNING ${COLUMNS}`,
      [budgetId, organizationId, spec.limit_credits ?? null, spec.limit_ai_tokens ?? null, spec.window, spec.mode, pgArray(sortedThresholds(spec.alert_thresholds)), ctx.clock.now()],
    );
    const after = rows[0]!;
    // A window kind that changes starts new windows (docs/budgets.md).
    if (spec.window !== was.window) await budgetWindowKindChanged(tx, budgetId);
    await writeAudit(tx, ctx, { organizationId, action: 'update', resourceType: 'budget', resourceId: budgetId, metadata: { before: was, after: fieldsOf(after) } });
    return (await views(tx, ctx, organizationId, [after], who))[0]!;
  });
  // Every instance sees the organization's has_budgets mark at once (credits/budgets.ts).
  await forgetOrganizationBalances(ctx, organizationId);
  return changed;
}

/** Delete a budget and its windows; answers it as it was, with its window in progress. */
export async function deleteBudget(ctx: Ctx, organizationId: string, budgetId: string): Promise<BudgetView> {
  const who = await access(ctx, organizationId, true);
  const changed = await ctx.db.transaction(async (tx) => {
    await budgetsChanged(tx, organizationId);
    const before = await budgetOf(tx, organizationId, budgetId, true);
    refuseOwnKeyBudget(who, before);
    const view = (await views(tx, ctx, organizationId, [before], who))[0]!;
    await tx.query('DELETE FROM budgets WHERE id = $1 AND organization_id = $2', [budgetId, organizationId]);
    await writeAudit(tx, ctx, { organizationId, action: 'delete', resourceType: 'budget', resourceId: budgetId, metadata: { budget: fieldsOf(before) } });
    return view;
  });
  // Every instance sees the organization's has_budgets mark at once (credits/budgets.ts).
  await forgetOrganizationBalances(ctx, organizationId);
  return changed;
}
