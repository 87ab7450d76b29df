import { monthlyPeriod } from '../src/clock.js';

/**
 * The in-memory model of one deployment's money that src/modules/credits/engine.model.test.ts runs
 * beside the real engine (docs/metering.md, "The model"). It is written from the rules in the docs, not
 * from the engine's code: docs/metering.md (buckets, deductions, reservations, idempotency, refunds),
 * docs/ai-proxy.md ("What a provider's over-report costs") and docs/adr/0003-credits-owns-money.md.
 * The monthly allocation is finite (a trial deployment with a monthly_credits override); no expiring grants.
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
}

export interface AiHoldModel {
  id: string | null;
  status: 'held' | 'settled' | 'released';
  tokens: number;
  credits: number;
  cls: ModelClass;
  usage?: Usage;
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

export function newDeployment(anchor: Date, allocation: number, aiLimit: number): Deployment {
  const p = monthlyPeriod(anchor, anchor);
  return {
    anchor, allocation, aiLimit, periodStart: p.start.getTime(), periodEnd: p.end.getTime(),
    used: 0, purchased: 0, reserved: 0, owed: 0, aiUsed: 0, aiOver: 0, aiTokensHeld: 0, aiCreditsHeld: 0,
    invocations: new Map(), usages: [], holds: [],
  };
}

export function cloneDeployment(d: Deployment): Deployment {
  const usages = d.usages.map((u) => ({ ...u }));
  const same = (u: Usage | null | undefined) => (u ? usages[d.usages.indexOf(u)]! : u);
  const invocations = new Map([...d.invocations].map(([k, v]) => [k, { ...v, ...(v.answer ? { answer: { ...v.answer, usage: same(v.answer.usage) ?? null } } : {}) }]));
  const holds = d.holds.map((h) => ({ ...h, ...(h.usage ? { usage: same(h.usage)! } : {}) }));
  return { ...d, invocations, usages, holds };
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
    }
  }
}

function deduct(d: Deployment, cost: number, release: number, invocationId: string | null): RecordAnswer {
  const ok = spendable(d) + release >= cost;
  const usage: Usage = {
    id: null, success: ok, quantity: ok ? cost : 0, refunded: 0, monthlyTaken: 0, purchasedTaken: 0,
    periodStart: d.periodStart, invocationId, short: 0,
  };
  if (ok) {
    usage.monthlyTaken = Math.min(cost, monthlyLeft(d));
    usage.purchasedTaken = cost - usage.monthlyTaken;
    d.used += usage.monthlyTaken;
    d.purchased -= usage.purchasedTaken;
    d.reserved -= release;
  }
  d.usages.push(usage);
  return { success: ok, credits_used: ok ? cost : 0, credits_remaining: available(d), error: ok ? null : 'insufficient_credits', usage };
}

const reused = (): Answer => ({ status: 422, body: { code: 'IDEMPOTENCY_KEY_REUSED' } });
const fresh = (inv: Invocation | undefined, now: number): inv is Invocation => inv !== undefined && inv.createdAt > now - IDEMPOTENCY_MS;

/** record-usage (docs/metering.md, The deduction and Idempotency). */
export function record(d: Deployment, now: number, tool: string, cost: number, invocationId: string | null): Answer {
  const wrap = (a: RecordAnswer, replayed = false): Answer => ({ status: 200, replayed, body: { ...a } });
  if (invocationId === null) {
    touch(d, now);
    return wrap(deduct(d, cost, 0, null));
  }
  const inv = d.invocations.get(invocationId);
  if (fresh(inv, now)) {
    if (inv.status === 'recorded' || inv.status === 'refunded') return inv.tool === tool ? wrap(inv.answer!, true) : reused();
    if (inv.tool !== tool) return reused();
  }
  touch(d, now);
  const held = fresh(inv, now) && inv.status === 'reserved';
  // A held reservation fixes the price and is spent by the record.
  const answer = held ? deduct(d, inv.amount, inv.amount, invocationId) : deduct(d, cost, 0, invocationId);
  const createdAt = fresh(inv, now) ? inv.createdAt : now;
  const base = { tool, amount: 0, expiresAt: 0, createdAt };
  if (answer.success) d.invocations.set(invocationId, { ...base, status: 'recorded', answer });
  else if (held) inv.status = 'reserved';
  else d.invocations.set(invocationId, { ...base, status: 'denied' });
  return wrap(answer);
}

/** check-entitlement with reserve: true. */
export function reserve(d: Deployment, now: number, tool: string, cost: number, invocationId: string): Answer {
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
  if (spendable(d) < cost) {
    if (inv) Object.assign(d, before);
    return { status: 200, body: { allowed: false, reason: 'insufficient_credits', credit_cost: 0, credits_available: null } };
  }
  d.reserved += cost;
  const expiresAt = now + RESERVATION_MS;
  d.invocations.set(invocationId, { status: 'reserved', tool, amount: cost, expiresAt, createdAt: now });
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
export function aiHold(d: Deployment, now: number, prompt: number, output: number, cls: ModelClass): Answer & { hold?: AiHoldModel } {
  touch(d, now);
  // Purchased credits freed since the debt began pay it first.
  if (d.owed > 0) payOwed(d, { monthly: 0, purchased: d.purchased });
  if (d.owed > 0) return { status: 429, body: { code: 'AI_QUOTA_EXCEEDED', credits_owed: d.owed } };
  const free = aiFree(d);
  const capacity = free + tokensFor(purchasedFree(d), cls);
  const perChoice = Math.min(output, Math.floor(capacity - prompt));
  if (capacity < prompt || perChoice < (output > 0 ? 1 : 0)) return { status: 429, body: { code: 'AI_QUOTA_EXCEEDED' } };
  const total = prompt + perChoice;
  const tokens = Math.min(total, free);
  const credits = creditsFor(total - tokens, cls);
  d.aiTokensHeld += tokens;
  d.aiCreditsHeld += credits;
  d.reserved += credits;
  const hold: AiHoldModel = { id: null, status: 'held', tokens, credits, cls };
  d.holds.push(hold);
  return { status: 200, body: { outputPerChoice: perChoice, tokensHeld: tokens, creditsHeld: credits }, hold };
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
    periodStart: d.periodStart, invocationId: null, short: due - charged,
  };
  d.usages.push(usage);
  hold.usage = usage;
  if (claimed) hold.status = 'settled';
  return { status: 200, body: { replayed: false, tokensOverLimit: over, creditsCharged: charged, creditsShort: due - charged, creditsOwed: d.owed } };
}

/** releaseAiHold: a hold given back untouched; nothing is added to a bucket, so nothing rolls or pays. */
export function aiRelease(d: Deployment, hold: AiHoldModel): Answer {
  if (hold.status !== 'held') return { status: 200, body: { released: false } };
  hold.status = 'released';
  d.aiTokensHeld -= hold.tokens;
  d.aiCreditsHeld -= hold.credits;
  d.reserved -= hold.credits;
  return { status: 200, body: { released: true } };
}
