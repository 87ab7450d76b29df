import type Stripe from 'stripe';
import { type Ctx, type Deps, systemCtx } from '../../context.js';
import type { Queryable } from '../../db/client.js';
import { AppError, NotFoundError, ValidationError } from '../../errors.js';
import { isUuid } from '../../lib/ids.js';
import { writeAudit } from '../audit/service.js';
import {
  adoptPaymentIntent,
  askAutoTopUp,
  type AutoTopUpRow,
  autoTopUpOfPaymentIntent,
  fixPaymentMethod,
  grantAutoTopUp,
  lockAutoTopUp,
  markFailed,
  markSkipped,
  markStarted,
  markStarting,
  retryAutoTopUpAt,
  setAutoTopUpLine,
  startedThisMonth,
} from '../credits/index.js';
import { emitEvent } from '../events/outbox.js';
import { authorize } from '../organizations/rbac.js';
import type { JobPolicy, JobQueue } from '../../workers/jobs.js';
import { retryAt } from '../../workers/jobs.js';
import { callStripe } from './checkout.js';
import { isTransientStripeError, requireStripe, Stripe as StripeSdk, stripeClient } from './stripe-client.js';
import { type EventOutcome, stripeId, wholeNumber } from './stripe-objects.js';
import { lockPayment, settleEarlyEvents } from './stripe-handlers.js';
import { billingAvailable } from './top-up-link.js';

/**
 * Auto top-up (docs/billing.md, "Auto top-up"): the organization's setting, the `auto-top-ups` worker
 * that turns a deployment's ask (written by the deduction that crossed the line, credits/auto-top-ups.ts)
 * into one off-session PaymentIntent, and the handlers of that PaymentIntent's events. Credits arrive
 * only with `payment_intent.succeeded` of a PaymentIntent this installation made and stored.
 */

/** Consecutive failures that switch auto top-up off. */
export const FAILURES_TO_DISABLE = 3;

export interface AutoTopUpSetting {
  enabled: boolean;
  below_credits: number | null;
  pack: string | null;
  max_per_month: number | null;
  consecutive_failures: number;
  disabled_reason: string | null;
  updated_at: string | null;
}

interface SettingRow {
  organization_id: string;
  enabled: boolean;
  below_credits: number;
  pack: string;
  max_per_month: number;
  consecutive_failures: number;
  disabled_reason: string | null;
  updated_at: Date;
}

const OFF: AutoTopUpSetting = {
  enabled: false,
  below_credits: null,
  pack: null,
  max_per_month: null,
  consecutive_failures: 0,
  disabled_reason: null,
  updated_at: null,
};

const viewOf = (row: SettingRow | undefined): AutoTopUpSetting =>
  row
    ? {
        enabled: row.enabled,
        below_credits: row.below_credits,
        pack: row.pack,
        max_per_month: row.max_per_month,
        consecutive_failures: row.consecutive_failures,
        disabled_reason: row.disabled_reason,
        updated_at: row.updated_at.toISOString(),
      }
    : OFF;

async function settingOf(db: Queryable, organizationId: string, lock = false): Promise<SettingRow | undefined> {
  const rows = await db.query<SettingRow>(`SELECT * FROM auto_top_up_settings WHERE organization_id = $1${lock ? ' FOR UPDATE' : ''}`, [organizationId]);
  return rows[0];
}

/**
 * Owners and admins (`billing.manage`; a key needs `admin`), or the operator on any organization that
 * exists (its routes are the operator API's; its reads are audited too, docs/operator.md).
 */
async function access(ctx: Ctx, organizationId: string): Promise<void> {
  if (ctx.actor.type === 'operator') {
    const rows = isUuid(organizationId) ? await ctx.db.query('SELECT 1 FROM organizations WHERE id = $1 AND deleted_at IS NULL', [organizationId]) : [];
    if (rows.length === 0) throw new NotFoundError('Organization');
    return;
  }
  await authorize(ctx, organizationId, 'billing.manage');
}

/** GET: who may change it reads it. */
export async function readAutoTopUp(ctx: Ctx, organizationId: string): Promise<AutoTopUpSetting> {
  await access(ctx, organizationId);
  const setting = viewOf(await settingOf(ctx.db, organizationId));
  if (ctx.actor.type === 'operator') await writeAudit(ctx.db, ctx, { organizationId, action: 'read', resourceType: 'auto_top_up', resourceId: organizationId });
  return setting;
}

export interface AutoTopUpInput {
  enabled: boolean;
  below_credits: number;
  pack: string;
  max_per_month: number;
}

interface PrimaryDeployment {
  id: string;
  status: string;
  tier: string;
  flag_overrides: Record<string, unknown> | null;
  org_deleted: boolean;
  stripe_customer_id: string | null;
}

/** The saved payment method an off-session payment is taken from: the customer's invoice default, else its newest card. */
async function defaultPaymentMethod(stripe: Stripe, customerId: string): Promise<string | null> {
  const customer = await callStripe('to read the customer', () => stripe.customers.retrieve(customerId));
  if ('deleted' in customer && customer.deleted) return null;
  const fromSettings = stripeId((customer as Stripe.Customer).invoice_settings?.default_payment_method ?? null);
  if (fromSettings) return fromSettings;
  const cards = await callStripe('to list the saved cards', () => stripe.customers.listPaymentMethods(customerId, { type: 'card', limit: 1 }));
  return cards.data[0]?.id ?? null;
}

/**
 * PUT: the whole setting (owners and admins; a key needs `admin`; audited). Enabling needs billing
 * available on the primary deployment and a saved payment method on the organization's Stripe
 * customer; otherwise 409 naming what is missing, nothing written. A change puts the line on every
 * balance row of the organization (or takes it off), and resets the failure count when enabling.
 */
export async function putAutoTopUp(ctx: Ctx, organizationId: string, input: AutoTopUpInput): Promise<AutoTopUpSetting> {
  await access(ctx, organizationId);
  if (!Object.hasOwn(ctx.config.creditPacks, input.pack)) {
    const names = Object.keys(ctx.config.creditPacks);
    throw new ValidationError(`Unknown pack ${input.pack}`, [{ field: 'pack', message: names.length > 0 ? `one of ${names.join(', ')}` : 'no credit packs are configured (CREDIT_PACKS)' }]);
  }
  if (input.enabled) {
    const rows = await ctx.db.query<PrimaryDeployment>(
      `SELECT d.id, d.status, d.tier, d.flag_overrides, o.deleted_at IS NOT NULL AS org_deleted, o.stripe_customer_id
       FROM organizations o LEFT JOIN deployments d ON d.organization_id = o.id AND d.is_primary
       WHERE o.id = $1`,
      [organizationId],
    );
    const primary = rows[0];
    const missing: string[] = [];
    // Credits arrive only with Stripe's event: without the webhook secret no top-up could ever be granted.
    if (!ctx.config.stripeWebhookSecret) missing.push('stripe_webhook_secret');
    if (!primary?.id || !billingAvailable(ctx.config, primary)) missing.push('billing_available');
    else {
      const stripe = requireStripe(ctx);
      const method = primary.stripe_customer_id ? await defaultPaymentMethod(stripe, primary.stripe_customer_id) : null;
      if (!method) missing.push('payment_method');
    }
    if (missing.length > 0) {
      const WHAT: Record<string, string> = {
        stripe_webhook_secret: "this installation receives no Stripe events (STRIPE_WEBHOOK_SECRET is not set), and a top-up's credits come only with its event",
        billing_available: 'billing is not available for the primary deployment (Stripe and credit packs configured, deployment active, billing_enabled)',
        payment_method: 'the organization has no saved payment method (pay a credit pack with the card saved for later, or save one)',
      };
      const what = missing.map((m) => WHAT[m]!);
      throw new AppError('CONFLICT', `Auto top-up cannot be enabled: ${what.join('; ')}`, { missing });
    }
  }
  const now = ctx.clock.now();
  return ctx.db.transaction(async (tx) => {
    // The balance rows first (the order every batch locks in), then the setting.
    await setAutoTopUpLine(tx, organizationId, input.enabled ? input.below_credits : null, now);
    const before = await settingOf(tx, organizationId, true);
    const rows = await tx.query<SettingRow>(
      `INSERT INTO auto_top_up_settings (organization_id, enabled, below_credits, pack, max_per_month, consecutive_failures, disabled_reason, updated_at)
       VALUES ($1, $2, $3, $4, $5, 0, NULL, $6)
       ON CONFLICT (organization_id) DO UPDATE SET enabled = EXCLUDED.enabled, below_credits = EXCLUDED.below_credits, pack = EXCLUDED.pack,
         max_per_month = EXCLUDED.max_per_month, updated_at = EXCLUDED.updated_at,
         consecutive_failures = CASE WHEN EXCLUDED.enabled THEN 0 ELSE auto_top_up_settings.consecutive_failures END,
         disabled_reason = CASE WHEN EXCLUDED.enabled THEN NULL ELSE auto_top_up_settings.disabled_reason END
       RETURNING *`,
      [organizationId, input.enabled, input.below_credits, input.pack, input.max_per_month, now],
    );
    const after = viewOf(rows[0]);
    await writeAudit(tx, ctx, {
      organizationId,
      action: 'update',
      resourceType: 'auto_top_up',
      resourceId: organizationId,
      metadata: { before: before ? viewOf(before) : null, after },
    });
    return after;
  });
}

/** The auto top-up events' data (docs/webhooks.md). */
function eventData(row: AutoTopUpRow, consecutiveFailures: number, failureCode?: string): Record<string, unknown> {
  return {
    deployment_id: row.deployment_id,
    pack: row.pack,
    credits: row.credits,
    payment_intent_id: row.stripe_payment_intent_id,
    consecutive_failures: consecutiveFailures,
    ...(failureCode !== undefined ? { failure_code: failureCode } : {}),
  };
}

/**
 * A top-up settled `failed` (markFailed said so, once): the organization's count of failures in a
 * row goes up, `auto_top_up.failed` is sent, and the third switches auto top-up off with
 * `auto_top_up.disabled`. Returns true when it was switched off: the caller then takes the line off the
 * balance rows in a transaction of its own (this one may hold one deployment's row already).
 */
async function failed(tx: Queryable, row: AutoTopUpRow, now: Date): Promise<boolean> {
  const counted = await tx.query<SettingRow>(
    `UPDATE auto_top_up_settings SET consecutive_failures = consecutive_failures + 1 WHERE organization_id = $1 RETURNING *`,
    [row.organization_id],
  );
  const setting = counted[0];
  const failures = setting?.consecutive_failures ?? 1;
  await emitEvent(tx, { organizationId: row.organization_id, deploymentId: row.deployment_id, type: 'auto_top_up.failed', data: eventData(row, failures, row.failure_code ?? 'payment_failed'), at: now });
  if (!setting?.enabled || failures < FAILURES_TO_DISABLE) return false;
  const reason = `${failures} consecutive failed top-ups (the last: ${row.failure_code ?? 'payment_failed'})`;
  await tx.query('UPDATE auto_top_up_settings SET enabled = false, disabled_reason = $2, updated_at = $3 WHERE organization_id = $1', [
    row.organization_id,
    reason,
    now,
  ]);
  await emitEvent(tx, { organizationId: row.organization_id, deploymentId: row.deployment_id, type: 'auto_top_up.disabled', data: eventData(row, failures), at: now });
  return true;
}

/** After a switch-off committed: no balance row of the organization asks any more. */
export async function takeLinesOff(deps: Pick<Deps, 'db' | 'clock'>, organizationId: string): Promise<void> {
  await deps.db.transaction(async (tx) => {
    const setting = await settingOf(tx, organizationId);
    if (!setting?.enabled) await setAutoTopUpLine(tx, organizationId, null, deps.clock.now());
  });
}

/** The `auto-top-ups` queue's policy (docs/jobs.md): Stripe unreachable is retried 30 s doubling up to 10 min, never given up. */
export const AUTO_TOP_UP_POLICY: JobPolicy = {
  batchSize: 20,
  leaseMs: 2 * 60_000,
  maxAttempts: null,
  backoff: { kind: 'exponential', baseMs: 30_000, factor: 2, capMs: 10 * 60_000, jitter: 0 },
  concurrency: 1,
};

type Claimed = { id: string; attempts: number };

/** One ask through to a stored PaymentIntent (or a skip, or a failure). */
async function startTopUp(deps: Deps, claimed: Claimed): Promise<'done' | 'retry'> {
  const ctx = systemCtx(deps);
  const stripe = stripeClient(deps);
  const row0 = (await deps.db.query<AutoTopUpRow>('SELECT * FROM auto_top_ups WHERE id = $1', [claimed.id]))[0];
  if (!row0 || (row0.status !== 'requested' && row0.status !== 'starting')) return 'done';
  try {
    if (row0.status === 'requested') {
      const setting = await settingOf(deps.db, row0.organization_id);
      const pack = setting ? ctx.config.creditPacks[setting.pack] : undefined;
      // The pack's price as Stripe has it now, read before the decision's transaction; one Stripe no
      // longer has (or refuses to show) means the pack is not sold, and the ask is skipped.
      const price = stripe && pack ? await stripe.prices.retrieve(pack.priceId).catch((error: unknown) => {
        if (isTransientStripeError(error)) throw error;
        return null;
      }) : null;
      const skipped = await deps.db.transaction(async (tx) => {
        // The row, then the setting: the order a failure's transaction takes them in.
        const row = await lockAutoTopUp(tx, row0.id);
        if (row?.status !== 'requested') return null;
        const locked = await settingOf(tx, row0.organization_id, true);
        const now = ctx.clock.now();
        const deployment = (
          await tx.query<PrimaryDeployment>(
            `SELECT d.id, d.status, d.tier, d.flag_overrides, o.deleted_at IS NOT NULL AS org_deleted, o.stripe_customer_id
             FROM deployments d JOIN organizations o ON o.id = d.organization_id WHERE d.id = $1`,
            [row.deployment_id],
          )
        )[0];
        let reason: string | null = null;
        let askAgain: 'next_month' | 'later' | null = 'later';
        if (!locked?.enabled) {
          reason = 'auto top-up is off';
          askAgain = null;
        } else if (!deployment || !billingAvailable(ctx.config, deployment)) reason = 'billing is not available for the deployment';
        else if (!pack || !price || locked.pack !== setting?.pack) reason = `the pack ${locked.pack} is not sold`;
        else if (typeof price.unit_amount !== 'number' || !Number.isSafeInteger(price.unit_amount)) reason = `the price of the pack ${locked.pack} has no amount`;
        else if ((await startedThisMonth(tx, row.organization_id, now)) >= locked.max_per_month) {
          reason = `max_per_month (${locked.max_per_month}) reached`;
          askAgain = 'next_month';
        }
        if (reason) {
          await markSkipped(tx, row.id, reason, now, askAgain);
          return { reason, off: !locked?.enabled };
        }
        await markStarting(tx, row.id, { pack: locked!.pack, credits: pack!.credits, priceId: pack!.priceId, amount: price!.unit_amount!, currency: price!.currency, now });
        return null;
      });
      if (skipped) {
        deps.log.info({ autoTopUp: row0.id, reason: skipped.reason }, 'auto top-up skipped');
        if (skipped.off) await takeLinesOff(deps, row0.organization_id);
        return 'done';
      }
    }
    const row = (await deps.db.query<AutoTopUpRow>('SELECT * FROM auto_top_ups WHERE id = $1', [claimed.id]))[0];
    if (row?.status !== 'starting') return 'done';
    if (!stripe) return settleFailure(deps, row, null, 'billing_not_configured');
    const customer = (await deps.db.query<{ stripe_customer_id: string | null }>('SELECT stripe_customer_id FROM organizations WHERE id = $1', [row.organization_id]))[0]
      ?.stripe_customer_id;
    let chosen: string | null;
    try {
      chosen = row.payment_method ?? (customer ? await defaultPaymentMethod(stripe, customer) : null);
    } catch (error) {
      // Stripe unreachable: the lease makes the job due again. Stripe refusing to show the customer: a failure.
      if (error instanceof AppError && error.code === 'SERVICE_UNAVAILABLE') throw error;
      return settleFailure(deps, row, null, 'payment_method_unavailable');
    }
    if (!customer || !chosen) return settleFailure(deps, row, null, 'no_payment_method');
    // The first card chosen stays: a retry under the same idempotency key must send the same request.
    const method = await deps.db.transaction((tx) => fixPaymentMethod(tx, row.id, chosen));
    if (!method) return 'done';
    const metadata = {
      organization_id: row.organization_id,
      deployment_id: row.deployment_id,
      creditgate_pack: row.pack!,
      creditgate_credits: String(row.credits),
      creditgate_price: row.stripe_price_id!,
      creditgate_auto_top_up: row.id,
    };
    let intent: Stripe.PaymentIntent;
    try {
      // One PaymentIntent per ask, whatever the retries: the row's id is the idempotency key.
      intent = await stripe.paymentIntents.create(
        {
          amount: row.amount!,
          currency: row.currency!,
          customer,
          payment_method: method,
          off_session: true,
          confirm: true,
          description: `creditgate auto top-up: ${row.pack}`,
          metadata,
        },
        { idempotencyKey: `creditgate-auto-top-up-${row.id}` },
      );
    } catch (error) {
      if (error instanceof StripeSdk.errors.StripeCardError) {
        const raw = error.raw as { payment_intent?: { id?: unknown } };
        const intentId = typeof raw.payment_intent?.id === 'string' ? raw.payment_intent.id : null;
        return settleFailure(deps, row, intentId, error.code ?? 'card_declined');
      }
      if (isTransientStripeError(error)) throw error;
      return settleFailure(deps, row, null, (error as { code?: string }).code ?? 'payment_provider_error');
    }
    // Off-session, Stripe answers succeeded (or processing) or refuses with a card error; a PaymentIntent
    // left waiting for the customer (requires_action …) or canceled will not be paid: a failure now.
    if (intent.status !== 'succeeded' && intent.status !== 'processing') {
      return settleFailure(deps, row, intent.id, intent.last_payment_error?.code ?? intent.status);
    }
    const stored = await deps.db.transaction((tx) => markStarted(tx, row.id, intent.id, ctx.clock.now()));
    if (!stored) deps.log.warn({ autoTopUp: row.id, paymentIntent: intent.id }, 'auto top-up: the PaymentIntent could not be stored on its row');
    return 'done';
  } catch (error) {
    if (!isTransientStripeError(error)) throw error;
    await deps.db.transaction((tx) =>
      retryAutoTopUpAt(tx, claimed.id, retryAt(AUTO_TOP_UP_POLICY, claimed.attempts + 1, ctx.clock.now()), (error as Error).message),
    );
    return 'retry';
  }
}

async function settleFailure(deps: Deps, row: AutoTopUpRow, paymentIntentId: string | null, code: string): Promise<'done'> {
  const now = deps.clock.now();
  const off = await deps.deductions.within(row.deployment_id, async (tx) => {
    const settled = await markFailed(tx, { id: row.id, paymentIntentId, failureCode: code, now });
    return settled ? failed(tx, settled, now) : false;
  });
  if (off) await takeLinesOff(deps, row.organization_id);
  return 'done';
}

/**
 * The `auto-top-ups` queue (docs/jobs.md): asks and top-ups whose PaymentIntent is not made yet, due,
 * leased by moving next_attempt_at. A `starting` row left by a crash is made again under the same
 * idempotency key: Stripe answers the PaymentIntent it made the first time.
 */
export const AUTO_TOP_UP_QUEUE: JobQueue<Claimed, Deps> = {
  name: 'auto-top-ups',
  table: 'auto_top_ups',
  policy: AUTO_TOP_UP_POLICY,
  claim: {
    name: 'auto-top-ups',
    table: 'auto_top_ups',
    key: 'id',
    pending: "q.status IN ('requested', 'starting')",
    dueAt: 'q.next_attempt_at',
    lease: { kind: 'due', column: 'next_attempt_at' },
    orderBy: 'q.requested_at, q.id',
    returning: 'j.id, j.attempts',
  },
  keyOf: (row) => row.id,
  async handle({ row }, deps) {
    return startTopUp(deps, row);
  },
};

/** The deployment a PaymentIntent event may change the balance of: a stored auto top-up's. */
export async function deploymentOfPaymentIntent(db: Queryable, object: unknown): Promise<string | null> {
  const id = (object as { id?: unknown }).id;
  if (typeof id !== 'string') return null;
  return (await autoTopUpOfPaymentIntent(db, id))?.deployment_id ?? null;
}

/**
 * A PaymentIntent event that names no stored top-up: one of ours whose row is still `starting` (the
 * worker has not stored Stripe's answer yet) is handled later (thrown: the event stays pending);
 * anything else grants nothing.
 */
async function notStored(tx: Queryable, intent: Stripe.PaymentIntent): Promise<EventOutcome & { adopted?: AutoTopUpRow }> {
  const askId = intent.metadata?.creditgate_auto_top_up;
  if (typeof askId !== 'string') return { ignored: 'not an auto top-up PaymentIntent' };
  const rows = await tx.query<AutoTopUpRow & { stripe_customer_id: string | null }>(
    'SELECT t.*, o.stripe_customer_id FROM auto_top_ups t JOIN organizations o ON o.id = t.organization_id WHERE t.id::text = $1',
    [askId],
  );
  const row = rows[0];
  if (row?.status === 'starting' || row?.status === 'requested') throw new Error(`auto top-up ${askId}: its PaymentIntent is not stored yet; retried later`);
  // A top-up settled failed before its PaymentIntent was stored (the answer lost, a retry refused) whose
  // PaymentIntent was paid after all: adopted when it is the organization's customer's, for the row's
  // amount and currency (the grant checks those again), so money taken is never left without its credits.
  if (
    row?.status === 'failed' &&
    row.stripe_payment_intent_id === null &&
    stripeId(intent.customer) !== null &&
    stripeId(intent.customer) === row.stripe_customer_id &&
    (await adoptPaymentIntent(tx, row.id, intent.id))
  ) {
    return { organizationId: row.organization_id, adopted: row };
  }
  return { ignored: 'a PaymentIntent of no stored auto top-up: nothing granted', refused: true, ...(row ? { organizationId: row.organization_id } : {}) };
}

/** `payment_intent.succeeded`: a stored top-up's credits, once; another ask when the deployment is still below the line. */
export async function handlePaymentIntentSucceeded(tx: Queryable, ctx: Ctx, intent: Stripe.PaymentIntent): Promise<EventOutcome> {
  const now = ctx.clock.now();
  await lockPayment(tx, intent.id);
  const result = await grantAutoTopUp(tx, {
    paymentIntentId: intent.id,
    amount: wholeNumber(intent.amount_received ?? intent.amount),
    currency: typeof intent.currency === 'string' ? intent.currency.slice(0, 10) : null,
    now,
  });
  if (!result.granted && result.reason === 'not stored') {
    const outcome = await notStored(tx, intent);
    if (!outcome.adopted) return outcome;
    return handlePaymentIntentSucceeded(tx, ctx, intent);
  }
  if (!result.granted) {
    const organizationId = result.row!.organization_id;
    if (result.reason === 'amount or currency differs') return { organizationId, ignored: 'amount or currency is not the stored top-up\'s: nothing granted', refused: true };
    return { organizationId, ignored: result.reason === 'already granted' ? 'auto top-up already granted' : `auto top-up is ${result.row!.status}` };
  }
  const row = result.row;
  await settleEarlyEvents(tx, ctx, intent.id);
  const setting = await tx.query<SettingRow>('UPDATE auto_top_up_settings SET consecutive_failures = 0 WHERE organization_id = $1 RETURNING *', [row.organization_id]);
  await emitEvent(tx, { organizationId: row.organization_id, deploymentId: row.deployment_id, type: 'auto_top_up.succeeded', data: eventData(row, 0), at: now });
  if (result.stillBelow && setting[0]?.enabled) await askAutoTopUp(tx, row.organization_id, row.deployment_id, now);
  return { organizationId: row.organization_id };
}

/** `payment_intent.canceled`: as a failure (canceled in the Dashboard, or by Stripe): the top-up will not be paid. */
export function handlePaymentIntentCanceled(tx: Queryable, ctx: Ctx, intent: Stripe.PaymentIntent): Promise<EventOutcome> {
  return handlePaymentIntentFailed(tx, ctx, { ...intent, last_payment_error: intent.last_payment_error ?? ({ code: 'canceled' } as Stripe.PaymentIntent.LastPaymentError) });
}

/** `payment_intent.payment_failed`: a stored top-up settled failed, once (the worker may have settled it from Stripe's answer already). */
export async function handlePaymentIntentFailed(tx: Queryable, ctx: Ctx, intent: Stripe.PaymentIntent): Promise<EventOutcome> {
  const row = await autoTopUpOfPaymentIntent(tx, intent.id);
  if (!row) return notStored(tx, intent);
  const code = intent.last_payment_error?.code ?? 'payment_failed';
  const now = ctx.clock.now();
  const settled = await markFailed(tx, { id: row.id, paymentIntentId: intent.id, failureCode: code, now });
  if (!settled) return { organizationId: row.organization_id, ignored: `auto top-up already ${row.status}` };
  const off = await failed(tx, settled, now);
  return { organizationId: row.organization_id, ...(off ? { autoTopUpOff: row.organization_id } : {}) };
}

