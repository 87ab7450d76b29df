import { forgetBalance } from './balance-cache.js';
import type { ModelClass } from '../../config.js';
import { type Ctx, actorLabel } from '../../context.js';
import { pgArray } from '../../db/arrays.js';
import type { Database, Queryable } from '../../db/client.js';
import { AppError, refusalUntil, ValidationError } from '../../errors.js';
import { AI_CREDIT_RATES } from '../../lib/tiers.js';
import { appendEvent } from '../events/outbox.js';
import { emitThresholds } from '../quotas/thresholds.js';
import { type BudgetCounter, type BudgetRow, budgetEvents, crossed, roomLeft } from './budget-rules.js';
import { appendLedger } from './ledger.js';
import { enqueueMeterEvent } from './meter-outbox.js';
import { payOwed } from './owed.js';
import { type BalanceRow, purchasedFloor, syncBalance } from './service.js';
import { effectiveTerms, monthlyRemaining } from './terms.js';
import type { DeploymentTerms } from './terms.js';

/**
 * AI tokens, the money side (docs/ai-proxy.md, docs/limits.md). Tokens count per period against the tier's (or
 * override's) limit; tokens past it are paid from purchased credits at the model class's rate per 1,000
 * tokens, rounded up per call. An AI call first *holds* what it may spend (prompt + output allowance:
 * quota tokens, then purchased credits) in one guarded write under the balance row's lock, then *settles*
 * to the provider's usage and gives the rest back, or *releases* the hold when nothing was produced.
 *
 * Counters on credit_balances: ai_tokens_used (all tokens of the period), ai_tokens_over_limit (the part
 * past the quota), ai_tokens_reserved (quota tokens held), ai_credits_reserved (purchased credits held,
 * also counted in `reserved` so every other spender sees them as taken). The invariant kept by holds and
 * settles: (used − over_limit) + tokens_reserved ≤ limit, and held credits are always still purchased.
 */

const RATE: Record<ModelClass, number> = {
  standard: AI_CREDIT_RATES.credits_per_standard,
  advanced: AI_CREDIT_RATES.credits_per_advanced,
  premium: AI_CREDIT_RATES.credits_per_premium,
};

/** Credits for tokens past the limit: rate per 1,000 tokens, rounded up. */
export function creditsForTokens(tokens: number, cls: ModelClass): number {
  return tokens <= 0 ? 0 : Math.ceil((tokens * RATE[cls]) / 1000);
}

/** The most tokens `credits` pay for (the inverse of creditsForTokens). */
export function tokensForCredits(credits: number, cls: ModelClass): number {
  return credits <= 0 ? 0 : Math.floor((credits * 1000) / RATE[cls]);
}

/**
 * How one call's reported tokens are paid (docs/ai-proxy.md, "What a provider's over-report costs"):
 * quota tokens first (`free`, null = unlimited, the call's own hold included), the rest at the model
 * class's rate rounded up per call from `payable` purchased credits; what those cannot pay is short and
 * becomes credits owed.
 */
export function splitAiCharge(
  tokens: number,
  free: number | null,
  cls: ModelClass,
  payable: number,
): { inQuota: number; overLimit: number; due: number; charged: number; short: number } {
  const inQuota = free === null ? tokens : Math.min(tokens, free);
  const overLimit = tokens - inQuota;
  const due = creditsForTokens(overLimit, cls);
  const charged = Math.min(due, Math.max(0, payable));
  return { inQuota, overLimit, due, charged, short: due - charged };
}

type AiBalance = Pick<
  BalanceRow,
  'ai_tokens_used' | 'ai_tokens_over_limit' | 'ai_tokens_reserved' | 'monthly_allocation' | 'monthly_used' | 'purchased_balance' | 'reserved' | 'ai_credits_reserved'
>;

/** Quota tokens a new call may still hold: the limit less quota tokens used and held (null = unlimited). */
export function aiTokensFree(b: AiBalance, limit: number | null): number | null {
  if (limit === null) return null;
  return Math.max(0, limit - (b.ai_tokens_used - b.ai_tokens_over_limit) - b.ai_tokens_reserved);
}

/**
 * Neither tokens nor credits left → 429 AI_QUOTA_EXCEEDED (docs/ai-proxy.md). With credits owed
 * (credits/owed.ts) the body names them in `credits_owed`: no AI call starts until they are paid. Both are
 * refusals that waiting cannot cure (docs/ai-proxy.md, "Refusals that waiting cannot cure"): `resets_at` is
 * the period's end, `x-should-retry: false`, and Retry-After only within the hour before it.
 */
export function aiQuotaExceeded(
  ctx: Pick<Ctx, 'config'>,
  limit: number | null,
  periodEnd: Date,
  now: Date,
  detail = '',
  owed = 0,
  topUpUrl?: string,
): AppError {
  const message =
    owed > 0
      ? `This deployment owes ${owed} credits for AI usage its provider reported beyond what its calls held; no AI call starts ` +
        `until credits added to it (a grant, a credit pack, the next period's allocation at ${periodEnd.toISOString()}) pay that first`
      : `The AI token quota of ${limit} tokens for this period is used up and no purchased credits are left${detail}; it resets at ${periodEnd.toISOString()}`;
  const extra = {
    quota_exceeded: true,
    upgrade_url: `${ctx.config.publicBaseUrl}/billing/upgrade`,
    ...(owed > 0 ? { credits_owed: owed } : {}),
    // Passed in by the AI module when billing is available (docs/billing.md, "Top-up link").
    ...(topUpUrl ? { payment_required: { reason: 'insufficient_credits', top_up_url: topUpUrl } } : {}),
  };
  return refusalUntil('AI_QUOTA_EXCEEDED', message, extra, periodEnd, now);
}

/**
 * The quota and credits a call needs are not used up but held by AI calls in progress (docs/ai-proxy.md,
 * Errors): the same 429 AI_QUOTA_EXCEEDED body, its message saying so, and no `x-should-retry: false`
 * nor Retry-After (a retry once those calls settle or give their holds back can succeed; the SDKs' own
 * backoff applies).
 */
function aiQuotaHeld(
  ctx: Pick<Ctx, 'config'>,
  limit: number | null,
  periodEnd: Date,
  held: { tokens: number; credits: number },
  detail = '',
  topUpUrl?: string,
): AppError {
  const what = [held.tokens > 0 ? `${held.tokens} tokens` : '', held.credits > 0 ? `${held.credits} purchased credits` : ''].filter(Boolean).join(' and ');
  const message =
    `This call cannot be paid while ${what} are held by AI calls in progress${detail}; retry when they finish ` +
    `(the AI token quota of ${limit} tokens for this period resets at ${periodEnd.toISOString()})`;
  return new AppError('AI_QUOTA_EXCEEDED', message, {
    quota_exceeded: true,
    upgrade_url: `${ctx.config.publicBaseUrl}/billing/upgrade`,
    ...(topUpUrl ? { payment_required: { reason: 'insufficient_credits', top_up_url: topUpUrl } } : {}),
    resets_at: periodEnd.toISOString(),
  });
}

/**
 * What a call could be paid with were no AI call holding anything: free quota tokens plus the tokens
 * spendable purchased credits buy, with every AI hold given back (tool holds stay).
 */
function aiCapacityUnheld(b: AiBalance, limit: number, cls: ModelClass): number {
  const unheld = { ...b, ai_tokens_reserved: 0, ai_credits_reserved: 0, reserved: b.reserved - b.ai_credits_reserved };
  return (aiTokensFree(unheld, limit) ?? 0) + tokensForCredits(purchasedFloor(unheld), cls);
}

export interface AiHoldInput {
  model: string;
  modelClass: ModelClass;
  /** The prompt's tokens as our tokenizer counts them (inputs of an embedding). */
  promptTokens: number;
  /** Output tokens asked for per choice (max_tokens, or the default allowance); 0 for embeddings. */
  outputPerChoice: number;
  /** Choices asked for (`n`); the allowance applies to each. */
  choices: number;
  /** The top-up link a refusal for credits carries, when billing is available (docs/billing.md, "Top-up link"); made only for such a refusal. */
  topUpUrl?: (() => string | undefined) | undefined;
  /** When a hold left by a dead process is given back (the `ai-holds` worker). */
  expiresAt: Date;
  /** Who makes the call, for its budgets (docs/budgets.md, AI calls); none named: no key, no end user. */
  charge?: AiCharge | undefined;
  /**
   * The hold's id, chosen by the caller before the statement is sent: a hold whose COMMIT answer is lost
   * can still be given back by it (docs/ai-proxy.md, Database faults). A new one when not given.
   */
  id?: string | undefined;
}

/** Who an AI call is made by and for, for its budgets: the key that authenticated it and its end user. */
export interface AiCharge {
  apiKeyId: string | null;
  /** The request's `user` field or X-End-User-Id header. */
  endUserId: string | null;
}

export interface AiHold {
  id: string;
  /** Output tokens per choice the call may produce: what goes upstream as its max tokens. */
  outputPerChoice: number;
  tokensHeld: number;
  creditsHeld: number;
  /** The budget windows the hold was counted in: its settle locks them with the batch's. */
  budgetWindows: string[];
}

/** A budget refused an AI call (docs/budgets.md, AI calls): 429, waiting for the window's end cures it. */
export function aiBudgetExceeded(budget: { budgetId: string; window: { end: Date } }, detail: string, now: Date): AppError {
  return refusalUntil(
    'BUDGET_EXCEEDED',
    `A budget of this organization would be exceeded by this call${detail}; it resets at ${budget.window.end.toISOString()}`,
    { budget_id: budget.budgetId },
    budget.window.end,
    now,
  );
}

/**
 * The windows handed to an op, as they stand now in its transaction (an earlier op of the same batch
 * may have counted in them): counters whose events are judged from here.
 */
async function standingNow(tx: Queryable, windows: readonly BudgetCounter[]): Promise<BudgetCounter[]> {
  if (windows.length === 0) return [];
  const rows = await tx.query<{ id: string; spent_credits: number; spent_ai_tokens: number }>(
    'SELECT id, spent_credits, spent_ai_tokens FROM budget_windows WHERE id = ANY($1::uuid[])',
    [pgArray(windows.map((w) => w.id))],
    'ai_budget_windows_now',
  );
  const byId = new Map(rows.map((r) => [r.id, r]));
  return windows.flatMap((w) => {
    const r = byId.get(w.id);
    if (!r) return [];
    return [{ ...w, spentCredits: r.spent_credits, startSpent: r.spent_credits, spentAiTokens: r.spent_ai_tokens, startAiTokens: r.spent_ai_tokens, refused: false }];
  });
}

/** Windows by id with their budgets, locked in the engine's order (a no-op for those the batch locked). */
async function windowsById(tx: Queryable, ids: readonly string[]): Promise<BudgetCounter[]> {
  if (ids.length === 0) return [];
  const rows = await tx.query<BudgetRow & { window_id: string; subject: string; window_start: Date; window_end: Date; spent_credits: number; spent_ai_tokens: number }>(
    `SELECT w.id AS window_id, w.subject, w.window_start, w.window_end, w.spent_credits, w.spent_ai_tokens,
            b.id, b.organization_id, b.scope, b.deployment_id, b.api_key_id, b.end_user_id, b.tool_name, b.limit_credits, b.limit_ai_tokens,
            b.window_kind, b.mode, b.alert_thresholds
     FROM budget_windows w JOIN budgets b ON b.id = w.budget_id
     WHERE w.id = ANY($1::uuid[])
     ORDER BY w.budget_id, w.subject, w.window_start
     FOR UPDATE OF w`,
    [pgArray([...ids])],
    'ai_budget_windows_by_id',
  );
  return rows.map((r) => {
    const { window_id, subject, window_start, window_end, spent_credits, spent_ai_tokens, ...budget } = r;
    return {
      id: window_id,
      budgetId: budget.id,
      subject,
      window: { start: window_start, end: window_end },
      limitCredits: budget.limit_credits,
      limitAiTokens: budget.limit_ai_tokens,
      block: budget.mode === 'block',
      spentCredits: spent_credits,
      startSpent: spent_credits,
      spentAiTokens: spent_ai_tokens,
      startAiTokens: spent_ai_tokens,
      refused: false,
      budget,
    };
  });
}

/** Count `credits` and `tokens` in windows (locked by the batch), and write the events that crossing left. */
async function countInWindows(tx: Queryable, counters: BudgetCounter[], credits: number, tokens: number, now: Date): Promise<void> {
  if (counters.length > 0 && (credits !== 0 || tokens !== 0)) {
    await tx.query(
      `UPDATE budget_windows SET spent_credits = GREATEST(0, spent_credits + $2::bigint), spent_ai_tokens = GREATEST(0, spent_ai_tokens + $3::bigint)
       WHERE id = ANY($1::uuid[])`,
      [pgArray(counters.map((c) => c.id)), credits, tokens],
      'ai_budget_count',
    );
    for (const c of counters) {
      c.spentCredits = Math.max(0, c.spentCredits + credits);
      c.spentAiTokens = Math.max(0, (c.spentAiTokens ?? 0) + tokens);
    }
  }
  await writeBudgetEvents(tx, counters, now);
}

async function writeBudgetEvents(tx: Queryable, counters: BudgetCounter[], now: Date): Promise<void> {
  for (const event of budgetEvents(counters, now)) await appendEvent(tx, { ...event, at: now });
}

/**
 * Hold prompt + output allowance for one AI call, in one transaction under the balance row's lock: quota
 * tokens first, then purchased credits at the model class's rate. The allowance shrinks to what the
 * deployment can pay for; when not even the prompt and one output token (the prompt alone for an
 * embedding) can be paid, 429 AI_QUOTA_EXCEEDED and nothing is held.
 */
export async function holdAiTokens(ctx: Ctx, deployment: { id: string; organization_id: string }, input: AiHoldInput): Promise<AiHold> {
  const now = ctx.clock.now();
  const actor = actorLabel(ctx.actor);
  // Held credits count in `reserved`: this instance's cached balance for checks is stale with them.
  forgetBalance(ctx, deployment.id);
  const charge = {
    organizationId: deployment.organization_id,
    deploymentId: deployment.id,
    apiKeyId: input.charge?.apiKeyId ?? null,
    endUserId: input.charge?.endUserId ?? null,
    toolName: input.model,
    at: now,
  };
  // In the next deduction batch's transaction (credits/engine/queue.ts): one commit with the batch's, the
  // call's budget windows locked with the batch's. A refusal is returned, not thrown, so that an owed
  // payment made on the way, and a budget's `budget.exceeded` event, commit with the batch.
  const outcome = await ctx.deductions.within(
    deployment.id,
    async (tx, windows): Promise<AiHold | { refusal: AppError }> => {
      const locked = await lockForAi(tx, deployment.id, now, actor);
      const limit = locked.limit;
      let balance = locked.balance;
      // Under the row's lock: a debt left by an over-report keeps every new call out until paid (credits/owed.ts).
      // Purchased credits that became free since the debt began (a hold given back) pay it first.
      if (balance.credits_owed > 0) balance = await payOwed(tx, balance, { monthly: 0, purchased: balance.purchased_balance }, { actor, now });
      if (balance.credits_owed > 0) return { refusal: aiQuotaExceeded(ctx, limit, balance.period_end, now, '', balance.credits_owed, input.topUpUrl?.()) };
      const counters = await standingNow(tx, windows);
      const minimum = input.outputPerChoice > 0 ? 1 : 0;
      const needed = input.promptTokens + minimum * input.choices;
      // The deployment's own quota and credits first (balance before budget), then its block budgets'
      // room: credits they leave cap what purchased credits may pay, tokens they leave cap the call.
      const free = limit === null ? null : (aiTokensFree(balance, limit) ?? 0);
      const ownCapacity = free === null ? Number.POSITIVE_INFINITY : free + tokensForCredits(purchasedFloor(balance), input.modelClass);
      const fits = (capacity: number) => capacity >= input.promptTokens && Math.floor((capacity - input.promptTokens) / input.choices) >= minimum;
      if (limit !== null && !fits(ownCapacity)) {
        const detail = ownCapacity > 0 ? ` (this call needs ${needed} tokens, ${ownCapacity} can be paid)` : '';
        // Only held by calls in progress: a retry can succeed once they finish (docs/ai-proxy.md, Errors).
        if (fits(aiCapacityUnheld(balance, limit, input.modelClass))) {
          const held = { tokens: balance.ai_tokens_reserved, credits: balance.ai_credits_reserved };
          return { refusal: aiQuotaHeld(ctx, limit, balance.period_end, held, detail, input.topUpUrl?.()) };
        }
        return { refusal: aiQuotaExceeded(ctx, limit, balance.period_end, now, detail, 0, input.topUpUrl?.()) };
      }
      const room = roomLeft(counters);
      let capacity = ownCapacity;
      if (free !== null && room.credits !== null) capacity = free + tokensForCredits(Math.min(purchasedFloor(balance), Math.max(0, room.credits)), input.modelClass);
      if (room.tokens !== null) capacity = Math.min(capacity, room.tokens);
      const perChoice = Math.min(input.outputPerChoice, Math.floor((capacity - input.promptTokens) / input.choices));
      // A credit limit lowered below what is spent refuses even a call the token quota pays for, as it
      // refuses a charge of 0 credits elsewhere (crossed); room never goes below 0, so it cannot tell.
      const lowered = crossed(counters, 0) !== null;
      if (lowered || capacity < input.promptTokens || perChoice < minimum) {
        const creditsNeeded = free === null ? 0 : creditsForTokens(Math.max(0, needed - free), input.modelClass);
        const budget = crossed(counters, creditsNeeded, needed) ?? counters.find((c) => c.block)!;
        budget.refused = true;
        await writeBudgetEvents(tx, counters, now);
        return { refusal: aiBudgetExceeded(budget, ` (this call needs ${needed} tokens)`, now) };
      }
      const total = input.promptTokens + perChoice * input.choices;
      const tokensHeld = free === null ? 0 : Math.min(total, free);
      const creditsHeld = free === null ? 0 : creditsForTokens(total - tokensHeld, input.modelClass);
      const id = input.id ?? crypto.randomUUID();
      const budgetWindows = counters.map((c) => c.id);
      // The balance and the hold's row in one statement: the row lock is held one round trip less.
      await tx.query(
        `WITH upd AS (
           UPDATE credit_balances SET ai_tokens_reserved = ai_tokens_reserved + $8, ai_credits_reserved = ai_credits_reserved + $9,
             reserved = reserved + $9, updated_at = $11
           WHERE deployment_id = $3 AND ($8::bigint > 0 OR $9::bigint > 0)
           RETURNING deployment_id
         )
         INSERT INTO ai_reservations (id, organization_id, deployment_id, model, model_class, prompt_tokens, output_allowance,
           tokens_held, credits_held, status, expires_at, created_at, updated_at, budget_windows)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'held', $10, $11, $11, $12::uuid[])`,
        [
          id,
          deployment.organization_id,
          deployment.id,
          input.model,
          input.modelClass,
          input.promptTokens,
          perChoice * input.choices,
          tokensHeld,
          creditsHeld,
          input.expiresAt,
          now,
          budgetWindows.length > 0 ? pgArray(budgetWindows) : null,
        ],
      );
      // Held tokens and credits count in every budget the call falls under while held.
      await countInWindows(tx, counters, creditsHeld, total, now);
      return { id, outputPerChoice: perChoice, tokensHeld, creditsHeld, budgetWindows };
    },
    { charge },
  );
  if ('refusal' in outcome) {
    if (outcome.refusal.code === 'BUDGET_EXCEEDED') ctx.metrics.deductionRefusals.inc({ source: 'ai', reason: 'budget_exceeded' });
    throw outcome.refusal;
  }
  return outcome;
}

/**
 * What a hold gives back to the budget windows it was counted in, those still in progress (docs/budgets.md,
 * AI calls): a CTE over `gone` (held rows turned released or expired, with their budget_windows,
 * credits_held and budget_tokens), locking the windows in the engine's order.
 */
const GIVE_BACK_TO_WINDOWS = `given AS (
       SELECT w_id, SUM(gone.credits_held)::bigint AS credits, SUM(gone.budget_tokens)::bigint AS tokens
       FROM gone, unnest(gone.budget_windows) AS w_id GROUP BY w_id
     ), win AS (
       UPDATE budget_windows w SET spent_credits = GREATEST(0, w.spent_credits - given.credits),
         spent_ai_tokens = GREATEST(0, w.spent_ai_tokens - given.tokens)
       FROM given
       WHERE w.id = given.w_id AND w.id IN (
         SELECT l.id FROM budget_windows l WHERE l.id IN (SELECT w_id FROM given) AND l.window_end > $NOW::timestamptz
         ORDER BY l.budget_id, l.subject, l.window_start FOR UPDATE OF l)
       RETURNING 1
     )`;

/** Give a hold back untouched (refusal, upstream fault, nothing produced). False when it was no longer held. */
export async function releaseAiHold(db: Queryable, deploymentId: string, holdId: string, now: Date): Promise<boolean> {
  const rows = await db.query<{ id: string }>(
    `WITH gone AS (
       UPDATE ai_reservations SET status = 'released', updated_at = $3::timestamptz
       WHERE id = $2::uuid AND deployment_id = $1::uuid AND status = 'held'
       RETURNING id, tokens_held, credits_held, prompt_tokens + output_allowance AS budget_tokens, budget_windows
     ), upd AS (
       UPDATE credit_balances b SET ai_tokens_reserved = b.ai_tokens_reserved - gone.tokens_held,
         ai_credits_reserved = b.ai_credits_reserved - gone.credits_held, reserved = b.reserved - gone.credits_held,
         updated_at = $3::timestamptz
       FROM gone WHERE b.deployment_id = $1::uuid
       RETURNING b.deployment_id
     ), ${GIVE_BACK_TO_WINDOWS.replace('$NOW', '$3')}
     SELECT id FROM gone`,
    [deploymentId, holdId, now],
    'ai_hold_release',
  );
  return rows.length > 0;
}

/**
 * Give back holds whose call can no longer settle (its process died): up to `limit` due holds in one
 * transaction, SKIP LOCKED so instances sweep side by side and a hold being settled right now is left
 * alone. Their deployments' balance rows are locked first, in deployment order, as a deduction batch
 * locks them before it settles a hold: a sweep that took a hold first and then waited for its balance
 * row deadlocked with the batch settling that same hold (one whose call outlived its expiry).
 */
export async function expireAiHolds(db: Database, now: Date, limit = 500): Promise<number> {
  return db.transaction(async (tx) => {
    const locked = await tx.query<{ deployment_id: string }>(
      `SELECT deployment_id FROM credit_balances
       WHERE deployment_id IN (SELECT deployment_id FROM ai_reservations WHERE status = 'held' AND expires_at <= $1::timestamptz
                               ORDER BY expires_at LIMIT $2)
       ORDER BY deployment_id FOR UPDATE`,
      [now, limit],
      'ai_hold_expire_lock',
    );
    if (locked.length === 0) return 0;
    const rows = await tx.query<{ n: number }>(
      `WITH due AS (
         SELECT id FROM ai_reservations WHERE status = 'held' AND expires_at <= $1::timestamptz AND deployment_id = ANY($3::uuid[])
         ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
       ), gone AS (
         UPDATE ai_reservations r SET status = 'expired', updated_at = $1::timestamptz
         FROM due WHERE r.id = due.id
         RETURNING r.deployment_id, r.tokens_held, r.credits_held, r.prompt_tokens + r.output_allowance AS budget_tokens, r.budget_windows
       ), sums AS (
         SELECT deployment_id, SUM(tokens_held)::bigint AS tokens, SUM(credits_held)::bigint AS credits FROM gone GROUP BY deployment_id
       ), upd AS (
         UPDATE credit_balances b SET ai_tokens_reserved = b.ai_tokens_reserved - sums.tokens,
           ai_credits_reserved = b.ai_credits_reserved - sums.credits, reserved = b.reserved - sums.credits,
           updated_at = $1::timestamptz
         FROM sums WHERE b.deployment_id = sums.deployment_id
         RETURNING b.deployment_id
       ), ${GIVE_BACK_TO_WINDOWS.replace('$NOW', '$1')}
       SELECT (SELECT count(*) FROM gone)::int AS n`,
      [now, limit, pgArray(locked.map((r) => r.deployment_id))],
      'ai_hold_expire',
    );
    return rows[0]?.n ?? 0;
  });
}

/** Settled and released holds are kept this long for reconciliation, then pruned with the invocations. */
export const AI_HOLD_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

export async function pruneAiHolds(db: Queryable, now: Date, limit = 1000): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `WITH old AS (
       SELECT id FROM ai_reservations WHERE created_at < $1::timestamptz AND status <> 'held'
       LIMIT $2 FOR UPDATE SKIP LOCKED
     ), del AS (DELETE FROM ai_reservations r USING old WHERE r.id = old.id RETURNING 1)
     SELECT count(*)::int AS n FROM del`,
    [new Date(now.getTime() - AI_HOLD_RETENTION_MS), limit],
  );
  return rows[0]?.n ?? 0;
}

export interface AiUsageInput {
  inputTokens: number;
  outputTokens: number;
  model: string;
  modelClass: ModelClass;
  /** The hold this call made; its tokens and credits are given back in the same transaction. */
  holdId?: string | undefined;
  /** Makes the accounting idempotent per deployment (the hold's id, or a provider's response id). */
  requestId?: string | undefined;
  /** The provider reported no usage: the tokens were counted by our tokenizer. */
  estimated?: boolean;
  /** The budget windows the hold was counted in (AiHold.budgetWindows): locked with the batch's. */
  budgetWindows?: readonly string[] | undefined;
  /**
   * Who made a call without a hold, for its budgets: it is counted in the windows in progress (never
   * refused: the tokens are spent). A call with a hold is counted where its hold was, also when the
   * hold was given back before the settle.
   */
  charge?: AiCharge | undefined;
}

export interface AiUsageResult {
  usageId: string;
  tokens: number;
  tokensOverLimit: number;
  modelClass: ModelClass;
  /** Credits the tokens past the limit cost. */
  creditsDue: number;
  /** Credits taken from purchased credits (less than due only when more tokens came than were held and nothing paid for them). */
  creditsCharged: number;
  /** Credits due that could not be charged: added to the deployment's credits_owed (credits/owed.ts). */
  creditsShort: number;
  /** The deployment's credits_owed after this call. */
  creditsOwed: number;
  used: number;
  limit: number | null;
  remaining: number | null;
  resetsAt: string;
  estimated: boolean;
  /** True when the same requestId was accounted before; nothing was counted again. */
  replayed: boolean;
}

interface AiUsageRow {
  id: string;
  quantity: number;
  credits_short: number;
  metadata: { tokens: number; tokens_over_limit: number; model_class: ModelClass; credits_due: number; estimated?: boolean };
}

/**
 * Settle one AI call (or account one without a hold): in one transaction under the balance row's lock
 * (which also rolls the period, once, whichever instance comes first) give the hold back, count the
 * tokens, spend quota first and purchased credits for the rest. The ledger row, the usage record, the
 * meter outbox row and any `quota.threshold` events are written in the same transaction.
 */
export async function settleAiTokens(ctx: Ctx, deployment: { id: string; organization_id: string }, input: AiUsageInput): Promise<AiUsageResult> {
  for (const field of ['inputTokens', 'outputTokens'] as const) {
    if (!Number.isSafeInteger(input[field]) || input[field] < 0) {
      throw new ValidationError(`${field} must be a whole number of tokens, 0 or more`, [{ field, message: 'must be an integer ≥ 0' }]);
    }
  }
  forgetBalance(ctx, deployment.id);
  const now = ctx.clock.now();
  const actor = actorLabel(ctx.actor);
  const modelClass = input.modelClass;
  const tokens = input.inputTokens + input.outputTokens;
  const requestId = input.requestId ?? input.holdId;
  const estimated = input.estimated === true;
  // Budget windows: the hold's, or, for a call without one, those its charge falls in now.
  const budgets =
    input.holdId !== undefined
      ? input.budgetWindows && input.budgetWindows.length > 0
        ? { windows: input.budgetWindows }
        : undefined
      : {
          charge: {
            organizationId: deployment.organization_id,
            deploymentId: deployment.id,
            apiKeyId: input.charge?.apiKeyId ?? null,
            endUserId: input.charge?.endUserId ?? null,
            toolName: input.model,
            at: now,
          },
        };
  // In the next deduction batch's transaction (credits/engine/queue.ts): one commit with the batch's.
  const result = await ctx.deductions.within(deployment.id, async (tx, windows) => {
    const { balance: before, limit } = await lockForAi(tx, deployment.id, now, actor);
    const view = (b: AiBalance) => ({
      used: b.ai_tokens_used,
      limit,
      remaining: aiTokensFree(b, limit),
      resetsAt: before.period_end.toISOString(),
    });
    const usageId = crypto.randomUUID();
    // The hold is given back in the balance update below. Its row turning `settled` is also the
    // idempotency check of the common case; only a hold that is no longer held (settled before, or
    // given back by the sweeper) looks for an earlier usage record.
    let heldTokens = 0;
    let heldCredits = 0;
    /** What the hold counted in its budget windows: all its tokens, and its credits. */
    let heldBudgetTokens = 0;
    let heldWindows: string[] = [];
    let claimed = false;
    if (input.holdId !== undefined) {
      const held = await tx.query<{ tokens_held: number; credits_held: number; budget_tokens: number; budget_windows: string[] | null }>(
        `UPDATE ai_reservations SET status = 'settled', usage_id = $3, updated_at = $4
         WHERE id = $2 AND deployment_id = $1 AND status = 'held'
         RETURNING tokens_held, credits_held, prompt_tokens + output_allowance AS budget_tokens, budget_windows`,
        [deployment.id, input.holdId, usageId, now],
        'ai_hold_settle',
      );
      claimed = held.length > 0;
      heldTokens = held[0]?.tokens_held ?? 0;
      heldCredits = held[0]?.credits_held ?? 0;
      heldBudgetTokens = held[0]?.budget_tokens ?? 0;
      heldWindows = held[0]?.budget_windows ?? [];
    }
    if (!claimed && requestId !== undefined) {
      // The request's id names its record (ai_usage_requests); a record the usage retention dropped is 410.
      const seen = await tx.query<AiUsageRow | { id: null }>(
        `SELECT u.id, u.quantity, u.credits_short, u.metadata FROM ai_usage_requests r
         LEFT JOIN usage_records u ON u.id = r.usage_id AND u.deployment_id = r.deployment_id
         WHERE r.deployment_id = $1 AND r.request_id = $2`,
        [deployment.id, requestId],
      );
      const row = seen[0];
      if (row && row.id === null) {
        throw new AppError('USAGE_RECORD_EXPIRED', 'This AI request was recorded before the usage retention and its usage record was deleted');
      }
      if (row && row.id !== null) {
        return {
          usageId: row.id,
          tokens: row.metadata.tokens,
          tokensOverLimit: row.metadata.tokens_over_limit,
          modelClass: row.metadata.model_class,
          creditsDue: row.metadata.credits_due,
          creditsCharged: row.quantity,
          creditsShort: row.credits_short,
          creditsOwed: before.credits_owed,
          ...view(before),
          estimated: row.metadata.estimated === true,
          replayed: true,
        };
      }
    }
    if (input.holdId !== undefined && !claimed) {
      // A hold given back before its settle (expired while the provider answered): its row still names
      // the windows it was counted in.
      const gone = await tx.query<{ budget_windows: string[] | null }>(
        'SELECT budget_windows FROM ai_reservations WHERE id = $2 AND deployment_id = $1',
        [deployment.id, input.holdId],
      );
      heldWindows = gone[0]?.budget_windows ?? [];
    }
    // The windows of this settle, as they stand: a hold's are those its row names (locked with the
    // batch's when the caller named them too, AiHold.budgetWindows), else those its charge fell in.
    const counted = input.holdId !== undefined ? await windowsById(tx, heldWindows) : await standingNow(tx, windows);
    const released: AiBalance = {
      ...before,
      ai_tokens_reserved: before.ai_tokens_reserved - heldTokens,
      ai_credits_reserved: before.ai_credits_reserved - heldCredits,
      reserved: before.reserved - heldCredits,
    };
    // Quota tokens free now include this call's own hold, so a call that stayed within its hold always fits.
    // What the deployment cannot pay now (a provider reported more than was held) it owes (credits/owed.ts).
    const { overLimit, due: creditsDue, charged, short } = splitAiCharge(tokens, aiTokensFree(released, limit), modelClass, purchasedFloor(released));
    const updated = await tx.query<BalanceRow>(
      `UPDATE credit_balances SET ai_tokens_used = ai_tokens_used + $2, ai_tokens_over_limit = ai_tokens_over_limit + $3,
         ai_tokens_reserved = ai_tokens_reserved - $4, ai_credits_reserved = ai_credits_reserved - $5, reserved = reserved - $5,
         purchased_balance = purchased_balance - $6, purchased_consumed = purchased_consumed + $6, credits_owed = credits_owed + $8,
         updated_at = $7
       WHERE deployment_id = $1 RETURNING *`,
      [deployment.id, tokens, overLimit, heldTokens, heldCredits, charged, now, short],
    );
    const after = updated[0]!;
    let ledgerId: number | null = null;
    if (charged > 0) {
      ledgerId = await appendLedger(tx, {
        organizationId: deployment.organization_id,
        deploymentId: deployment.id,
        kind: 'deduct',
        amount: -charged,
        monthlyDelta: 0,
        purchasedDelta: -charged,
        monthlyAfter: monthlyRemaining(after.monthly_allocation, after.monthly_used),
        purchasedAfter: after.purchased_balance,
        actor,
        usageId,
        reason: `AI tokens past the limit: ${overLimit} ${modelClass} tokens (${input.model})`,
        at: now,
      });
    }
    await tx.query(
      `INSERT INTO usage_records (id, organization_id, deployment_id, metric, quantity, tool_name, metadata, success, error,
         ledger_id, invocation_id, purchased_taken, period_start, "timestamp", credits_short, budget_windows)
       VALUES ($1, $2, $3, 'ai_tokens', $4, $5, $6, true, $7, $8, $9, $4, $10, $11, $12, $13::uuid[])`,
      [
        usageId,
        deployment.organization_id,
        deployment.id,
        charged,
        input.model,
        JSON.stringify({
          input_tokens: input.inputTokens,
          output_tokens: input.outputTokens,
          tokens,
          tokens_over_limit: overLimit,
          model_class: modelClass,
          credits_due: creditsDue,
          credits_short: short,
          estimated,
        }),
        short > 0 ? 'insufficient_credits' : null,
        ledgerId,
        requestId ?? null,
        after.period_start,
        now,
        short,
        counted.length > 0 ? pgArray(counted.map((c) => c.id)) : null,
      ],
    );
    if (requestId !== undefined) {
      await tx.query(
        'INSERT INTO ai_usage_requests (deployment_id, request_id, usage_id, created_at) VALUES ($1, $2, $3, $4)',
        [deployment.id, requestId, usageId, now],
        'ai_usage_request',
      );
    }
    // Budgets (docs/budgets.md, AI calls): the call's tokens and the credits due for them (an
    // over-report's included, even past a limit) replace what its hold counted, in the hold's windows
    // that are still in progress; a call without a hold is counted in the windows of now.
    // A hold given back before its settle gave its count back to the windows still in progress then
    // (and nothing to those that had ended): there the call's whole use is counted again (nothing held).
    if (input.holdId !== undefined) {
      const inProgress = counted.filter((c) => c.window.end.getTime() > now.getTime());
      await countInWindows(tx, inProgress, creditsDue - heldCredits, tokens - heldBudgetTokens, now);
    } else await countInWindows(tx, counted, creditsDue, tokens, now);
    if (charged > 0 && ctx.config.stripeMeterEventName !== undefined) {
      await enqueueMeterEvent(tx, { usageId, organizationId: deployment.organization_id, deploymentId: deployment.id, value: charged, at: now });
    }
    await emitThresholds(tx, {
      organizationId: deployment.organization_id,
      deploymentId: deployment.id,
      quota: 'ai_tokens',
      before: before.ai_tokens_used,
      after: after.ai_tokens_used,
      limit,
      periodStart: after.period_start,
      periodEnd: after.period_end,
      now,
    });
    return {
      usageId,
      tokens,
      tokensOverLimit: overLimit,
      modelClass,
      creditsDue,
      creditsCharged: charged,
      creditsShort: short,
      creditsOwed: after.credits_owed,
      ...view(after),
      estimated,
      replayed: false,
    };
  }, budgets);
  // Counted once committed: a batch that fails runs its ops again one by one.
  if (!result.replayed && result.creditsShort > 0) ctx.metrics.aiCreditsOwed.inc(result.creditsShort);
  return result;
}

/**
 * Lock the balance row with the deployment's terms in one round trip; only a row past its sync_before
 * (a period or override boundary) takes syncBalance's slow path, as the deduction statement does.
 */
async function lockForAi(tx: Queryable, deploymentId: string, now: Date, actor: string): Promise<{ balance: BalanceRow; limit: number | null }> {
  const rows = await tx.query<BalanceRow & DeploymentTerms>(
    `SELECT b.*, d.tier, d.billing_anchor, d.override_monthly_credits, d.override_api_rate_limit, d.override_ai_tokens_limit,
            d.override_expires_at
     FROM credit_balances b JOIN deployments d ON d.id = b.deployment_id
     WHERE b.deployment_id = $1 FOR UPDATE OF b`,
    [deploymentId],
    'ai_balance_lock',
  );
  const row = rows[0];
  if (!row) throw new Error(`no balance row for deployment ${deploymentId}`);
  const limit = effectiveTerms(row, now).aiTokensLimit;
  if (row.sync_before.getTime() > now.getTime()) return { balance: row, limit };
  return { balance: await syncBalance(tx, deploymentId, now, actor), limit };
}
