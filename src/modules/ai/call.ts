import { randomUUID } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ModelClass } from '../../config.js';
import type { Ctx } from '../../context.js';
import { type AiCharge, type AiHold, type DeploymentTerms, effectiveTerms, holdAiTokens, loadBalance, releaseAiHold, settleAiTokens } from '../credits/index.js';
import { topUpUrl } from '../billing/top-up-link.js';
import { endUserHeader } from '../../http/end-user.js';
import { isConnectionError, isTransientError } from '../../db/client.js';
import { ServiceUnavailableError } from '../../errors.js';
import { invalidRequest } from './prompt.js';
import type { ReportedUsage } from './sse.js';
import type { AiUpstream } from './upstream.js';

/**
 * One AI call's plan, hold and settle (docs/ai-proxy.md): every way out of a call either settles its
 * hold or gives it back, and a hold left by a process that died mid-call is given back by the
 * `ai-hold-expiry` worker.
 */

/** The deployment an AI call spends for: the deployment headers' or the API key's primary deployment. */
export interface AiDeployment extends DeploymentTerms {
  id: string;
  organization_id: string;
  status: string;
  flag_overrides: unknown;
}

export interface ChatCall {
  ctx: Ctx;
  deployment: AiDeployment;
  upstream: AiUpstream | null;
  request: FastifyRequest;
  reply: FastifyReply;
}

/** A hold that outlives its call this long is given back by the worker (streams end well before). */
export const AI_HOLD_TTL_MS = 60 * 60 * 1000;

/** What one call asks for, worked out before anything is held. */
export interface CallPlan {
  model: string;
  modelClass: ModelClass;
  promptTokens: number;
  outputPerChoice: number;
  choices: number;
  /** A reasoning model (AI_REASONING_MODELS): its hidden reasoning tokens cannot be counted. */
  reasoning: boolean;
  /** Who makes the call, for its budgets (docs/budgets.md, AI calls). */
  charge: AiCharge;
}

/**
 * Who an AI call is made by, for its budgets (docs/budgets.md, AI calls): the API key that
 * authenticated it, and its end user — the OpenAI `user` field (forwarded upstream as sent) or the
 * X-End-User-Id header; both sent, they must be equal. A `user` of "" names no one; one of more than
 * 200 characters or "*" is refused (400 INVALID_REQUEST, `param` naming it).
 */
export function chargeOf(call: Pick<ChatCall, 'ctx' | 'request'>, body: Record<string, unknown>): AiCharge {
  const actor = call.ctx.actor;
  const apiKeyId = actor.type === 'api_key' ? actor.apiKeyId : null;
  const header = endUserHeader(call.request);
  if (header !== undefined && (header.length < 1 || header.length > 200 || header === '*')) {
    throw invalidRequest('X-End-User-Id', 'must be 1 to 200 characters and not "*"');
  }
  const user = typeof body.user === 'string' && body.user !== '' ? body.user : null;
  if (user !== null && (user.length > 200 || user === '*')) throw invalidRequest('user', 'must be at most 200 characters and not "*" (it names the end user for budgets)');
  if (user !== null && header !== undefined && user !== header) throw invalidRequest('user', 'differs from the X-End-User-Id header');
  return { apiKeyId, endUserId: user ?? header ?? null };
}

/** A hold, or (`skipped`) none: a deployment without an AI token limit has nothing to hold. */
export type CallHold = AiHold & { skipped?: true };

/**
 * Hold what the call may spend. An unlimited deployment (its terms as authenticated) of an organization
 * without budgets (its balance row's mark, as this instance last read it; a budget's change makes every
 * instance read it again) holds nothing and skips the transaction, so its calls reach the provider
 * without a database round trip; the settle still counts them against the limit in force then, should
 * one have been set meanwhile, and in the budgets they fall under. With budgets the call is held, its
 * tokens counted in them while held (docs/budgets.md, AI calls).
 */
export async function hold(ctx: Ctx, deployment: AiDeployment, plan: CallPlan): Promise<CallHold> {
  const now = ctx.clock.now();
  if (effectiveTerms(deployment, now).aiTokensLimit === null && !(await loadBalance(ctx, deployment.id, now)).has_budgets) {
    return { id: randomUUID(), outputPerChoice: plan.outputPerChoice, tokensHeld: 0, creditsHeld: 0, budgetWindows: [], skipped: true };
  }
  // Chosen here, not in the statement's answer: a hold whose COMMIT answer is lost is given back by it.
  const id = randomUUID();
  try {
    return await holdAiTokens(ctx, deployment, {
      id,
      model: plan.model,
      modelClass: plan.modelClass,
      promptTokens: plan.promptTokens,
      outputPerChoice: plan.outputPerChoice,
      choices: plan.choices,
      expiresAt: new Date(now.getTime() + AI_HOLD_TTL_MS),
      charge: plan.charge,
      // Signed only when a refusal for credits carries it.
      topUpUrl: () => topUpUrl(ctx, deployment.id, deployment),
    });
  } catch (err) {
    // The connection was lost: the hold may have committed, its caller answered 503 and nothing sent
    // upstream. Give it back rather than leave it to the worker for an hour (docs/ai-proxy.md, Database faults).
    if (isLostConnection(err)) await releaseInBackground(ctx, deployment.id, id, 'hold');
    throw err;
  }
}

/**
 * The tokens a call settles at (docs/ai-proxy.md, Bounds: reported usage): the provider's usage when it
 * is valid, its output never below what the proxy counted in the text it relayed (a provider that
 * reports 0 output for 20 tokens of text is charged the 20); a report that is not (a count outside
 * integers 0…2³¹, an output count missing) settles at the hold and is logged; no report at all settles
 * at the full hold for a reasoning model, else at the prompt hold plus the output relayed (never more
 * than the allowance), both marked estimated.
 */
export function settledTokens(
  plan: CallPlan,
  held: CallHold,
  reported: ReportedUsage,
  relayed: () => number,
): { inputTokens: number; outputTokens: number; estimated: boolean } {
  const allowance = held.outputPerChoice * plan.choices;
  if (reported.kind === 'ok') return { inputTokens: reported.usage.prompt_tokens, outputTokens: Math.max(reported.usage.completion_tokens, relayed()), estimated: false };
  if (reported.kind === 'invalid' || plan.reasoning) return { inputTokens: plan.promptTokens, outputTokens: allowance, estimated: true };
  return { inputTokens: plan.promptTokens, outputTokens: Math.min(relayed(), allowance), estimated: true };
}

/**
 * Settle a call. A settle that meets a database fault may have committed (its COMMIT answer lost): the
 * hold's row is read again and, settled, the call is paid for; still held, it is settled again, once
 * (a settle is guarded on the hold's status and its request id, so a second one never charges twice).
 * Only when the database stays unreachable is the fault thrown (a non-streamed call answers 503 and
 * delivers nothing, docs/ai-proxy.md, Database faults). Resolves with the tokens settled.
 */
export async function settle(
  ctx: Ctx,
  deployment: AiDeployment,
  plan: CallPlan,
  held: CallHold,
  reported: ReportedUsage,
  relayed: () => number,
): Promise<{ tokens: number }> {
  if (reported.kind === 'invalid') {
    ctx.log.warn({ hold: held.id, model: plan.model, reported: reported.reported }, 'AI provider reported usage that is not integer token counts 0..2^31 (or without its output count); settled at the hold');
  }
  const counted = settledTokens(plan, held, reported, relayed);
  const input = {
    model: plan.model,
    modelClass: plan.modelClass,
    ...(held.skipped ? { requestId: held.id, charge: plan.charge } : { holdId: held.id, budgetWindows: held.budgetWindows }),
    ...counted,
  };
  for (let attempt = 1; ; attempt++) {
    try {
      return { tokens: (await settleAiTokens(ctx, deployment, input)).tokens };
    } catch (err) {
      if (!isDatabaseFault(err)) throw err;
      const settled = await wasSettled(ctx, deployment.id, held);
      if (settled === true) {
        ctx.log.warn({ err, hold: held.id }, 'AI settle met a database fault after it committed; the call is paid for');
        return { tokens: counted.inputTokens + counted.outputTokens };
      }
      if (settled === null || attempt >= 2) throw err;
      ctx.log.warn({ err, hold: held.id }, 'AI settle met a database fault before it committed; settling again');
    }
  }
}

/** A fault of the database rather than of the statement: its connection lost, or a statement it gave up on (rolled back). */
function isDatabaseFault(err: unknown): boolean {
  return isLostConnection(err) || isTransientError(err);
}

/** The connection was lost: whether what was sent committed is unknown. */
function isLostConnection(err: unknown): boolean {
  return err instanceof ServiceUnavailableError || isConnectionError(err);
}

/** Waits before each look at whether a settle committed: the pool replaces a lost connection at once. */
const SETTLE_LOOK_WAITS_MS = [0, 250, 1_000];

/** Whether the call's settle committed (its hold settled, or a call without one recorded); null when the database cannot be read. */
async function wasSettled(ctx: Ctx, deploymentId: string, held: CallHold): Promise<boolean | null> {
  for (const wait of SETTLE_LOOK_WAITS_MS) {
    if (wait > 0) await pause(wait);
    try {
      if (held.skipped) {
        const rows = await ctx.db.query('SELECT 1 FROM ai_usage_requests WHERE deployment_id = $1 AND request_id = $2', [deploymentId, held.id]);
        return rows.length > 0;
      }
      const rows = await ctx.db.query<{ status: string }>('SELECT status FROM ai_reservations WHERE id = $1 AND deployment_id = $2', [held.id, deploymentId]);
      return rows[0]?.status === 'settled';
    } catch (err) {
      if (!isDatabaseFault(err)) throw err;
    }
  }
  return null;
}

/** Settle where there is no one left to answer (a stream under way, a client gone): a failure is logged. */
export async function settleQuietly(call: ChatCall, plan: CallPlan, held: CallHold, reported: ReportedUsage, relayed: () => number): Promise<void> {
  try {
    await settle(call.ctx, call.deployment, plan, held, reported, relayed);
  } catch (err) {
    call.ctx.log.error({ err, hold: held.id }, 'AI call not settled; its hold expires through the ai-hold-expiry worker');
  }
}

/**
 * Give a hold back (nothing was produced). A release that meets a database fault is tried again in the
 * background (RELEASE_RETRY_WAITS_MS), then left to the ai-hold-expiry worker; nothing was charged either way.
 */
export async function release(ctx: Ctx, deployment: AiDeployment, held: CallHold): Promise<void> {
  if (held.skipped) return;
  try {
    await releaseAiHold(ctx.db, deployment.id, held.id, ctx.clock.now());
  } catch (err) {
    if (!isDatabaseFault(err)) {
      ctx.log.warn({ err, hold: held.id }, 'AI hold not released; the ai-hold-expiry worker will');
      return;
    }
    ctx.log.warn({ err, hold: held.id }, 'AI hold not released (database fault); trying again');
    await releaseInBackground(ctx, deployment.id, held.id, 'release');
  }
}

/**
 * Waits before each try of giving back a hold after a database fault (docs/ai-proxy.md, Database faults):
 * at once on a fresh connection, then with a backoff, about 30 s in all; then the worker's.
 */
export const RELEASE_RETRY_WAITS_MS = [0, 1_000, 4_000, 10_000, 15_000];
/** How long the call's answer waits for the first of those tries (the rest never hold it up). */
const FIRST_RELEASE_WAIT_MS = 1_000;

/**
 * Give back hold `holdId` in the background, retried on database faults. After a hold whose outcome is
 * unknown (`hold`) the row may not exist (nothing committed) or its COMMIT may still be on its way: it
 * is looked for twice before giving up; releasing an id that is not held does nothing. Resolves when the
 * first try ended, or after FIRST_RELEASE_WAIT_MS.
 */
function releaseInBackground(ctx: Ctx, deploymentId: string, holdId: string, after: 'hold' | 'release'): Promise<void> {
  let firstTried: () => void = () => {};
  const first = new Promise<void>((resolve) => {
    firstTried = resolve;
  });
  const tries = async () => {
    let absent = 0;
    for (const wait of RELEASE_RETRY_WAITS_MS) {
      if (wait > 0) await pause(wait);
      try {
        const released = await releaseAiHold(ctx.db, deploymentId, holdId, ctx.clock.now());
        if (released) ctx.log.info({ hold: holdId, after }, 'AI hold released after a database fault');
        // Not held: never committed, or settled, released or expired since; after a hold, looked for once more.
        if (released || after === 'release' || ++absent >= 2) return;
      } catch (err) {
        if (!isDatabaseFault(err)) {
          ctx.log.warn({ err, hold: holdId, after }, 'AI hold not released; the ai-hold-expiry worker will');
          return;
        }
      } finally {
        firstTried();
      }
    }
    ctx.log.warn({ hold: holdId, after, tries: RELEASE_RETRY_WAITS_MS.length }, 'AI hold not released after a database fault; the ai-hold-expiry worker will');
  };
  void tries().catch((err: unknown) => ctx.log.error({ err, hold: holdId }, 'AI hold release retries failed'));
  return Promise.race([first, pause(FIRST_RELEASE_WAIT_MS)]);
}

/** A wait that keeps no process alive. */
function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
