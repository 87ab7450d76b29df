import { isDeepStrictEqual } from 'node:util';
import type { Ctx } from '../src/context.js';
import { AppError } from '../src/errors.js';
import { holdAiTokens, releaseAiHold, settleAiTokens } from '../src/modules/credits/ai-usage.js';
import { findLedgerMismatches } from '../src/modules/credits/ledger.js';
import { findOwedMismatches } from '../src/modules/credits/owed.js';
import { expireReservations } from '../src/modules/credits/reservations.js';
import { readBalance } from '../src/modules/credits/service.js';
import { adminHeaders, bearer, type Harness, serviceHeaders, type Tenant } from './harness.js';
import * as M from './money-model.js';

/**
 * The real side of src/modules/credits/engine.model.test.ts: each operation drives the engine through
 * its HTTP routes (record-usage in both modes, reserve, release, operator grants and refunds) or its
 * verbs (AI holds and settles, the reservation sweep, a balance read), and comes back as an answer shaped
 * like the model's (test/money-model.ts) so the two can be compared.
 */

export interface World {
  now: number;
  deps: M.Deployment[];
}

export interface Real {
  h: Harness;
  tenants: Tenant[];
  /** Tool names: [0] costs 1 (platform_basic), [1] costs 3 (task_advanced). */
  tools: [string, string];
}

export const TOOL_COST = [1, 3] as const;

/** The operations that may run side by side in one step (they go through the group commit). */
export type BatchOp =
  | { kind: 'record'; dep: number; tool: 0 | 1; inv: string | null; stdio: boolean; user: string | null }
  | { kind: 'reserve'; dep: number; tool: 0 | 1; inv: string; user: string | null }
  | { kind: 'release'; dep: number; inv: string }
  /** A budget of the deployment's organization (the `pick`th, deleted ones too) changed or deleted (docs/budgets.md, Decided here). */
  | { kind: 'budget'; dep: number; pick: number; change: BudgetChange };

export type BudgetChange = { limit: number } | { window: M.BudgetModel['window'] } | { block: boolean } | 'delete';

/** The budget a budget op names, if the organization has any: its index and the model's budget. */
function pickedBudget(w: World, op: BatchOp & { kind: 'budget' }): { index: number; budget: M.BudgetModel } | null {
  const budgets = w.deps[op.dep]!.org.budgets;
  if (budgets.length === 0) return null;
  const index = op.pick % budgets.length;
  return { index, budget: budgets[index]! };
}

/**
 * The end user of an operation with an invocation id follows from the id: the id's request hash holds the
 * end user (docs/metering.md, Idempotency), and the model keeps invocations by id and tool only.
 */
export const userOf = (inv: string): string | null => ({ i0: 'u0', i1: 'u1', i2: 'u0' })[inv] ?? null;

const describeChange = (c: BudgetChange): string =>
  c === 'delete' ? 'delete' : 'limit' in c ? `limit ${c.limit}` : 'window' in c ? `window ${c.window}` : c.block ? 'block' : 'alert';

export const describeOp = (op: BatchOp): string =>
  op.kind === 'budget'
    ? `budget(d${op.dep}, #${op.pick}, ${describeChange(op.change)})`
    : op.kind === 'release'
    ? `release(d${op.dep}, ${op.inv})`
    : `${op.kind}(d${op.dep}, cost ${TOOL_COST[op.tool]}, ${op.inv ?? 'no id'}${op.kind === 'record' && op.stdio ? ', stdio' : ''}${op.user ? `, ${op.user}` : ''})`;

export function modelOp(w: World, op: BatchOp): M.Answer {
  const d = w.deps[op.dep]!;
  if (op.kind === 'budget') {
    const picked = pickedBudget(w, op);
    // No such budget (none made, or deleted): not found, nothing changed.
    if (!picked || picked.budget.deleted) return { status: 404, body: { code: 'NOT_FOUND' } };
    if (op.change === 'delete') return M.deleteBudget(d, picked.index);
    if ('limit' in op.change) return M.setBudgetLimit(d, picked.index, op.change.limit);
    if ('block' in op.change) return M.setBudgetMode(d, picked.index, op.change.block);
    return M.setBudgetWindow(d, picked.index, op.change.window);
  }
  if (op.kind === 'release') return M.release(d, w.now, op.inv);
  const tool = `t${op.tool}`;
  if (op.kind === 'reserve') return M.reserve(d, w.now, tool, TOOL_COST[op.tool], op.inv, { stdio: false, user: op.user });
  // A deployment the organization's API key does not charge (not the primary) records through the service route.
  return M.record(d, w.now, tool, TOOL_COST[op.tool], op.inv, { stdio: op.stdio && d.keyed, user: op.user });
}

export interface RealAnswer {
  status: number;
  replayed: boolean;
  body: Record<string, unknown>;
}

async function http(
  r: Real,
  method: 'POST' | 'PUT' | 'DELETE',
  url: string,
  headers: Record<string, string>,
  payload: Record<string, unknown> | undefined,
): Promise<RealAnswer> {
  const res = await r.h.request({ method, url, headers, ...(payload === undefined ? {} : { payload }) });
  return { status: res.statusCode, replayed: res.headers['idempotent-replayed'] === 'true', body: res.json() as Record<string, unknown> };
}

/** The engine's side of `op`; `w` is the world before the step (the budgets' ids). */
export function realOp(r: Real, op: BatchOp, w: World): Promise<RealAnswer> {
  const t = r.tenants[op.dep]!;
  const service = serviceHeaders(r.h);
  if (op.kind === 'budget') {
    const id = pickedBudget(w, op)?.budget.id ?? '00000000-0000-4000-8000-000000000000';
    const url = `/api/v1/admin/organizations/${t.organizationId}/budgets/${id}`;
    if (op.change === 'delete') return http(r, 'DELETE', url, adminHeaders(r.h), undefined);
    const body = 'limit' in op.change ? { limit_credits: op.change.limit } : 'block' in op.change ? { mode: op.change.block ? 'block' : 'alert' } : { window: op.change.window };
    return http(r, 'PUT', url, adminHeaders(r.h), body);
  }
  if (op.kind === 'release') {
    return http(r, 'POST', `/api/v1/mcp/reservations/${op.inv}/release`, service, { deployment_id: t.deploymentId });
  }
  const id = op.inv === null ? {} : { invocation_id: op.inv };
  const tool_name = r.tools[op.tool];
  if (op.kind === 'reserve') {
    const user = op.user === null ? {} : { end_user_id: op.user };
    return http(r, 'POST', '/api/v1/mcp/check-entitlement', service, { deployment_id: t.deploymentId, tool_name, reserve: true, ...id, ...user });
  }
  if (op.stdio && t.apiKey !== '') return http(r, 'POST', '/api/v1/mcp/stdio/record-usage', bearer(t.apiKey), { tool_name, ...id, ...(op.user === null ? {} : { end_user_id: op.user }) });
  return http(r, 'POST', '/api/v1/mcp/usage', service, { deployment_id: t.deploymentId, tool_name, ...id, ...(op.user === null ? {} : { mcp_user_id: op.user }) });
}

/**
 * Does the engine's answer match the model's? Only the fields the model states are compared; a
 * `usage` is matched by id (a new usage record: any id the model has not seen).
 */
export function sameAnswer(w: World, expected: M.Answer, real: RealAnswer): boolean {
  if (expected.anyOf) return expected.anyOf.some((a) => sameAnswer(w, a, real));
  if (expected.status !== real.status) return false;
  if (expected.replayed !== undefined && expected.replayed !== real.replayed) return false;
  for (const [key, value] of Object.entries(expected.body)) {
    if (key === 'usage') {
      const u = value as M.Usage | null;
      const got = real.body.usage_id ?? null;
      if (u === null ? got !== null : u.id !== null ? got !== u.id : typeof got !== 'string' || known(w, got)) return false;
    } else if (!isDeepStrictEqual(real.body[key], value)) return false;
  }
  return true;
}

const known = (w: World, id: string) => w.deps.some((d) => d.usages.some((u) => u.id === id));

/** After a match: the model's new usage records take the engine's ids. */
export function adoptIds(expected: M.Answer, real: RealAnswer): void {
  const u = expected.body.usage as M.Usage | null | undefined;
  if (u && u.id === null) u.id = real.body.usage_id as string;
}

// ---- Operations that run alone. ----

export function realChangePurchased(r: Real, dep: number, amount: number): Promise<RealAnswer> {
  const t = r.tenants[dep]!;
  return http(r, 'POST', `/api/v1/admin/deployments/${t.deploymentId}/credits`, adminHeaders(r.h), { amount, reason: 'model' });
}

export function realRefund(r: Real, usageId: string, amount: number | undefined): Promise<RealAnswer> {
  return http(r, 'POST', `/api/v1/admin/usage/${usageId}/refund`, adminHeaders(r.h), { reason: 'model', ...(amount === undefined ? {} : { amount }) });
}

const ctxOf = (r: Real, t: Tenant): Ctx => ({ ...r.h.ctx, actor: { type: 'deployment', deploymentId: t.deploymentId, organizationId: t.organizationId } });
const depOf = (t: Tenant) => ({ id: t.deploymentId, organization_id: t.organizationId });
const YEARS = 10 * 366 * 24 * 60 * 60_000;
/** The model every AI call of the model test asks for: its tool, for budgets (docs/budgets.md, AI calls). */
const AI_MODEL = 'gpt-4o-mini';

async function refusal(p: Promise<RealAnswer>): Promise<RealAnswer> {
  try {
    return await p;
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return { status: err.status, replayed: false, body: { code: err.code, ...err.extra } };
  }
}

/**
 * An AI hold, made by the organization's API key (`by.stdio`: only for the deployment it charges, its
 * primary) and for an end user or none, as the AI proxy passes them (docs/budgets.md, AI calls).
 */
export async function realAiHold(r: Real, dep: number, prompt: number, output: number, cls: M.ModelClass, by: M.ChargedBy): Promise<RealAnswer & { id?: string }> {
  const t = r.tenants[dep]!;
  const apiKeyId = by.stdio && t.apiKey !== '' ? await keyIdOf(r, t) : null;
  // The hold never lapses within a run: the sweep of AI holds is global, other suites' holds share the database.
  const expiresAt = new Date(r.h.clock.now().getTime() + YEARS);
  const input = { model: AI_MODEL, modelClass: cls, promptTokens: prompt, outputPerChoice: output, choices: 1, expiresAt, charge: { apiKeyId, endUserId: by.user } };
  return refusal(holdAiTokens(ctxOf(r, t), depOf(t), input).then((held) => ({ status: 200, replayed: false, id: held.id, body: { ...held } })));
}

/** The one API key of a tenant's organization. */
async function keyIdOf(r: Real, t: Tenant): Promise<string> {
  const keys = await r.h.deps.db.query<{ id: string }>('SELECT id FROM api_keys WHERE organization_id = $1', [t.organizationId]);
  if (keys.length !== 1) throw new Error(`the model's organization has ${keys.length} API keys, not one`);
  return keys[0]!.id;
}

export async function realAiSettle(r: Real, dep: number, holdId: string, cls: M.ModelClass, tokens: number): Promise<RealAnswer> {
  const t = r.tenants[dep]!;
  const inputTokens = Math.floor(tokens / 2);
  const result = await settleAiTokens(ctxOf(r, t), depOf(t), { model: AI_MODEL, modelClass: cls, holdId, inputTokens, outputTokens: tokens - inputTokens });
  return { status: 200, replayed: result.replayed, body: { ...result, usage_id: result.usageId } };
}

export async function realAiRelease(r: Real, dep: number, holdId: string): Promise<RealAnswer> {
  const released = await releaseAiHold(r.h.deps.db, r.tenants[dep]!.deploymentId, holdId, r.h.clock.now());
  return { status: 200, replayed: false, body: { released } };
}

/** The clock moves; the reservation sweep (the worker's verb) runs for this run's deployments only. */
export async function realAdvance(r: Real, ms: number): Promise<void> {
  r.h.clock.advance(ms);
  for (const t of r.tenants) await expireReservations(r.h.deps.db, r.h.clock.now(), t.deploymentId);
}

/** A read that brings the row up to date (what GET /ai/quota and the operator's reads do). */
export async function realTouch(r: Real, dep: number): Promise<void> {
  await readBalance(r.h.deps.db, r.tenants[dep]!.deploymentId, r.h.clock.now(), 'model');
}

// ---- The state after every step. ----

export interface Row {
  monthly_allocation: number | null;
  monthly_used: number;
  purchased_balance: number;
  reserved: number;
  credits_owed: number;
  ai_tokens_used: number;
  ai_tokens_over_limit: number;
  ai_tokens_reserved: number;
  ai_credits_reserved: number;
  period_start: string;
  period_end: string;
  usages: number;
  usage_net: number;
  usage_short: number;
}

export async function realRows(r: Real): Promise<Row[]> {
  const rows = await r.h.deps.db.query<Row & { deployment_id: string; period_start: Date; period_end: Date }>(
    `SELECT b.deployment_id, b.monthly_allocation, b.monthly_used, b.purchased_balance, b.reserved, b.credits_owed, b.ai_tokens_used,
            b.ai_tokens_over_limit, b.ai_tokens_reserved, b.ai_credits_reserved, b.period_start, b.period_end,
            (SELECT count(*) FROM usage_records u WHERE u.deployment_id = b.deployment_id)::int AS usages,
            (SELECT COALESCE(SUM(quantity - refunded) FILTER (WHERE success), 0) FROM usage_records u WHERE u.deployment_id = b.deployment_id)::int AS usage_net,
            (SELECT COALESCE(SUM(credits_short), 0) FROM usage_records u WHERE u.deployment_id = b.deployment_id)::int AS usage_short
     FROM credit_balances b WHERE b.deployment_id = ANY($1::uuid[])`,
    [r.tenants.map((t) => t.deploymentId)],
  );
  return r.tenants.map((t) => {
    const { deployment_id: _, period_start, period_end, ...row } = rows.find((x) => x.deployment_id === t.deploymentId)!;
    return { ...row, period_start: period_start.toISOString(), period_end: period_end.toISOString() };
  });
}

export function modelRows(w: World): Row[] {
  return w.deps.map((d) => ({
    monthly_allocation: d.allocation,
    monthly_used: d.used,
    purchased_balance: d.purchased,
    reserved: d.reserved,
    credits_owed: d.owed,
    ai_tokens_used: d.aiUsed,
    ai_tokens_over_limit: d.aiOver,
    ai_tokens_reserved: d.aiTokensHeld,
    ai_credits_reserved: d.aiCreditsHeld,
    period_start: new Date(d.periodStart).toISOString(),
    period_end: new Date(d.periodEnd).toISOString(),
    usages: d.usages.length,
    usage_net: d.usages.reduce((n, u) => n + (u.success ? u.quantity - u.refunded : 0), 0),
    usage_short: d.usages.reduce((n, u) => n + u.short, 0),
  }));
}

// ---- Budgets (docs/budgets.md). ----

/** The model's tool names ('t0', 't1', AI calls' 'ai') as the engine knows them. */
const realTool = (r: Real, tool: string): string => (tool === M.AI_TOOL ? AI_MODEL : r.tools[Number(tool.slice(1))]!);
const modelTool = (r: Real, name: string): string => (name === AI_MODEL ? M.AI_TOOL : `t${r.tools.indexOf(name)}`);

/**
 * The budgets of the organization of deployment `dep`, made through the operator's budgets API (those
 * naming a deployment name it by its index); the model's take the engine's ids.
 */
export async function realCreateBudgets(r: Real, dep: number, budgets: M.BudgetModel[]): Promise<void> {
  const t = r.tenants[dep]!;
  const keyId = await keyIdOf(r, t);
  for (const b of budgets) {
    const res = await r.h.request({
      method: 'POST',
      url: `/api/v1/admin/organizations/${t.organizationId}/budgets`,
      headers: adminHeaders(r.h),
      payload: {
        scope: b.scope,
        ...(b.deployment === null ? {} : { deployment_id: r.tenants[b.deployment]!.deploymentId }),
        ...(b.scope === 'tool' ? { tool_name: b.tool === '*' ? '*' : realTool(r, b.tool!) } : {}),
        ...(b.scope === 'api_key' ? { api_key_id: keyId } : {}),
        ...(b.scope === 'end_user' ? { end_user_id: b.user } : {}),
        ...(b.limit === null ? {} : { limit_credits: b.limit }),
        ...(b.limitTokens === null ? {} : { limit_ai_tokens: b.limitTokens }),
        window: b.window,
        mode: b.block ? 'block' : 'alert',
      },
    });
    if (res.statusCode !== 201) throw new Error(`budget not made: ${res.statusCode} ${res.body}`);
    b.id = (res.json() as { id: string }).id;
  }
}

/**
 * Every budget window with something counted: `o<organization> b<budget> <subject> <start>` →
 * `<credits>/<AI tokens>`, the organization named by its first deployment's index.
 */
export async function realWindows(r: Real, w: World): Promise<Record<string, string>> {
  const rows = await r.h.deps.db.query<{ budget_id: string; subject: string; window_start: Date; spent_credits: number; spent_ai_tokens: number }>(
    `SELECT w.budget_id, w.subject, w.window_start, w.spent_credits, w.spent_ai_tokens FROM budget_windows w JOIN budgets b ON b.id = w.budget_id
     WHERE b.organization_id = ANY($1::uuid[]) AND (w.spent_credits <> 0 OR w.spent_ai_tokens <> 0)`,
    [[...new Set(r.tenants.map((t) => t.organizationId))]],
  );
  const out: Record<string, string> = {};
  for (const row of rows) {
    const dep = w.deps.findIndex((d) => d.org.budgets.some((b) => b.id === row.budget_id));
    const budget = w.deps[dep]?.org.budgets.findIndex((b) => b.id === row.budget_id) ?? -1;
    // A '*' budget's subject: the tool (named as the model names it) or the end user (as sent).
    const tools = w.deps[dep]?.org.budgets[budget]?.scope === 'tool';
    const subject = row.subject === '' || !tools ? row.subject : modelTool(r, row.subject);
    out[`o${dep} b${budget} ${subject} ${row.window_start.toISOString()}`] = `${row.spent_credits}/${row.spent_ai_tokens}`;
  }
  return out;
}

export function modelWindows(w: World): Record<string, string> {
  const out: Record<string, string> = {};
  w.deps.forEach((d, dep) => {
    if (w.deps.findIndex((x) => x.org === d.org) !== dep) return;
    for (const [key, spent] of d.org.windows) {
      if (spent.credits === 0 && spent.tokens === 0) continue;
      const [budget, subject, start] = key.split('|');
      out[`o${dep} b${budget} ${subject} ${new Date(Number(start)).toISOString()}`] = `${spent.credits}/${spent.tokens}`;
    }
  });
  return out;
}

/** ADR 0003's invariants 1 and 8 for this run's organizations: the finders find nothing. */
export async function booksMismatches(r: Real): Promise<unknown[]> {
  const found: unknown[] = [];
  for (const t of r.tenants) {
    found.push(...(await findLedgerMismatches(r.h.deps.db, t.organizationId)), ...(await findOwedMismatches(r.h.deps.db, t.organizationId)));
  }
  return found;
}
