import { monthlyPeriod } from '../src/clock.js';

/**
 * The in-memory model of one deployment's money that src/modules/credits/engine.model.test.ts runs
 * beside the real engine (docs/metering.md, "The model"). It is written from the rules in the docs, not
 * from the engine's code: docs/metering.md (buckets, deductions, reservations, idempotency, refunds),
 * docs/ai-proxy.md ("What a provider's over-report costs") and docs/adr/0003-credits-owns-money.md.
 * The monthly allocation is finite (a trial deployment with a monthly_credits override); no expiring grants.
 * Budgets follow docs/budgets.md: the two deployments are in organizations of their own or in one, whose
 * block or alert budgets of credits and/or AI tokens both share (on the organization, a deployment,
 * the API key, end users or tools, optionally narrowed to one deployment, in every window kind).
 * Every operation returns the answer the engine must give and changes the model in place.
 */

export type ModelClass = 'standard' | 'advanced' | 'premium';
/** docs/ai-proxy.md: credits per 1,000 tokens past the quota. */
const RATE: Record<ModelClass, number> = { standard: 1, advanced: 3, premium: 10 };
const MINUTE = 60_000;
/** docs/metering.md, Reservations and Idempotency. */
export const RESERVATION_MS = 5 * MINUTE;
export const IDEMPOTENCY_MS = 24 * 60 * MINUTE;

export interface Invocation {
  status: 'reserved' | 'recorded' | 'released' | 'expired' | 'refunded' | 'denied';
  tool: string;
  amount: number;
  expiresAt: number;
  createdAt: number;
  answer?: RecordAnswer;
  /** The budget windows a reservation was counted in. */
  windows?: WindowRef[];
}

/** A budget of the deployment's organization (docs/budgets.md, A budget). */
export interface BudgetModel {
  /** The engine's id, filled in by the model test's setup. */
  id: string | null;
  /** The deployment (its index) a `deployment` budget is on, or another budget is narrowed to; null: all. */
  deployment: number | null;
  /**
   * `organization`, `deployment`: every charge (one deployment per organization); `api_key`: the charges
   * its one API key authenticates (stdio records); `end_user`: those of `user` ('*': each end user apart);
   * `tool`: those of `tool` ('*': each tool apart).
   */
  scope: 'organization' | 'deployment' | 'api_key' | 'end_user' | 'tool';
  tool: string | null;
  user: string | null;
  /** Credits and AI tokens a window may count; at least one is set. */
  limit: number | null;
  limitTokens: number | null;
  window: 'hour' | 'day' | 'week' | 'month' | 'period';
  block: boolean;
  /** Deleted mid-run: it counts nothing more, and its windows are gone. */
  deleted?: boolean;
  /** How often its window kind changed: a window counted before a change is gone (WindowRef.gen). */
  generation?: number;
}

/** Who a charge is made by and for: through the API key (stdio) or not, and its end user. */
export interface ChargedBy {
  stdio: boolean;
  user: string | null;
}
const NOBODY: ChargedBy = { stdio: false, user: null };

/** What a window has counted. */
export interface Spent {
  credits: number;
  tokens: number;
}

/** A window a charge falls in: the budget (its index), the subject ('' or the tool of a '*' budget), [start, end). */
export interface WindowRef {
  budget: number;
  subject: string;
  start: number;
  end: number;
  /** The budget's generation when the window was counted in. */
  gen: number;
}

export interface Usage {
  /** The engine's id, filled in when the real call answered. */
  id: string | null;
  success: boolean;
  quantity: number;
  refunded: number;
  monthlyTaken: number;
  purchasedTaken: number;
  periodStart: number;
  invocationId: string | null;
  short: number;
  /** The budget windows it was counted in (a refund gives back to those still in progress). */
  windows: WindowRef[];
}

export interface AiHoldModel {
  id: string | null;
  status: 'held' | 'settled' | 'released';
  tokens: number;
  credits: number;
  cls: ModelClass;
  usage?: Usage;
  /** The budget windows the hold was counted in, and the AI tokens it counted there (prompt + output allowance). */
  windows: WindowRef[];
  budgetTokens: number;
}

export interface Deployment {
  anchor: Date;
  allocation: number;
  aiLimit: number;
  periodStart: number;
  periodEnd: number;
  used: number;
  purchased: number;
  reserved: number;
  owed: number;
  aiUsed: number;
  aiOver: number;
  aiTokensHeld: number;
  aiCreditsHeld: number;
  invocations: Map<string, Invocation>;
  usages: Usage[];
  holds: AiHoldModel[];
  /** Its place in the world (budgets name deployments by it). */
  index: number;
  /** Whether the organization's API key charges it (the key's deployment is the primary). */
  keyed: boolean;
  org: Org;
}

/** An organization's budgets and what each window has counted (by windowKey): shared by its deployments. */
export interface Org {
  budgets: BudgetModel[];
  windows: Map<string, Spent>;
  /**
   * The primary deployment's billing anchor: the `period` window of a budget not bound to one deployment
   * is the primary's credit period (docs/budgets.md, Windows), also for a charge on the other deployment.
   */
  anchor: Date;
}

export interface RecordAnswer {
  success: boolean;
  credits_used: number;
  credits_remaining: number | null;
  error: string | null;
  /** The usage this answer names (a replay names the first one). */
  usage: Usage | null;
}

export type Answer = {
  status: number;
  replayed?: boolean;
  body: Record<string, unknown>;
  /** Any of these answers is right (a concurrent step's answer read after other operations committed). */
  anyOf?: Answer[];
};

export function newDeployment(
  anchor: Date,
  allocation: number,
  aiLimit: number,
  place: { index: number; keyed: boolean; org: Org } = { index: 0, keyed: true, org: { budgets: [], windows: new Map(), anchor } },
): Deployment {
  const p = monthlyPeriod(anchor, anchor);
  return {
    anchor, allocation, aiLimit, periodStart: p.start.getTime(), periodEnd: p.end.getTime(),
    used: 0, purchased: 0, reserved: 0, owed: 0, aiUsed: 0, aiOver: 0, aiTokensHeld: 0, aiCreditsHeld: 0,
    invocations: new Map(), usages: [], holds: [], ...place,
  };
}

/** Copies of the deployments, those of one organization sharing one copy of it. */
export function cloneDeployments(deps: Deployment[]): Deployment[] {
  const orgs = new Map<Org, Org>();
  for (const d of deps) {
    if (!orgs.has(d.org)) orgs.set(d.org, { budgets: d.org.budgets.map((b) => ({ ...b })), windows: new Map(d.org.windows), anchor: d.org.anchor });
  }
  return deps.map((d) => ({ ...cloneDeployment(d), org: orgs.get(d.org)! }));
}

function cloneDeployment(d: Deployment): Deployment {
  const usages = d.usages.map((u) => ({ ...u }));
  const same = (u: Usage | null | undefined) => (u ? usages[d.usages.indexOf(u)]! : u);
  const invocations = new Map([...d.invocations].map(([k, v]) => [k, { ...v, ...(v.answer ? { answer: { ...v.answer, usage: same(v.answer.usage) ?? null } } : {}) }]));
  const holds = d.holds.map((h) => ({ ...h, ...(h.usage ? { usage: same(h.usage)! } : {}) }));
  return { ...d, invocations, usages, holds };
}

// ---- Budgets (docs/budgets.md). ----

const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** The UTC window of `kind` holding `now` (docs/budgets.md, Windows): weeks start on Monday, months are calendar months. */
function calendarWindow(kind: 'hour' | 'day' | 'week' | 'month', now: number): { start: number; end: number } {
  if (kind === 'month') {
    const at = new Date(now);
    return { start: Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1), end: Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1) };
  }
  const day = now - (now % DAY);
  if (kind === 'week') {
    const start = day - ((new Date(day).getUTCDay() + 6) % 7) * DAY;
    return { start, end: start + 7 * DAY };
  }
  const length = kind === 'hour' ? HOUR : DAY;
  const start = now - (now % length);
  return { start, end: start + length };
}
/** The tool an AI call is charged as: its model (docs/budgets.md, AI calls); the model test calls 'gpt-4o-mini'. */
export const AI_TOOL = 'ai';

export const windowKey = (w: WindowRef): string => `${w.budget}|${w.subject}|${w.start}`;
const spentIn = (d: Deployment, w: WindowRef): Spent => d.org.windows.get(windowKey(w)) ?? { credits: 0, tokens: 0 };

/**
 * The windows a charge of `tool` at `now` falls in: every budget that holds for it, in the UTC hour or
 * day holding `now`, or a credit period: the deployment's (touched by the charge first) for a budget
 * bound to it (scope `deployment`, or narrowed to it), else the primary deployment's — the period its
 * anchor gives at `now`, whether or not the primary's row has rolled into it yet. A charge of credits
 * alone (an MCP record or reservation) falls only under budgets with a credit limit; an AI call under all.
 */
export function chargeWindows(d: Deployment, now: number, tool: string, by: ChargedBy = NOBODY): WindowRef[] {
  const refs: WindowRef[] = [];
  d.org.budgets.forEach((b, budget) => {
    if (b.deleted) return;
    if (tool !== AI_TOOL && b.limit === null) return;
    if (b.deployment !== null && b.deployment !== d.index) return;
    let subject: string;
    if (b.scope === 'organization' || b.scope === 'deployment') subject = '';
    else if (b.scope === 'api_key') {
      if (!by.stdio || !d.keyed) return;
      subject = '';
    } else if (b.scope === 'end_user') {
      if (by.user === null || (b.user !== '*' && b.user !== by.user)) return;
      subject = b.user === '*' ? by.user : '';
    } else if (b.tool === '*') subject = tool;
    else if (b.tool === tool) subject = '';
    else return;
    const gen = b.generation ?? 0;
    if (b.window === 'period') {
      if (b.deployment !== null || b.scope === 'deployment') refs.push({ budget, subject, start: d.periodStart, end: d.periodEnd, gen });
      else {
        const p = monthlyPeriod(d.org.anchor, new Date(now));
        refs.push({ budget, subject, start: p.start.getTime(), end: p.end.getTime(), gen });
      }
      return;
    }
    refs.push({ budget, subject, ...calendarWindow(b.window, now), gen });
  });
  return refs;
}

/**
 * Whether a charge of `credits` (and `tokens`) would take a block budget's window past one of its limits.
 * A credit limit lowered below what is spent refuses even 0 credits; AI tokens only a charge that has some.
 */
function crossesBudget(d: Deployment, windows: WindowRef[], credits: number, tokens = 0): boolean {
  return windows.some((w) => {
    const b = d.org.budgets[w.budget]!;
    const spent = spentIn(d, w);
    if (!b.block) return false;
    if (b.limit !== null && credits > b.limit - spent.credits) return true;
    return b.limitTokens !== null && tokens > 0 && tokens > b.limitTokens - spent.tokens;
  });
}

/** What the block budgets leave room for (never below 0): credits and AI tokens, null where none limits that. */
function budgetRoom(d: Deployment, windows: WindowRef[]): { credits: number | null; tokens: number | null } {
  let credits: number | null = null;
  let tokens: number | null = null;
  for (const w of windows) {
    const b = d.org.budgets[w.budget]!;
    if (!b.block) continue;
    const spent = spentIn(d, w);
    if (b.limit !== null) credits = Math.min(credits ?? Number.POSITIVE_INFINITY, Math.max(0, b.limit - spent.credits));
    if (b.limitTokens !== null) tokens = Math.min(tokens ?? Number.POSITIVE_INFINITY, Math.max(0, b.limitTokens - spent.tokens));
  }
  return { credits, tokens };
}

/**
 * Counts `credits` and `tokens` (either may be negative) in the windows; a give-back (or a settle's
 * correction) reaches only the windows still in progress at `now`. A count never goes below 0.
 */
function countIn(d: Deployment, windows: WindowRef[], credits: number, now: number | null = null, tokens = 0): void {
  if (credits === 0 && tokens === 0) return;
  for (const w of windows) {
    if (now !== null && w.end <= now) continue;
    // A window deleted with its budget, or by a change of its window kind, counts nothing any more.
    const b = d.org.budgets[w.budget]!;
    if (b.deleted || (b.generation ?? 0) !== w.gen) continue;
    const spent = spentIn(d, w);
    d.org.windows.set(windowKey(w), { credits: Math.max(0, spent.credits + credits), tokens: Math.max(0, spent.tokens + tokens) });
  }
}

/** A budget's credit limit set or changed (its window kind kept): the windows keep their counts. */
export function setBudgetLimit(d: Deployment, budget: number, limit: number): Answer {
  d.org.budgets[budget]!.limit = limit;
  return { status: 200, body: { limit_credits: limit } };
}

/** A budget's mode changed: `block` refuses from the next charge on, `alert` no more; the windows keep their counts. */
export function setBudgetMode(d: Deployment, budget: number, block: boolean): Answer {
  d.org.budgets[budget]!.block = block;
  return { status: 200, body: { mode: block ? 'block' : 'alert' } };
}

/** Forget every window of a budget (deleted, or its window kind changed). */
function dropWindows(d: Deployment, budget: number): void {
  for (const key of [...d.org.windows.keys()]) if (key.startsWith(`${budget}|`)) d.org.windows.delete(key);
}

/**
 * A budget's window kind changed: the old kind's windows are deleted and new ones start from 0; holds
 * counted in the old ones give nothing back to the new ones. The same kind again changes nothing.
 */
export function setBudgetWindow(d: Deployment, budget: number, window: BudgetModel['window']): Answer {
  const b = d.org.budgets[budget]!;
  if (b.window !== window) {
    b.window = window;
    b.generation = (b.generation ?? 0) + 1;
    dropWindows(d, budget);
  }
  return { status: 200, body: { window } };
}

/** A budget deleted: its windows go with it. */
export function deleteBudget(d: Deployment, budget: number): Answer {
  d.org.budgets[budget]!.deleted = true;
  dropWindows(d, budget);
  return { status: 200, body: {} };
}

export const monthlyLeft = (d: Deployment): number => Math.max(0, d.allocation - d.used);
/** docs/metering.md: spendable = monthly remaining + purchased − reserved. */
export const spendable = (d: Deployment): number => monthlyLeft(d) + d.purchased - d.reserved;
const available = (d: Deployment): number => Math.max(0, spendable(d));
/** Purchased credits no open hold needs: AI holds are purchased credits, MCP reservations take the monthly bucket first. */
export function purchasedFree(d: Deployment): number {
  const mcpHeld = d.reserved - d.aiCreditsHeld;
  return Math.max(0, d.purchased - d.aiCreditsHeld - Math.max(0, mcpHeld - monthlyLeft(d)));
}

/** Credits just added pay what is owed first: monthly, then purchased, never what holds need (docs/ai-proxy.md). */
export function payOwed(d: Deployment, added: { monthly: number; purchased: number }): void {
  if (d.owed <= 0 || spendable(d) <= 0) return;
  const m = Math.max(0, Math.min(d.owed, added.monthly, monthlyLeft(d), spendable(d)));
  const room = spendable(d) - m;
  d.used += m;
  const p = Math.max(0, Math.min(d.owed - m, added.purchased, purchasedFree(d), room));
  d.purchased -= p;
  d.owed -= m + p;
}

/** The first operation on a row past its period's end rolls it (once), whoever it is (docs/metering.md, Periods). */
export function touch(d: Deployment, now: number): void {
  if (now < d.periodEnd) return;
  const p = monthlyPeriod(d.anchor, new Date(now));
  d.periodStart = p.start.getTime();
  d.periodEnd = p.end.getTime();
  d.used = 0;
  d.aiUsed = 0;
  d.aiOver = 0;
  payOwed(d, { monthly: d.allocation, purchased: 0 });
}

/** The reservation sweep (the worker's verb, run by the model test after each clock move). */
export function expireReservations(d: Deployment, now: number): void {
  for (const inv of d.invocations.values()) {
    if (inv.status === 'reserved' && inv.expiresAt <= now) {
      inv.status = 'expired';
      d.reserved -= inv.amount;
      countIn(d, inv.windows ?? [], -inv.amount, now);
    }
  }
}

/**
 * A deduction: the balance first, then the block budgets of `windows` (docs/budgets.md, Enforcement). A
 * reservation's spend (`held`, its windows) was judged and counted when held: its record inherits them.
 */
function deduct(d: Deployment, cost: number, release: number, invocationId: string | null, windows: WindowRef[], held: boolean): RecordAnswer {
  const paid = spendable(d) + release >= cost;
  const overBudget = paid && !held && crossesBudget(d, windows, cost);
  const ok = paid && !overBudget;
  const usage: Usage = {
    id: null, success: ok, quantity: ok ? cost : 0, refunded: 0, monthlyTaken: 0, purchasedTaken: 0,
    periodStart: d.periodStart, invocationId, short: 0, windows: ok ? windows : [],
  };
  if (ok) {
    usage.monthlyTaken = Math.min(cost, monthlyLeft(d));
    usage.purchasedTaken = cost - usage.monthlyTaken;
    d.used += usage.monthlyTaken;
    d.purchased -= usage.purchasedTaken;
    d.reserved -= release;
    if (!held) countIn(d, windows, cost);
  }
  d.usages.push(usage);
  const error = ok ? null : overBudget ? 'budget_exceeded' : 'insufficient_credits';
  return { success: ok, credits_used: ok ? cost : 0, credits_remaining: available(d), error, usage };
}

const reused = (): Answer => ({ status: 422, body: { code: 'IDEMPOTENCY_KEY_REUSED' } });
const fresh = (inv: Invocation | undefined, now: number): inv is Invocation => inv !== undefined && inv.createdAt > now - IDEMPOTENCY_MS;

/** record-usage (docs/metering.md, The deduction and Idempotency). */
export function record(d: Deployment, now: number, tool: string, cost: number, invocationId: string | null, by: ChargedBy = NOBODY): Answer {
  const wrap = (a: RecordAnswer, replayed = false): Answer => ({ status: 200, replayed, body: { ...a } });
  if (invocationId === null) {
    touch(d, now);
    return wrap(deduct(d, cost, 0, null, chargeWindows(d, now, tool, by), false));
  }
  const inv = d.invocations.get(invocationId);
  if (fresh(inv, now)) {
    if (inv.status === 'recorded' || inv.status === 'refunded') return inv.tool === tool ? wrap(inv.answer!, true) : reused();
    if (inv.tool !== tool) return reused();
  }
  touch(d, now);
  const held = fresh(inv, now) && inv.status === 'reserved';
  // A held reservation fixes the price and is spent by the record.
  const answer = held
    ? deduct(d, inv.amount, inv.amount, invocationId, inv.windows ?? [], true)
    : deduct(d, cost, 0, invocationId, chargeWindows(d, now, tool, by), false);
  const createdAt = fresh(inv, now) ? inv.createdAt : now;
  const base = { tool, amount: 0, expiresAt: 0, createdAt };
  if (answer.success) d.invocations.set(invocationId, { ...base, status: 'recorded', answer });
  else if (held) inv.status = 'reserved';
  else d.invocations.set(invocationId, { ...base, status: 'denied' });
  return wrap(answer);
}

/** check-entitlement with reserve: true. */
export function reserve(d: Deployment, now: number, tool: string, cost: number, invocationId: string, by: ChargedBy = NOBODY): Answer {
  const inv = d.invocations.get(invocationId);
  if (fresh(inv, now)) {
    if (inv.tool !== tool || inv.status === 'recorded' || inv.status === 'refunded') return reused();
    if (inv.status === 'reserved') {
      touch(d, now);
      return { status: 200, body: held(inv.amount, available(d), invocationId, inv.expiresAt) };
    }
  }
  // A refused hold of an id seen before rolls its whole transaction back (the period's roll too).
  const before = { ...d };
  touch(d, now);
  const windows = chargeWindows(d, now, tool, by);
  const reason = spendable(d) < cost ? 'insufficient_credits' : crossesBudget(d, windows, cost) ? 'budget_exceeded' : null;
  if (reason !== null) {
    if (inv) Object.assign(d, before);
    return { status: 200, body: { allowed: false, reason, credit_cost: 0, credits_available: null } };
  }
  d.reserved += cost;
  countIn(d, windows, cost);
  const expiresAt = now + RESERVATION_MS;
  d.invocations.set(invocationId, { status: 'reserved', tool, amount: cost, expiresAt, createdAt: now, windows });
  return { status: 200, body: held(cost, available(d), invocationId, expiresAt) };
}

function held(cost: number, availableAfter: number, invocationId: string, expiresAt: number): Record<string, unknown> {
  return { allowed: true, reason: null, credit_cost: cost, credits_available: availableAfter, invocation_id: invocationId, reservation_expires_at: new Date(expiresAt).toISOString() };
}

/** POST /api/v1/mcp/reservations/{id}/release. */
export function release(d: Deployment, now: number, invocationId: string): Answer {
  const inv = d.invocations.get(invocationId);
  if (!inv) return { status: 404, body: { code: 'NOT_FOUND' } };
  if (inv.status !== 'reserved') return releasedNothing(inv.status);
  touch(d, now);
  d.reserved -= inv.amount;
  countIn(d, inv.windows ?? [], -inv.amount, now);
  inv.status = 'released';
  return { status: 200, body: { status: 'released', released_credits: inv.amount } };
}

/** A release's answer when it gave nothing back, from the invocation's status. */
export function releasedNothing(status: Invocation['status']): Answer {
  if (status === 'recorded' || status === 'refunded') return { status: 409, body: { code: 'CONFLICT' } };
  return { status: 200, body: { status, released_credits: 0 } };
}

/** The operator's POST /api/v1/admin/deployments/{id}/credits: a grant, or an adjustment never below what holds need. */
export function changePurchased(d: Deployment, now: number, amount: number): Answer {
  // A refused adjustment rolls its transaction back, the period's roll with it. (The roll changes
  // counters only, so restoring the fields undoes it.)
  const before = { ...d };
  touch(d, now);
  if (amount < 0 && -amount > purchasedFree(d)) {
    Object.assign(d, before);
    return { status: 400, body: { code: 'INVALID_REQUEST' } };
  }
  d.purchased += amount;
  payOwed(d, { monthly: 0, purchased: Math.max(0, amount) });
  return { status: 200, body: { credits_owed: d.owed } };
}

/** The operator's refund (docs/metering.md, Refunds): purchased first, then this period's monthly part. */
export function refund(d: Deployment, now: number, usage: Usage, amount: number | undefined): Answer {
  if (!usage.success) return { status: 409, body: { code: 'CONFLICT' } };
  const refundable = usage.quantity - usage.refunded;
  const amt = amount ?? refundable;
  if (amt > refundable) return { status: 400, body: { code: 'INVALID_REQUEST' } };
  touch(d, now);
  if (amt === 0) return { status: 200, body: { credits_refunded: 0, credits_forfeited: 0, total_refunded: usage.refunded, credits_remaining: available(d) } };
  const purchasedBack = Math.min(amt, usage.purchasedTaken - Math.min(usage.refunded, usage.purchasedTaken));
  const monthlyPart = amt - purchasedBack;
  const monthlyBack = usage.periodStart === d.periodStart ? Math.min(monthlyPart, d.used) : 0;
  d.used -= monthlyBack;
  d.purchased += purchasedBack;
  payOwed(d, { monthly: monthlyBack, purchased: purchasedBack });
  countIn(d, usage.windows, -amt, now);
  usage.refunded += amt;
  const inv = usage.invocationId === null ? undefined : d.invocations.get(usage.invocationId);
  if (inv && usage.refunded === usage.quantity && inv.status === 'recorded') inv.status = 'refunded';
  return {
    status: 200,
    body: { credits_refunded: amt, credits_forfeited: monthlyPart - monthlyBack, total_refunded: usage.refunded, credits_remaining: available(d) },
  };
}

const creditsFor = (tokens: number, cls: ModelClass) => (tokens <= 0 ? 0 : Math.ceil((tokens * RATE[cls]) / 1000));
const tokensFor = (credits: number, cls: ModelClass) => (credits <= 0 ? 0 : Math.floor((credits * 1000) / RATE[cls]));
const aiFree = (d: Deployment) => Math.max(0, d.aiLimit - (d.aiUsed - d.aiOver) - d.aiTokensHeld);

/** holdAiTokens (docs/ai-proxy.md): quota tokens first, then purchased credits; nothing starts while credits are owed. */
export function aiHold(d: Deployment, now: number, prompt: number, output: number, cls: ModelClass, by: ChargedBy = NOBODY): Answer & { hold?: AiHoldModel } {
  touch(d, now);
  // Purchased credits freed since the debt began pay it first.
  if (d.owed > 0) payOwed(d, { monthly: 0, purchased: d.purchased });
  if (d.owed > 0) return { status: 429, body: { code: 'AI_QUOTA_EXCEEDED', credits_owed: d.owed } };
  const free = aiFree(d);
  const capacity = free + tokensFor(purchasedFree(d), cls);
  const perChoice = Math.min(output, Math.floor(capacity - prompt));
  if (capacity < prompt || perChoice < (output > 0 ? 1 : 0)) return { status: 429, body: { code: 'AI_QUOTA_EXCEEDED' } };
  // Then the block budgets (docs/budgets.md, AI calls): the credits they leave cap what purchased credits
  // may pay, the tokens they leave cap the call.
  const windows = chargeWindows(d, now, AI_TOOL, by);
  const room = budgetRoom(d, windows);
  let withinBudgets = room.credits === null ? capacity : free + tokensFor(Math.min(purchasedFree(d), room.credits), cls);
  if (room.tokens !== null) withinBudgets = Math.min(withinBudgets, room.tokens);
  const allowed = Math.min(output, Math.floor(withinBudgets - prompt));
  if (crossesBudget(d, windows, 0) || withinBudgets < prompt || allowed < (output > 0 ? 1 : 0)) {
    return { status: 429, body: { code: 'BUDGET_EXCEEDED' } };
  }
  const total = prompt + allowed;
  const tokens = Math.min(total, free);
  const credits = creditsFor(total - tokens, cls);
  d.aiTokensHeld += tokens;
  d.aiCreditsHeld += credits;
  d.reserved += credits;
  countIn(d, windows, credits, null, total);
  const hold: AiHoldModel = { id: null, status: 'held', tokens, credits, cls, windows, budgetTokens: total };
  d.holds.push(hold);
  return { status: 200, body: { outputPerChoice: allowed, tokensHeld: tokens, creditsHeld: credits }, hold };
}

/** settleAiTokens: the hold goes back, every reported token counts, what cannot be paid is owed. */
export function aiSettle(d: Deployment, now: number, hold: AiHoldModel, tokens: number): Answer {
  touch(d, now);
  if (hold.status !== 'held' && hold.usage) {
    const u = hold.usage;
    return { status: 200, body: { replayed: true, creditsCharged: u.quantity, creditsShort: u.short, creditsOwed: d.owed } };
  }
  const claimed = hold.status === 'held';
  if (claimed) {
    d.aiTokensHeld -= hold.tokens;
    d.aiCreditsHeld -= hold.credits;
    d.reserved -= hold.credits;
  }
  const inQuota = Math.min(tokens, aiFree(d));
  const over = tokens - inQuota;
  const due = creditsFor(over, hold.cls);
  const charged = Math.min(due, purchasedFree(d));
  d.aiUsed += tokens;
  d.aiOver += over;
  d.purchased -= charged;
  d.owed += due - charged;
  const usage: Usage = {
    id: null, success: true, quantity: charged, refunded: 0, monthlyTaken: 0, purchasedTaken: charged,
    periodStart: d.periodStart, invocationId: null, short: due - charged, windows: hold.windows,
  };
  d.usages.push(usage);
  // The credits due (an over-report's included, past a limit) replace what the hold counted, in its
  // windows still in progress; a hold given back before its settle counted nothing there any more.
  countIn(d, hold.windows, due - (claimed ? hold.credits : 0), now, tokens - (claimed ? hold.budgetTokens : 0));
  hold.usage = usage;
  if (claimed) hold.status = 'settled';
  return { status: 200, body: { replayed: false, tokensOverLimit: over, creditsCharged: charged, creditsShort: due - charged, creditsOwed: d.owed } };
}

/** releaseAiHold: a hold given back untouched; nothing is added to a bucket, so nothing rolls or pays. */
export function aiRelease(d: Deployment, now: number, hold: AiHoldModel): Answer {
  if (hold.status !== 'held') return { status: 200, body: { released: false } };
  hold.status = 'released';
  d.aiTokensHeld -= hold.tokens;
  d.aiCreditsHeld -= hold.credits;
  d.reserved -= hold.credits;
  countIn(d, hold.windows, -hold.credits, now, -hold.budgetTokens);
  return { status: 200, body: { released: true } };
}
