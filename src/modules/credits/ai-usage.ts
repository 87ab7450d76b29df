import { forgetBalance } from './balance-cache.js';
import type { ModelClass } from '../../config.js';
import { type Ctx, actorLabel } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { type AppError, refusalUntil, ValidationError } from '../../errors.js';
import { AI_CREDIT_RATES } from '../../lib/tiers.js';
import { emitThresholds } from '../quotas/thresholds.js';
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
  };
  return refusalUntil('AI_QUOTA_EXCEEDED', message, extra, periodEnd, now);
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
  /** When a hold left by a dead process is given back (the `ai-holds` worker). */
  expiresAt: Date;
}

export interface AiHold {
  id: string;
  /** Output tokens per choice the call may produce: what goes upstream as its max tokens. */
  outputPerChoice: number;
  tokensHeld: number;
  creditsHeld: number;
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
  // In the next deduction batch's transaction (credits/engine/queue.ts): one commit with the batch's. A refusal
  // is returned, not thrown, so that an owed payment made on the way commits with the batch.
  const outcome = await ctx.deductions.within(deployment.id, async (tx): Promise<AiHold | { refusal: AppError }> => {
    const locked = await lockForAi(tx, deployment.id, now, actor);
    const limit = locked.limit;
    let balance = locked.balance;
    // Under the row's lock: a debt left by an over-report keeps every new call out until paid (credits/owed.ts).
    // Purchased credits that became free since the debt began (a hold given back) pay it first.
    if (balance.credits_owed > 0) balance = await payOwed(tx, balance, { monthly: 0, purchased: balance.purchased_balance }, { actor, now });
    if (balance.credits_owed > 0) return { refusal: aiQuotaExceeded(ctx, limit, balance.period_end, now, '', balance.credits_owed) };
    let perChoice = input.outputPerChoice;
    let tokensHeld = 0;
    let creditsHeld = 0;
    if (limit !== null) {
      const free = aiTokensFree(balance, limit) ?? 0;
      const capacity = free + tokensForCredits(purchasedFloor(balance), input.modelClass);
      const minimum = input.outputPerChoice > 0 ? 1 : 0;
      perChoice = Math.min(input.outputPerChoice, Math.floor((capacity - input.promptTokens) / input.choices));
      if (capacity < input.promptTokens || perChoice < minimum) {
        const detail = capacity > 0 ? ` (this call needs ${input.promptTokens + minimum} tokens, ${capacity} can be paid)` : '';
        return { refusal: aiQuotaExceeded(ctx, limit, balance.period_end, now, detail) };
      }
      const total = input.promptTokens + perChoice * input.choices;
      tokensHeld = Math.min(total, free);
      creditsHeld = creditsForTokens(total - tokensHeld, input.modelClass);
    }
    const id = crypto.randomUUID();
    // The balance and the hold's row in one statement: the row lock is held one round trip less.
    await tx.query(
      `WITH upd AS (
         UPDATE credit_balances SET ai_tokens_reserved = ai_tokens_reserved + $8, ai_credits_reserved = ai_credits_reserved + $9,
           reserved = reserved + $9, updated_at = $11
         WHERE deployment_id = $3 AND ($8::bigint > 0 OR $9::bigint > 0)
         RETURNING deployment_id
       )
       INSERT INTO ai_reservations (id, organization_id, deployment_id, model, model_class, prompt_tokens, output_allowance,
         tokens_held, credits_held, status, expires_at, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'held', $10, $11, $11)`,
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
      ],
    );
    return { id, outputPerChoice: perChoice, tokensHeld, creditsHeld };
  });
  if ('refusal' in outcome) throw outcome.refusal;
  return outcome;
}

/** Give a hold back untouched (refusal, upstream fault, nothing produced). False when it was no longer held. */
export async function releaseAiHold(db: Queryable, deploymentId: string, holdId: string, now: Date): Promise<boolean> {
  const rows = await db.query<{ id: string }>(
    `WITH rel AS (
       UPDATE ai_reservations SET status = 'released', updated_at = $3::timestamptz
       WHERE id = $2::uuid AND deployment_id = $1::uuid AND status = 'held'
       RETURNING id, tokens_held, credits_held
     ), upd AS (
       UPDATE credit_balances b SET ai_tokens_reserved = b.ai_tokens_reserved - rel.tokens_held,
         ai_credits_reserved = b.ai_credits_reserved - rel.credits_held, reserved = b.reserved - rel.credits_held,
         updated_at = $3::timestamptz
       FROM rel WHERE b.deployment_id = $1::uuid
       RETURNING b.deployment_id
     )
     SELECT id FROM rel`,
    [deploymentId, holdId, now],
  );
  return rows.length > 0;
}

/**
 * Give back holds whose call can no longer settle (its process died): all deployments in one statement,
 * SKIP LOCKED so instances sweep side by side and a hold being settled right now is left alone.
 */
export async function expireAiHolds(db: Queryable, now: Date, limit = 500): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `WITH due AS (
       SELECT id FROM ai_reservations WHERE status = 'held' AND expires_at <= $1::timestamptz
       ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
     ), exp AS (
       UPDATE ai_reservations r SET status = 'expired', updated_at = $1::timestamptz
       FROM due WHERE r.id = due.id
       RETURNING r.deployment_id, r.tokens_held, r.credits_held
     ), sums AS (
       SELECT deployment_id, SUM(tokens_held)::bigint AS tokens, SUM(credits_held)::bigint AS credits FROM exp GROUP BY deployment_id
     ), upd AS (
       UPDATE credit_balances b SET ai_tokens_reserved = b.ai_tokens_reserved - sums.tokens,
         ai_credits_reserved = b.ai_credits_reserved - sums.credits, reserved = b.reserved - sums.credits,
         updated_at = $1::timestamptz
       FROM sums WHERE b.deployment_id = sums.deployment_id
       RETURNING b.deployment_id
     )
     SELECT (SELECT count(*) FROM exp)::int AS n`,
    [now, limit],
  );
  return rows[0]?.n ?? 0;
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
  // In the next deduction batch's transaction (credits/engine/queue.ts): one commit with the batch's.
  const result = await ctx.deductions.within(deployment.id, async (tx) => {
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
    let claimed = false;
    if (input.holdId !== undefined) {
      const held = await tx.query<{ tokens_held: number; credits_held: number }>(
        `UPDATE ai_reservations SET status = 'settled', usage_id = $3, updated_at = $4
         WHERE id = $2 AND deployment_id = $1 AND status = 'held'
         RETURNING tokens_held, credits_held`,
        [deployment.id, input.holdId, usageId, now],
        'ai_hold_settle',
      );
      claimed = held.length > 0;
      heldTokens = held[0]?.tokens_held ?? 0;
      heldCredits = held[0]?.credits_held ?? 0;
    }
    if (!claimed && requestId !== undefined) {
      const seen = await tx.query<AiUsageRow>(
        `SELECT id, quantity, credits_short, metadata FROM usage_records
         WHERE deployment_id = $1 AND metric = 'ai_tokens' AND invocation_id = $2`,
        [deployment.id, requestId],
      );
      const row = seen[0];
      if (row) {
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
         ledger_id, invocation_id, purchased_taken, period_start, "timestamp", credits_short)
       VALUES ($1, $2, $3, 'ai_tokens', $4, $5, $6, true, $7, $8, $9, $4, $10, $11, $12)`,
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
      ],
    );
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
  });
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
