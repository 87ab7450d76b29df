import { newId, randomToken } from './clock.js';
import { findOrThrow, invalidParam, invalidRequest, StripeApiError } from './errors.js';
import type { ChargeObject, DisputeObject, Metadata, PaymentIntentObject, PaymentMethodObject, RefundObject } from './objects.js';
import { cardBehaviour } from './payment-methods.js';
import { type StandInContext, changedFields, snapshot } from './state.js';

export interface PaymentInput {
  amount: number;
  currency: string;
  customer: string | null;
  description: string | null;
  metadata: Metadata;
  paymentMethod?: string | null;
  setupFutureUsage?: 'off_session' | 'on_session' | null;
  /** `processing` leaves the money on its way (a bank debit); settle it with `settlePayment`. */
  outcome: 'succeeded' | 'processing';
}

type ChargeStatus = ChargeObject['status'];

/** A charge of `intent`; as Stripe does, it copies the intent's metadata. */
function buildCharge(ctx: StandInContext, intent: PaymentIntentObject, paymentMethod: string | null, status: ChargeStatus): ChargeObject {
  const succeeded = status === 'succeeded';
  return {
    id: newId('ch_'),
    object: 'charge',
    amount: intent.amount,
    amount_captured: succeeded ? intent.amount : 0,
    amount_refunded: 0,
    balance_transaction: null,
    captured: succeeded,
    created: ctx.clock.seconds(),
    currency: intent.currency,
    customer: intent.customer,
    description: intent.description,
    disputed: false,
    failure_code: null,
    failure_message: null,
    livemode: false,
    metadata: { ...intent.metadata },
    paid: succeeded,
    payment_intent: intent.id,
    payment_method: paymentMethod,
    receipt_url: null,
    refunded: false,
    status,
  };
}

function buildIntent(ctx: StandInContext, input: Omit<PaymentInput, 'outcome'>, status: PaymentIntentObject['status']): PaymentIntentObject {
  const id = newId('pi_');
  return {
    id,
    object: 'payment_intent',
    amount: input.amount,
    amount_capturable: 0,
    amount_received: 0,
    canceled_at: null,
    capture_method: 'automatic',
    client_secret: `${id}_secret_${randomToken(24)}`,
    confirmation_method: 'automatic',
    created: ctx.clock.seconds(),
    currency: input.currency,
    customer: input.customer,
    description: input.description,
    last_payment_error: null,
    latest_charge: null,
    livemode: false,
    metadata: { ...input.metadata },
    payment_method: input.paymentMethod ?? null,
    payment_method_types: ['card'],
    setup_future_usage: input.setupFutureUsage ?? null,
    status,
  };
}

/** A confirmed payment (Checkout's): a PaymentIntent and its charge. Emits nothing; the caller does. */
export function createPayment(ctx: StandInContext, input: PaymentInput): { intent: PaymentIntentObject; charge: ChargeObject } {
  const succeeded = input.outcome === 'succeeded';
  const intent = buildIntent(ctx, input, input.outcome);
  const charge = buildCharge(ctx, intent, input.paymentMethod ?? null, succeeded ? 'succeeded' : 'pending');
  intent.latest_charge = charge.id;
  intent.amount_received = succeeded ? input.amount : 0;
  ctx.state.paymentIntents.set(intent.id, intent);
  ctx.state.charges.set(charge.id, charge);
  return { intent: snapshot(intent), charge: snapshot(charge) };
}

export interface PaymentIntentInput {
  amount: number;
  currency: string;
  customer?: string;
  paymentMethod?: string;
  offSession?: boolean;
  confirm?: boolean;
  description?: string;
  metadata: Metadata;
}

/** What a declining card answers, as Stripe's test cards 4000 0000 0000 0341 and 4000 0027 6000 3184 do off-session. */
const DECLINES = {
  card_declined: {
    code: 'card_declined',
    decline_code: 'generic_decline',
    message: 'Your card was declined.',
    doc_url: 'https://stripe.com/docs/error-codes/card-declined',
  },
  authentication_required: {
    code: 'authentication_required',
    decline_code: 'authentication_required',
    message: 'Your card was declined. This transaction requires authentication.',
    doc_url: 'https://stripe.com/docs/error-codes/authentication-required',
  },
} as const;

/**
 * `POST /v1/payment_intents`. Without `confirm` the intent waits (`requires_confirmation`, or
 * `requires_payment_method` without a card). With `confirm`, the card's behaviour decides: `ok` →
 * `succeeded`, a succeeded charge and `payment_intent.succeeded`; a declining card → a failed charge,
 * `requires_payment_method` with `last_payment_error`, `payment_intent.payment_failed`, and a 402
 * `card_error` carrying the intent and the card (the SDK's `StripeCardError`).
 */
export function createPaymentIntent(ctx: StandInContext, input: PaymentIntentInput): PaymentIntentObject {
  const method = checkPaymentIntentInput(ctx, input);
  const intent = buildIntent(
    ctx,
    { amount: input.amount, currency: input.currency, customer: input.customer ?? null, description: input.description ?? null, metadata: input.metadata, paymentMethod: method?.id ?? null },
    method ? 'requires_confirmation' : 'requires_payment_method',
  );
  ctx.state.paymentIntents.set(intent.id, intent);
  if (!input.confirm || !method) return snapshot(intent);
  const behaviour = cardBehaviour(ctx, method.id);
  if (behaviour === 'ok') {
    const charge = buildCharge(ctx, intent, method.id, 'succeeded');
    ctx.state.charges.set(charge.id, charge);
    intent.status = 'succeeded';
    intent.amount_received = intent.amount;
    intent.latest_charge = charge.id;
    ctx.emit('payment_intent.succeeded', intent);
    return snapshot(intent);
  }
  const decline = DECLINES[behaviour];
  const charge = buildCharge(ctx, intent, method.id, 'failed');
  charge.failure_code = decline.code;
  charge.failure_message = decline.message;
  ctx.state.charges.set(charge.id, charge);
  intent.status = 'requires_payment_method';
  intent.payment_method = null;
  intent.latest_charge = charge.id;
  intent.last_payment_error = { type: 'card_error', charge: charge.id, ...decline, payment_method: snapshot(method) };
  ctx.emit('payment_intent.payment_failed', intent);
  throw new StripeApiError(402, { type: 'card_error', charge: charge.id, ...decline, payment_intent: snapshot(intent), payment_method: snapshot(method) });
}

function checkPaymentIntentInput(ctx: StandInContext, input: PaymentIntentInput): PaymentMethodObject | undefined {
  if (input.amount < 1) throw invalidParam('amount', 'Invalid positive integer');
  if (!/^[a-z]{3}$/.test(input.currency)) throw invalidParam('currency', `Invalid currency: ${input.currency}`);
  if (input.customer !== undefined) findOrThrow(ctx.state.customers, input.customer, 'customer', 'customer');
  const method = input.paymentMethod === undefined ? undefined : findOrThrow(ctx.state.paymentMethods, input.paymentMethod, 'PaymentMethod', 'payment_method');
  if (input.offSession && !input.confirm) throw invalidParam('off_session', 'You can only pass `off_session` when `confirm` is true.');
  if (input.confirm && !method) {
    throw invalidParam(
      'payment_method',
      "You cannot confirm this PaymentIntent because it's missing a payment method. To charge a saved card, pass `payment_method` (a card attached to the customer) with `customer`.",
      'parameter_missing',
    );
  }
  if (method && method.customer === null) {
    throw invalidParam(
      'payment_method',
      'The provided PaymentMethod was previously used with a PaymentIntent without Customer attachment. It may not be used again. To use a PaymentMethod multiple times, you must attach it to a Customer first.',
      'payment_method_unexpected_state',
    );
  }
  if (method && method.customer !== (input.customer ?? null)) {
    throw invalidParam(
      'payment_method',
      input.customer === undefined
        ? `The provided PaymentMethod ${method.id} is attached to a Customer; pass that Customer as \`customer\` to use it.`
        : `The provided PaymentMethod ${method.id} does not belong to the Customer ${input.customer}.`,
    );
  }
  return method;
}

/** The end of a `processing` payment: the bank debit cleared (`payment_intent.succeeded`), or bounced. */
export function settlePayment(ctx: StandInContext, intentId: string, succeeded: boolean): void {
  const intent = findOrThrow(ctx.state.paymentIntents, intentId, 'payment_intent');
  const charge = intent.latest_charge ? ctx.state.charges.get(intent.latest_charge) : undefined;
  intent.status = succeeded ? 'succeeded' : 'requires_payment_method';
  intent.amount_received = succeeded ? intent.amount : 0;
  if (succeeded) ctx.emit('payment_intent.succeeded', intent);
  if (!charge) return;
  charge.status = succeeded ? 'succeeded' : 'failed';
  charge.paid = succeeded;
  charge.captured = succeeded;
  charge.amount_captured = succeeded ? charge.amount : 0;
  if (!succeeded) {
    charge.failure_code = 'insufficient_funds';
    charge.failure_message = 'The customer’s account has insufficient funds to cover this payment.';
  }
}

export interface RefundInput {
  paymentIntent?: string;
  charge?: string;
  /** Defaults to what is left to refund. */
  amount?: number;
  reason?: string;
  metadata?: Metadata;
}

/** Refund part or all of a succeeded charge; emits `charge.refunded` with the charge's new totals. */
export function createRefund(ctx: StandInContext, input: RefundInput): RefundObject {
  const charge = chargeToRefund(ctx, input);
  const rest = charge.amount - charge.amount_refunded;
  if (rest === 0) throw invalidRequest(`Charge ${charge.id} has already been refunded.`, 'charge_already_refunded');
  const amount = input.amount ?? rest;
  if (amount < 1) throw invalidParam('amount', 'Invalid positive integer');
  if (amount > rest) {
    throw invalidParam('amount', `Refund amount (${amount}) is greater than unrefunded amount on charge (${rest})`, 'amount_too_large');
  }
  const refund: RefundObject = {
    id: newId('re_'),
    object: 'refund',
    amount,
    balance_transaction: null,
    charge: charge.id,
    created: ctx.clock.seconds(),
    currency: charge.currency,
    metadata: input.metadata ?? {},
    payment_intent: charge.payment_intent,
    reason: input.reason ?? null,
    receipt_number: null,
    status: 'succeeded',
  };
  ctx.state.refunds.set(refund.id, refund);
  const before = snapshot(charge);
  charge.amount_refunded += amount;
  charge.refunded = charge.amount_refunded === charge.amount;
  ctx.emit('charge.refunded', charge, changedFields(before, charge));
  return snapshot(refund);
}

function chargeToRefund(ctx: StandInContext, input: RefundInput): ChargeObject {
  if (input.charge !== undefined && input.paymentIntent !== undefined) {
    throw invalidRequest('You cannot specify both charge and payment_intent.');
  }
  let charge: ChargeObject | undefined;
  if (input.charge !== undefined) {
    charge = findOrThrow(ctx.state.charges, input.charge, 'charge', 'charge');
  } else if (input.paymentIntent !== undefined) {
    const intent = findOrThrow(ctx.state.paymentIntents, input.paymentIntent, 'payment_intent', 'payment_intent');
    charge = intent.latest_charge ? ctx.state.charges.get(intent.latest_charge) : undefined;
  } else {
    throw invalidRequest('One of the following params should be provided for this request: payment_intent or charge.', 'parameter_missing');
  }
  if (charge?.status !== 'succeeded') {
    throw invalidRequest('This payment has no succeeded charge to refund.', 'charge_not_refundable');
  }
  return charge;
}

/**
 * The cardholder disputes a succeeded charge (a chargeback): `charge.dispute.created`, then
 * `charge.dispute.funds_withdrawn`, as Stripe sends them for cards, whose funds leave at once. The
 * amount defaults to what is not refunded.
 */
export function disputeCharge(ctx: StandInContext, paymentIntentId: string, input: { amount?: number; reason?: string } = {}): DisputeObject {
  const charge = chargeToRefund(ctx, { paymentIntent: paymentIntentId });
  if (charge.disputed) throw invalidRequest(`Charge ${charge.id} is already disputed.`);
  const amount = input.amount ?? charge.amount - charge.amount_refunded;
  const dispute: DisputeObject = {
    id: newId('dp_'),
    object: 'dispute',
    amount,
    charge: charge.id,
    created: ctx.clock.seconds(),
    currency: charge.currency,
    is_charge_refundable: false,
    livemode: false,
    metadata: {},
    payment_intent: charge.payment_intent,
    reason: input.reason ?? 'fraudulent',
    status: 'needs_response',
  };
  ctx.state.disputes.set(dispute.id, dispute);
  charge.disputed = true;
  ctx.emit('charge.dispute.created', dispute);
  ctx.emit('charge.dispute.funds_withdrawn', dispute);
  return snapshot(dispute);
}

/** The dispute is decided: `charge.dispute.closed`; when won, `charge.dispute.funds_reinstated` before it. */
export function closeDispute(ctx: StandInContext, disputeId: string, outcome: 'won' | 'lost'): DisputeObject {
  const dispute = findOrThrow(ctx.state.disputes, disputeId, 'dispute', 'dispute');
  if (dispute.status !== 'needs_response') throw invalidRequest(`Dispute ${disputeId} is already closed.`);
  const before = snapshot(dispute);
  dispute.status = outcome;
  if (outcome === 'won') ctx.emit('charge.dispute.funds_reinstated', dispute, changedFields(before, dispute));
  ctx.emit('charge.dispute.closed', dispute, changedFields(before, dispute));
  return snapshot(dispute);
}
