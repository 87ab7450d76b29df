import { DAY, HOUR } from '../../clock.js';

/**
 * The budget rule, without I/O (docs/budgets.md): which budgets a charge falls under, the window it
 * is counted in, and whether it fits. The money engine (credits/engine/plan.ts) locks the window rows
 * this names and applies `fits` with the spending rule of credits/rules.ts, in the same order.
 */

export type BudgetScope = 'organization' | 'deployment' | 'api_key' | 'end_user' | 'tool';
export type BudgetWindowKind = 'hour' | 'day' | 'week' | 'month' | 'period';
export const BUDGET_SCOPES: readonly BudgetScope[] = ['organization', 'deployment', 'api_key', 'end_user', 'tool'];
export const BUDGET_WINDOWS: readonly BudgetWindowKind[] = ['hour', 'day', 'week', 'month', 'period'];
/** `end_user_id` / `tool_name` of a budget that holds for each end user / tool separately. */
export const EACH = '*';

/** A budget as the engine reads it (the `budgets` row, block or alert). */
export interface BudgetRow {
  id: string;
  organization_id: string;
  scope: BudgetScope;
  deployment_id: string | null;
  api_key_id: string | null;
  end_user_id: string | null;
  tool_name: string | null;
  limit_credits: number | null;
  limit_ai_tokens: number | null;
  window_kind: BudgetWindowKind;
  mode: 'block' | 'alert';
  /** Percents of the limit at which a `budget.threshold` event is written, once per window. */
  alert_thresholds: number[];
}

/** What a charge is made by and for: the request's deployment, key, end user and tool. */
export interface ChargeSubject {
  organizationId: string;
  deploymentId: string;
  /** The API key that authenticated the call, if one did. */
  apiKeyId: string | null;
  endUserId: string | null;
  toolName: string;
}

/**
 * Whether a budget holds for a charge, and for which subject ('' or the end user / tool of a '*'
 * budget). A budget narrowed to a deployment holds only for that deployment's charges.
 */
export function subjectOf(budget: BudgetRow, charge: ChargeSubject): string | null {
  if (budget.organization_id !== charge.organizationId) return null;
  if (budget.deployment_id !== null && budget.deployment_id !== charge.deploymentId) return null;
  switch (budget.scope) {
    case 'organization':
    case 'deployment':
      return '';
    case 'api_key':
      return charge.apiKeyId !== null && budget.api_key_id === charge.apiKeyId ? '' : null;
    case 'end_user':
      // An empty id (service usage's mcp_user_id of "") names no one, as the AI proxy's user of "":
      // counted as a charge without end user, never in the '' row a "*" budget keeps for its events.
      if (charge.endUserId === null || charge.endUserId === '') return null;
      if (budget.end_user_id === EACH) return charge.endUserId;
      return budget.end_user_id === charge.endUserId ? '' : null;
    case 'tool':
      if (budget.tool_name === EACH) return charge.toolName;
      return budget.tool_name === charge.toolName ? '' : null;
  }
}

/** A window [start, end) in UTC. Never changed once made (windowOf gives one window to many charges). */
export interface Window {
  readonly start: Date;
  readonly end: Date;
}

/**
 * The window of `kind` holding `at`: UTC hours, days, weeks from Monday 00:00, calendar months, or the
 * credit period given (`period`: the deployment's, for an organization budget its primary deployment's).
 */
export function windowOf(kind: BudgetWindowKind, at: Date, period: Window | null): Window {
  const t = at.getTime();
  if (kind === 'period') {
    if (!period) throw new Error('a period window needs the credit period');
    return period;
  }
  // Every charge of a batch, and of the batches around it, falls in the same hour, day, week and
  // month: the window last made of a kind is given again while it holds `at` (windows are never
  // changed, only replaced).
  const last = lastWindow[kind];
  if (last !== undefined && t >= last.start.getTime() && t < last.end.getTime()) return last;
  const made = calendarWindow(kind, at, t);
  lastWindow[kind] = made;
  return made;
}

const lastWindow: Partial<Record<Exclude<BudgetWindowKind, 'period'>, Window>> = {};

function calendarWindow(kind: Exclude<BudgetWindowKind, 'period'>, at: Date, t: number): Window {
  switch (kind) {
    case 'hour': {
      const start = t - (((t % HOUR) + HOUR) % HOUR);
      return { start: new Date(start), end: new Date(start + HOUR) };
    }
    case 'day': {
      const start = t - (((t % DAY) + DAY) % DAY);
      return { start: new Date(start), end: new Date(start + DAY) };
    }
    case 'week': {
      const dayStart = t - (((t % DAY) + DAY) % DAY);
      // 1970-01-01 was a Thursday: Monday is 3 days before it.
      const daysSinceMonday = (((Math.floor(dayStart / DAY) + 3) % 7) + 7) % 7;
      const start = dayStart - daysSinceMonday * DAY;
      return { start: new Date(start), end: new Date(start + 7 * DAY) };
    }
    case 'month': {
      const start = Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1);
      return { start: new Date(start), end: new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1)) };
    }
  }
}

/** A window row as the engine holds it locked: what its budget allows and what is counted so far. */
export interface BudgetCounter {
  /** The `budget_windows` row. */
  id: string;
  budgetId: string;
  subject: string;
  window: Window;
  limitCredits: number | null;
  /** The budget's AI token limit: counted by AI calls only (docs/budgets.md, AI calls). */
  limitAiTokens?: number | null;
  /** block: a charge that would cross the limit is refused; alert: only counted. */
  block: boolean;
  spentCredits: number;
  spentAiTokens?: number;
  /** What the window held when the batch locked it (its events are judged from there). */
  startSpent?: number;
  startAiTokens?: number;
  /** A charge of the batch was refused by this window. */
  refused?: boolean;
  /** The budget, for its events. */
  budget?: BudgetRow;
}

/** A budget event to append (its dedupe key makes it once per window). */
export interface BudgetEvent {
  organizationId: string;
  deploymentId: string | null;
  type: 'budget.threshold' | 'budget.exceeded';
  data: Record<string, unknown>;
  dedupeKey: string;
  at: Date;
}

/**
 * The events a batch's counting left (docs/budgets.md, Events): `budget.threshold` for each alert
 * threshold a window's count reached by growing in the batch, and `budget.exceeded` when a block budget
 * refused a charge; each once per window by its dedupe key, for credits and AI tokens apart.
 */
export function budgetEvents(counters: readonly BudgetCounter[], at: Date): BudgetEvent[] {
  const events: BudgetEvent[] = [];
  for (const c of counters) {
    const budget = c.budget;
    if (!budget) continue;
    // Most windows of a batch grew without reaching a threshold and refused nothing: a cheap look first.
    if (!c.refused && !reaches(budget, c.limitCredits, c.spentCredits, c.startSpent) && !reaches(budget, c.limitAiTokens ?? null, c.spentAiTokens ?? 0, c.startAiTokens)) {
      continue;
    }
    const metrics = [
      { metric: 'credits', limit: c.limitCredits, spent: c.spentCredits, start: c.startSpent },
      { metric: 'ai_tokens', limit: c.limitAiTokens ?? null, spent: c.spentAiTokens ?? 0, start: c.startAiTokens },
    ] as const;
    for (const m of metrics) {
      if (m.limit === null) continue;
      const limit = m.limit;
      const grew = m.start !== undefined && m.spent > m.start;
      const refused = c.refused === true && c.block && refusedOn(c, m.metric);
      // A metric that reached no threshold and refused nothing: nothing to build for it.
      if (!refused && !reaches(budget, limit, m.spent, m.start)) continue;
      const key = `${budget.id}:${c.subject}:${c.window.start.toISOString()}`;
      const base = { organizationId: budget.organization_id, deploymentId: budget.deployment_id, at };
      const data = (threshold: number) => ({
        budget_id: budget.id,
        scope: budget.scope,
        deployment_id: budget.deployment_id,
        end_user_id: budget.scope === 'end_user' ? (budget.end_user_id === EACH ? c.subject : budget.end_user_id) : null,
        tool_name: budget.scope === 'tool' ? (budget.tool_name === EACH ? c.subject : budget.tool_name) : null,
        metric: m.metric,
        threshold,
        spent: m.spent,
        limit,
        window_start: c.window.start.toISOString(),
        window_end: c.window.end.toISOString(),
      });
      // Credits keep the keys they had before AI tokens were counted: one event per window either way.
      const suffix = m.metric === 'credits' ? '' : ':ai_tokens';
      if (grew) {
        for (const t of budget.alert_thresholds) {
          if (m.spent * 100 >= t * limit) {
            events.push({ ...base, type: 'budget.threshold', data: data(t), dedupeKey: `budget.threshold:${key}:${t}${suffix}` });
          }
        }
      }
      if (refused) {
        events.push({ ...base, type: 'budget.exceeded', data: data(100), dedupeKey: `budget.exceeded:${key}${suffix}` });
      }
    }
  }
  return events;
}

/** Whether a count that grew from `start` to `spent` reached one of the budget's thresholds of `limit`. */
function reaches(budget: BudgetRow, limit: number | null, spent: number, start: number | undefined): boolean {
  if (limit === null || start === undefined || spent <= start) return false;
  for (const t of budget.alert_thresholds) if (spent * 100 >= t * limit) return true;
  return false;
}

/** The metric a refused window refused on: AI tokens when its token limit is reached, else credits. */
function refusedOn(c: BudgetCounter, metric: 'credits' | 'ai_tokens'): boolean {
  const tokensFull = c.limitAiTokens != null && (c.spentAiTokens ?? 0) >= c.limitAiTokens;
  if (c.limitCredits === null) return metric === 'ai_tokens';
  if (c.limitAiTokens == null) return metric === 'credits';
  return metric === (tokensFull ? 'ai_tokens' : 'credits');
}

/**
 * The block budget a charge of `credits` (and `tokens` AI tokens) would cross, or null if it fits every
 * one: the most restrictive (least room left, then the earliest reset) is the one named. Room is
 * measured in the metric that is crossed: credits first, then AI tokens. A limit lowered below what is
 * spent refuses even a charge of 0 credits; AI tokens are looked at only for a charge that has some.
 */
export function crossed(counters: readonly BudgetCounter[], credits: number, tokens = 0): BudgetCounter | null {
  let worst: BudgetCounter | null = null;
  let worstRoom = Number.POSITIVE_INFINITY;
  for (const c of counters) {
    if (!c.block) continue;
    let room: number | null = null;
    if (c.limitCredits !== null && credits > c.limitCredits - c.spentCredits) room = c.limitCredits - c.spentCredits;
    else if (c.limitAiTokens != null && tokens > 0 && tokens > c.limitAiTokens - (c.spentAiTokens ?? 0)) room = c.limitAiTokens - (c.spentAiTokens ?? 0);
    if (room === null) continue;
    if (room < worstRoom || (room === worstRoom && worst !== null && c.window.end.getTime() < worst.window.end.getTime())) {
      worst = c;
      worstRoom = room;
    }
  }
  return worst;
}

/**
 * What the block budgets of a charge leave room for (never below 0): credits and AI tokens, null where
 * none of them limits that metric (docs/budgets.md, AI calls: an AI hold shrinks its allowance to it).
 */
export function roomLeft(counters: readonly BudgetCounter[]): { credits: number | null; tokens: number | null } {
  let credits: number | null = null;
  let tokens: number | null = null;
  for (const c of counters) {
    if (!c.block) continue;
    if (c.limitCredits !== null) credits = Math.min(credits ?? Number.POSITIVE_INFINITY, Math.max(0, c.limitCredits - c.spentCredits));
    if (c.limitAiTokens != null) tokens = Math.min(tokens ?? Number.POSITIVE_INFINITY, Math.max(0, c.limitAiTokens - (c.spentAiTokens ?? 0)));
  }
  return { credits, tokens };
}
