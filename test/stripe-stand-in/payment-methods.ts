import { newId, randomToken } from './clock.js';
import { findOrThrow, invalidParam } from './errors.js';
import type { CardBehaviour, ListObject, Metadata, PaymentMethodObject, SetupIntentObject } from './objects.js';
import { type StandInContext, snapshot } from './state.js';

export const CARD_BEHAVIOURS: readonly CardBehaviour[] = ['ok', 'card_declined', 'authentication_required'];

/** The last four digits of Stripe's test card for each behaviour. */
const LAST4: Record<CardBehaviour, string> = { ok: '4242', card_declined: '0341', authentication_required: '3184' };

export interface SaveCardOptions {
  /** How the card answers later payments; default `ok`. */
  behaviour?: CardBehaviour;
  /** `true` makes it the customer's `invoice_settings.default_payment_method`, `false` leaves that alone; absent: only when there is none. */
  makeDefault?: boolean;
}

/**
 * A card PaymentMethod, attached to `customerId` (or used once, when `null`). Stripe emits
 * `payment_method.attached` here; the stand-in does not model that event.
 */
export function saveCard(ctx: StandInContext, customerId: string | null, options: SaveCardOptions = {}): PaymentMethodObject {
  const customer = customerId === null ? undefined : findOrThrow(ctx.state.customers, customerId, 'customer', 'customer');
  const behaviour = options.behaviour ?? 'ok';
  if (!CARD_BEHAVIOURS.includes(behaviour)) throw invalidParam('behaviour', `behaviour must be one of ${CARD_BEHAVIOURS.join(', ')}`);
  const now = ctx.clock.seconds();
  const method: PaymentMethodObject = {
    id: newId('pm_'),
    object: 'payment_method',
    allow_redisplay: 'unspecified',
    billing_details: { address: null, email: customer?.email ?? null, name: customer?.name ?? null, phone: null, tax_id: null },
    card: {
      brand: 'visa',
      checks: { address_line1_check: null, address_postal_code_check: null, cvc_check: 'pass' },
      country: 'US',
      display_brand: 'visa',
      exp_month: 12,
      exp_year: new Date(now * 1000).getUTCFullYear() + 3,
      fingerprint: randomToken(16),
      funding: 'credit',
      generated_from: null,
      last4: LAST4[behaviour],
      networks: { available: ['visa'], preferred: null },
      regulated_status: 'unregulated',
      three_d_secure_usage: { supported: true },
      wallet: null,
    },
    created: now,
    customer: customer?.id ?? null,
    customer_account: null,
    livemode: false,
    metadata: {},
    type: 'card',
  };
  ctx.state.paymentMethods.set(method.id, method);
  ctx.state.cardBehaviours.set(method.id, { payment_method: method.id, behaviour });
  if (customer && (options.makeDefault ?? customer.invoice_settings.default_payment_method === null)) {
    customer.invoice_settings.default_payment_method = method.id;
  }
  return snapshot(method);
}

/** Changes how a saved card answers from now on (a card that starts declining, or works again). */
export function setCardBehaviour(ctx: StandInContext, paymentMethodId: string, behaviour: CardBehaviour): PaymentMethodObject {
  const method = findOrThrow(ctx.state.paymentMethods, paymentMethodId, 'payment_method');
  if (!CARD_BEHAVIOURS.includes(behaviour)) throw invalidParam('behaviour', `behaviour must be one of ${CARD_BEHAVIOURS.join(', ')}`);
  ctx.state.cardBehaviours.set(method.id, { payment_method: method.id, behaviour });
  return snapshot(method);
}

export function cardBehaviour(ctx: StandInContext, paymentMethodId: string): CardBehaviour {
  return ctx.state.cardBehaviours.get(paymentMethodId)?.behaviour ?? 'ok';
}

/** The succeeded SetupIntent of a setup-mode Checkout Session. */
export function succeededSetupIntent(ctx: StandInContext, input: { customer: string; paymentMethod: string; metadata: Metadata }): SetupIntentObject {
  const id = newId('seti_');
  const intent: SetupIntentObject = {
    id,
    object: 'setup_intent',
    cancellation_reason: null,
    client_secret: `${id}_secret_${randomToken(24)}`,
    created: ctx.clock.seconds(),
    customer: input.customer,
    description: null,
    last_setup_error: null,
    latest_attempt: null,
    livemode: false,
    mandate: null,
    metadata: { ...input.metadata },
    next_action: null,
    on_behalf_of: null,
    payment_method: input.paymentMethod,
    payment_method_types: ['card'],
    single_use_mandate: null,
    status: 'succeeded',
    usage: 'off_session',
  };
  ctx.state.setupIntents.set(id, intent);
  return snapshot(intent);
}

export interface PaymentMethodListInput {
  type?: string;
  /** 1 to 100, default 10. */
  limit?: number;
  startingAfter?: string;
}

/** `GET /v1/customers/:id/payment_methods`: the customer's cards, newest first. */
export function listPaymentMethods(ctx: StandInContext, customerId: string, input: PaymentMethodListInput): Omit<ListObject<PaymentMethodObject>, 'total_count'> {
  findOrThrow(ctx.state.customers, customerId, 'customer');
  const limit = input.limit ?? 10;
  if (limit < 1 || limit > 100) throw invalidParam('limit', 'Invalid integer: limit must be between 1 and 100');
  let cards = [...ctx.state.paymentMethods.values()].filter((pm) => pm.customer === customerId && (input.type === undefined || pm.type === input.type)).reverse();
  if (input.startingAfter !== undefined) {
    const at = cards.findIndex((pm) => pm.id === input.startingAfter);
    if (at < 0) throw invalidParam('starting_after', `No such payment_method: '${input.startingAfter}'`, 'resource_missing');
    cards = cards.slice(at + 1);
  }
  return { object: 'list', data: snapshot(cards.slice(0, limit)), has_more: cards.length > limit, url: `/v1/customers/${customerId}/payment_methods` };
}
