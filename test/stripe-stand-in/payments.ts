import { newId, randomToken } from './clock.js';
import { findOrThrow, invalidParam, invalidRequest } from './errors.js';
import type { ChargeObject, Metadata, PaymentIntentObject, RefundObject } from './objects.js';
import { type StandInContext, changedFields, snapshot } from './state.js';

export interface PaymentInput {
  amount: number;
  currency: string;
  customer: string | null;
  description: string | null;
  metadata: Metadata;
  /** `processing` leaves the money on its way (a bank debit); settle it with `settlePayment`. */
  outcome: 'succeeded' | 'processing';
}

/** A confirmed payment: a PaymentIntent and its charge. As Stripe does, the charge copies the intent's metadata. */
export function createPayment(ctx: StandInContext, input: PaymentInput): { intent: PaymentIntentObject; charge: ChargeObject } {
  const now = ctx.clock.seconds();
  const succeeded = input.outcome === 'succeeded';
  const intentId = newId('pi_');
  const charge: ChargeObject = {
    id: newId('ch_'),
    object: 'charge',
    amount: input.amount,
    amount_captured: succeeded ? input.amount : 0,
    amount_refunded: 0,
    balance_transaction: null,
    captured: succeeded,
    created: now,
    currency: input.currency,
    customer: input.customer,
    description: input.description,
    disputed: false,
    failure_code: null,
    failure_message: null,
    livemode: false,
    metadata: { ...input.metadata },
    paid: succeeded,
    payment_intent: intentId,
    receipt_url: null,
    refunded: false,
    status: succeeded ? 'succeeded' : 'pending',
  };
  const intent: PaymentIntentObject = {
    id: intentId,
    object: 'payment_intent',
    amount: input.amount,
    amount_capturable: 0,
    amount_received: succeeded ? input.amount : 0,
    canceled_at: null,
    capture_method: 'automatic',
    client_secret: `${intentId}_secret_${randomToken(24)}`,
    confirmation_method: 'automatic',
    created: now,
    currency: input.currency,
    customer: input.customer,
    description: input.description,
    latest_charge: charge.id,
    livemode: false,
    metadata: { ...input.metadata },
    payment_method: null,
    payment_method_types: ['card'],
    status: input.outcome,
  };
  ctx.state.paymentIntents.set(intent.id, intent);
  ctx.state.charges.set(charge.id, charge);
  return { intent: snapshot(intent), charge: snapshot(charge) };
}

/** The end of a `processing` payment: the bank debit cleared, or bounced. */
export function settlePayment(ctx: StandInContext, intentId: string, succeeded: boolean): void {
  const intent = findOrThrow(ctx.state.paymentIntents, intentId, 'payment_intent');
  const charge = intent.latest_charge ? ctx.state.charges.get(intent.latest_charge) : undefined;
  intent.status = succeeded ? 'succeeded' : 'requires_payment_method';
  intent.amount_received = succeeded ? intent.amount : 0;
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
